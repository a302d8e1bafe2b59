"""Every attribute the Python front end sets on an op is declared by that op's registry entry,
with the same type (Fluid's attributes drifted between Python and C++).

Every public layer of loom.layers (control flow included) has a case below that builds it;
every optimizer, initializer, regularizer and gradient clip is exercised too. Two checks run
over what they build:
  * the values the Python code hands to append_op, before the C++ side converts them to the
    declared type (a float for an int attribute, an int for a bool, ... is drift);
  * every attribute of every op of the resulting programs (main and startup, every block,
    grad ops made by append_backward included), as stored.
A new layer without a case fails test_every_public_layer_has_a_case, naming the layer.
"""
import inspect

import numpy as np
import pytest

import loom as fluid
from loom import clip, core, initializer, layers, optimizer, regularizer
from loom.framework import Block, Operator

# The modules of loom.layers whose public callables are layers (tensor arrays and learning-rate
# schedules aside).
LAYER_MODULES = tuple("loom.layers." + m for m in (
    "activation", "tensor", "control_flow", "math", "nn", "loss", "metric", "sequence", "io",
    "recurrent", "static_rnn", "dynamic_rnn", "decode"))

# Public names of the layer modules that build no op, with the reason.
SKIP = {
    "data": "declares a feed variable; builds no op",
    "RNNCell": "an interface (its subclasses have cases)",
    "Decoder": "an interface (BeamSearchDecoder has a case)",
    "create_tensor": "declares a variable to assign to later; builds no op",
    "double_buffer": "accepted; returns its reader and builds no op",
    "py_reader": "declares the reader's feed variables; builds no op",
    "create_py_reader_by_data": "wraps existing feed variables; builds no op",
    "read_file": "returns a reader's variables; builds no op",
}


def _int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _float(v):
    return isinstance(v, (float, np.floating))


def _bool(v):
    return isinstance(v, (bool, np.bool_))


def _list_of(pred):
    return lambda v: isinstance(v, (list, tuple)) and all(pred(x) for x in v)


# Python values that stand for an attribute of each type (as op_info() spells types). A block
# attribute is given as the block's index.
PY_TYPES = {
    "int": _int,
    "long": _int,
    "float": _float,
    "string": lambda v: isinstance(v, str),
    "bool": _bool,
    "int list": _list_of(_int),
    "long list": _list_of(_int),
    "float list": _list_of(_float),
    "string list": _list_of(lambda x: isinstance(x, str)),
    "bool list": _list_of(_bool),
    "block": _int,
}


def declared_attrs(op_type, cache={}):
    if op_type not in cache:
        specs = {a["name"]: a["type"] for a in core.common_attrs()}
        specs.update({a["name"]: a["type"] for a in core.op_info(op_type)["attrs"]})
        cache[op_type] = specs
    return cache[op_type]


def public_layers():
    out = {}
    for name in dir(layers):
        obj = getattr(layers, name)
        if name.startswith("_") or not callable(obj):
            continue
        if getattr(obj, "__module__", None) in LAYER_MODULES:
            out[name] = obj
    return out


@pytest.fixture
def set_attrs(monkeypatch):
    """Records (op type, attrs) for every op the Python code builds and every attribute it
    sets afterwards, with the values as Python passed them."""
    calls = []
    add_op = Block._add_op
    set_attr = Operator._set_attr

    def recording_add_op(self, desc, index, type, inputs, outputs, attrs, infer_shape):
        calls.append((type, dict(attrs or {})))
        return add_op(self, desc, index, type, inputs, outputs, attrs, infer_shape)

    def recording_set_attr(self, name, value):
        calls.append((self.type, {name: value}))
        return set_attr(self, name, value)

    monkeypatch.setattr(Block, "_add_op", recording_add_op)
    monkeypatch.setattr(Operator, "_set_attr", recording_set_attr)
    return calls


def python_drift(calls, where):
    problems = []
    for op_type, attrs in calls:
        specs = declared_attrs(op_type)
        for name, value in attrs.items():
            if value is None:  # append_op skips None
                continue
            if name not in specs:
                problems.append("%s: Python sets attribute '%s' (= %r) that op '%s' does not "
                                "declare" % (where, name, value, op_type))
            elif not PY_TYPES[specs[name]](value):
                problems.append("%s: Python sets '%s.%s' to %r (%s), declared %s" % (
                    where, op_type, name, value, type(value).__name__, specs[name]))
    return problems


def program_drift(program, where):
    problems = []
    for block in program.blocks:
        for i in range(block.desc.op_size()):
            op = block.desc.op(i)
            specs = declared_attrs(op.type())
            for name in op.attr_names():
                at = "%s: block %d op #%d '%s'" % (where, block.idx, i, op.type())
                if name not in specs:
                    problems.append("%s has attribute '%s' it does not declare" % (at, name))
                elif op.attr_type(name) != specs[name]:
                    problems.append("%s: attribute '%s' is stored as %s, declared %s" % (
                        at, name, op.attr_type(name), specs[name]))
    return problems


# ------------------------------------------------------------------ layer cases
# Each case builds its layer from the inputs in `v` (see build_inputs).


def _branch(v):
    return lambda: layers.relu(v.x)


def _while(v):
    i = layers.fill_constant([1], "float32", 0.0)
    n = layers.fill_constant([1], "float32", 3.0)
    c = layers.less_than(i, n)
    loop = layers.While(c)
    with loop.block():
        layers.increment(i)
        layers.less_than(i, n, cond=c)


def _switch(v):
    out = layers.create_global_var([1], 0.0, "float32", persistable=True, name="switch_out")
    one = layers.fill_constant([1], "float32", 1.0)
    with layers.Switch() as switch:
        with switch.case(layers.less_than(one, layers.fill_constant([1], "float32", 2.0))):
            layers.assign(np.array([0.5], "float32"), out)
        with switch.case(layers.less_than(one, layers.fill_constant([1], "float32", 3.0))):
            layers.assign(one, out)
        with switch.default():
            layers.assign([0.25], out)


def _static_rnn(v):
    x = layers.reshape(v.x, [2, -1, 4])  # [time, batch, width]
    r = layers.StaticRNN()
    with r.step():
        w = r.step_input(x)
        m = r.memory(shape=[-1, 4], batch_ref=w)
        h = layers.fc([w, m], 4, act="tanh")
        r.update_memory(m, h)
        r.step_output(h)
    r()


def _dynamic_rnn(v):
    drnn = layers.DynamicRNN()
    with drnn.block():
        xt = drnn.step_input(v.seq)
        prev = drnn.memory(shape=[4])
        h = layers.fc([xt, prev], 4, act="tanh")
        drnn.update_memory(prev, h)
        drnn.output(h)
    drnn()


def _beam_search(v):
    dec = layers.BeamSearchDecoder(layers.GRUCell(4), 0, 1, 2,
                                   embedding_fn=lambda i: fluid.embedding(i, [10, 8]),
                                   output_fn=lambda x: layers.fc(x, 10))
    layers.dynamic_decode(dec, inits=layers.fc(v.x, 4), max_step_num=2, return_length=True)


def _ifelse(v):
    ie = layers.IfElse(layers.less_than(layers.slice(v.x, [1], [0], [1]),
                                        layers.fill_constant([1], "float32", 0.5)))
    with ie.true_block():
        ie.output(layers.fc(ie.input(v.x), 3))
    with ie.false_block():
        ie.output(layers.scale(layers.fc(ie.input(v.x), 3), 2.0))
    ie()


CASES = {
    "IfElse": _ifelse,
    "load": lambda v: layers.load(layers.create_tensor("float32"), "/no/such/file.npy"),
    "lstm": lambda v: layers.lstm(layers.reshape(v.x, [-1, 2, 4]),
                                  layers.fill_constant([4, 3, 5], "float32", 0.0),
                                  layers.fill_constant([4, 3, 5], "float32", 0.0), 2, 5, 2,
                                  dropout_prob=0.2, is_bidirec=True),
    "dynamic_lstmp": lambda v: layers.dynamic_lstmp(layers.fc(v.seq, 16), 16, 3,
                                                    cell_clip=1.0, proj_clip=2.0),
    "fill_constant": lambda v: layers.fill_constant([2, 3], "float32", 1.5),
    "create_global_var": lambda v: layers.create_global_var([1], 0, "int64", persistable=True),
    "create_parameter": lambda v: layers.create_parameter([3, 4], "float32", name="cp_w"),
    "increment": lambda v: layers.increment(layers.fill_constant([1], "float32", 0.0), 2.0),
    "zeros": lambda v: layers.zeros([2], "float32"),
    "ones": lambda v: layers.ones([2], "int64"),
    "uniform_random": lambda v: layers.uniform_random([2, 3], min=-2, max=2, seed=1),
    "gaussian_random": lambda v: layers.gaussian_random([2, 3], mean=1, std=2, seed=1),
    "assign": lambda v: layers.assign(v.x),
    "cast": lambda v: layers.cast(v.x, "float64"),
    "fc": lambda v: layers.fc([v.x, v.x], 4, act="relu"),
    "embedding": lambda v: layers.embedding(v.ids, size=[10, 4], padding_idx=0),
    "merge_selected_rows": lambda v: layers.merge_selected_rows(v.x),
    "get_tensor_from_selected_rows": lambda v: layers.get_tensor_from_selected_rows(v.x),
    "conv2d": lambda v: layers.conv2d(v.img, 4, 3, padding=1, groups=1, act="relu"),
    "pool2d": lambda v: layers.pool2d(v.img, 2, "avg", 2, ceil_mode=True),
    "batch_norm": lambda v: layers.batch_norm(v.img, is_test=False),
    "dropout": lambda v: layers.dropout(v.x, 0.3, seed=2,
                                        dropout_implementation="upscale_in_train"),
    "relu": lambda v: layers.relu(v.x),
    "sigmoid": lambda v: layers.sigmoid(v.x),
    "tanh": lambda v: layers.tanh(v.x),
    "gelu": lambda v: layers.gelu(v.x),
    "leaky_relu": lambda v: layers.leaky_relu(v.x, alpha=0.1),
    "exp": lambda v: layers.exp(v.x),
    "log": lambda v: layers.log(v.x),
    "sqrt": lambda v: layers.sqrt(v.x),
    "square": lambda v: layers.square(v.x),
    "abs": lambda v: layers.abs(v.x),
    "softmax": lambda v: layers.softmax(v.x, axis=1),
    "scale": lambda v: layers.scale(v.x, 2, 1, bias_after_scale=False, act="tanh"),
    "clip": lambda v: layers.clip(v.x, -1, 1),
    "elementwise_add": lambda v: layers.elementwise_add(v.img, v.bias, axis=1),
    "elementwise_sub": lambda v: layers.elementwise_sub(v.x, v.x),
    "elementwise_mul": lambda v: layers.elementwise_mul(v.x, v.x),
    "elementwise_div": lambda v: layers.elementwise_div(v.x, v.x),
    "elementwise_max": lambda v: layers.elementwise_max(v.x, v.x),
    "elementwise_min": lambda v: layers.elementwise_min(v.x, v.x),
    "elementwise_pow": lambda v: layers.elementwise_pow(v.x, v.x),
    "mul": lambda v: layers.mul(v.x, v.w),
    "matmul": lambda v: layers.matmul(v.x, v.w, alpha=0.5),
    "sums": lambda v: layers.sums([v.x, v.x]),
    "sum": lambda v: layers.sum(v.x),
    "mean": lambda v: layers.mean(v.x),
    "reduce_sum": lambda v: layers.reduce_sum(v.x, dim=1, keep_dim=True),
    "reduce_mean": lambda v: layers.reduce_mean(v.x),
    "reduce_max": lambda v: layers.reduce_max(v.x, dim=[0, 1]),
    "softmax_with_cross_entropy": lambda v: layers.softmax_with_cross_entropy(
        v.x, v.label, return_softmax=True),
    "cross_entropy": lambda v: layers.cross_entropy(layers.softmax(v.x), v.label),
    "square_error_cost": lambda v: layers.square_error_cost(v.x, v.x),
    "accuracy": lambda v: layers.accuracy(layers.softmax(v.x), v.label, k=2),
    "argmax": lambda v: layers.argmax(v.x, axis=1),
    "topk": lambda v: layers.topk(v.x, 2),
    "reshape": lambda v: layers.reshape(v.x, [-1, 2, 4]),
    "transpose": lambda v: layers.transpose(v.img, [0, 2, 3, 1]),
    "flatten": lambda v: layers.flatten(v.img, axis=2),
    "squeeze": lambda v: layers.squeeze(layers.unsqueeze(v.x, [1]), [1]),
    "unsqueeze": lambda v: layers.unsqueeze(v.x, [0]),
    "concat": lambda v: layers.concat([v.x, v.x], axis=1),
    "stack": lambda v: layers.stack([v.x, v.x], axis=1),
    "gather": lambda v: layers.gather(v.x, v.index),
    "layer_norm": lambda v: layers.layer_norm(v.img, begin_norm_axis=2, epsilon=1e-6),
    "split": lambda v: [layers.split(v.x, 2, dim=1), layers.split(v.x, [3, -1], dim=1)],
    "slice": lambda v: layers.slice(v.x, axes=[1], starts=[0], ends=[4]),
    "log_softmax": lambda v: layers.log_softmax(v.x),
    "zeros_like": lambda v: layers.zeros_like(v.x),
    "less_than": lambda v: layers.less_than(v.x, v.x),
    "less_equal": lambda v: layers.less_equal(v.x, v.x),
    "greater_than": lambda v: layers.greater_than(v.x, v.x),
    "greater_equal": lambda v: layers.greater_equal(v.x, v.x),
    "equal": lambda v: layers.equal(v.x, v.x),
    "not_equal": lambda v: layers.not_equal(v.x, v.x),
    "logical_and": lambda v: layers.logical_and(v.flag, v.flag),
    "logical_or": lambda v: layers.logical_or(v.flag, v.flag),
    "logical_xor": lambda v: layers.logical_xor(v.flag, v.flag),
    "logical_not": lambda v: layers.logical_not(v.flag),
    "cond": lambda v: layers.cond(v.pred, _branch(v), lambda: layers.tanh(v.x)),
    "case": lambda v: layers.case([(v.pred, _branch(v))], default=lambda: layers.exp(v.x)),
    "switch_case": lambda v: layers.switch_case(
        layers.fill_constant([1], "int32", 1), [_branch(v), lambda: layers.exp(v.x)]),
    "while_loop": lambda v: layers.while_loop(
        lambda i: layers.less_than(i, layers.fill_constant([1], "float32", 3.0)),
        lambda i: [layers.increment(i, in_place=False)],
        [layers.fill_constant([1], "float32", 0.0)]),
    "While": _while,
    "Switch": _switch,
    "GRUCell": lambda v: layers.GRUCell(4)(v.x, layers.fc(v.x, 4)),
    "LSTMCell": lambda v: layers.LSTMCell(4)(v.x, [layers.fc(v.x, 4), layers.fc(v.x, 4)]),
    "rnn": lambda v: layers.rnn(layers.GRUCell(4), layers.reshape(v.x, [-1, 2, 4]),
                                sequence_length=v.lengths),
    "birnn": lambda v: layers.birnn(layers.GRUCell(4), layers.LSTMCell(4),
                                    layers.reshape(v.x, [-1, 2, 4])),
    "StaticRNN": _static_rnn,
    "DynamicRNN": _dynamic_rnn,
    "BeamSearchDecoder": _beam_search,
    "dynamic_decode": _beam_search,
    "gather_tree": lambda v: layers.gather_tree(layers.fill_constant([3, 2, 2], "int64", 0),
                                                layers.fill_constant([3, 2, 2], "int64", 1)),
    "floor": lambda v: layers.floor(v.x),
    "ceil": lambda v: layers.ceil(v.x),
    "round": lambda v: layers.round(v.x),
    "cos": lambda v: layers.cos(v.x),
    "sin": lambda v: layers.sin(v.x),
    "reciprocal": lambda v: layers.reciprocal(v.x),
    "rsqrt": lambda v: layers.rsqrt(v.x),
    "softplus": lambda v: layers.softplus(v.x),
    "softsign": lambda v: layers.softsign(v.x),
    "elu": lambda v: layers.elu(v.x, alpha=0.5),
    "relu6": lambda v: layers.relu6(v.x, threshold=5.0),
    "selu": lambda v: layers.selu(v.x, scale=1.1, alpha=1.5),
    "hard_sigmoid": lambda v: layers.hard_sigmoid(v.x, slope=0.3, offset=0.4),
    "hard_swish": lambda v: layers.hard_swish(v.x),
    "swish": lambda v: layers.swish(v.x, beta=2.0),
    "softshrink": lambda v: layers.softshrink(v.x, alpha=0.3),
    "hard_shrink": lambda v: layers.hard_shrink(v.x, threshold=0.3),
    "tanh_shrink": lambda v: layers.tanh_shrink(v.x),
    "thresholded_relu": lambda v: layers.thresholded_relu(v.x, threshold=0.5),
    "logsigmoid": lambda v: layers.logsigmoid(v.x),
    "sign": lambda v: layers.sign(v.x),
    "erf": lambda v: layers.erf(v.x),
    "acos": lambda v: layers.acos(v.x),
    "asin": lambda v: layers.asin(v.x),
    "atan": lambda v: layers.atan(v.x),
    "brelu": lambda v: layers.brelu(v.x, t_min=1.0, t_max=10.0),
    "soft_relu": lambda v: layers.soft_relu(v.x, threshold=20.0),
    "stanh": lambda v: layers.stanh(v.x),
    "pow": lambda v: layers.pow(v.x, factor=2.0),
    "conv2d_transpose": lambda v: layers.conv2d_transpose(v.img, 2, output_size=[13, 13],
                                                          stride=2, act="relu"),
    "sigmoid_cross_entropy_with_logits": lambda v: layers.sigmoid_cross_entropy_with_logits(
        v.x, v.x, ignore_index=-1, normalize=True),
    "fill_constant_batch_size_like": lambda v: layers.fill_constant_batch_size_like(
        v.x, [-1, 3], "int64", 4, input_dim_idx=0, output_dim_idx=0),
    "one_hot": lambda v: layers.one_hot(v.ids, 5, allow_out_of_range=True),
    "shape": lambda v: layers.shape(v.img),
    "expand": lambda v: layers.expand(v.x, [2, 1]),
    "cos_sim": lambda v: layers.cos_sim(v.x, v.x),
    "argsort": lambda v: layers.argsort(v.x, axis=1, descending=True),
    "where": lambda v: layers.where(layers.greater_than(v.x, v.x)),
    "clip_by_norm": lambda v: layers.clip_by_norm(v.x, 2.0),
    "label_smooth": lambda v: layers.label_smooth(layers.softmax(v.x), epsilon=0.2),
    "sequence_pool": lambda v: layers.sequence_pool(v.seq, "max", pad_value=1.0),
    "sequence_first_step": lambda v: layers.sequence_first_step(v.seq),
    "sequence_last_step": lambda v: layers.sequence_last_step(v.seq),
    "sequence_softmax": lambda v: layers.sequence_softmax(layers.reduce_sum(v.seq, dim=1,
                                                                            keep_dim=True)),
    "sequence_conv": lambda v: layers.sequence_conv(v.seq, 4, filter_size=3, act="tanh"),
    "sequence_mask": lambda v: layers.sequence_mask(v.lengths, maxlen=5, dtype="float32"),
    "sequence_pad": lambda v: layers.sequence_pad(v.seq, layers.fill_constant([1], "float32",
                                                                              0.0), maxlen=9),
    "dynamic_lstm": lambda v: layers.dynamic_lstm(layers.fc(v.seq, 16), 16, use_peepholes=False,
                                                  is_reverse=True),
    "dynamic_gru": lambda v: layers.dynamic_gru(layers.fc(v.seq, 12), 4, is_reverse=True,
                                                origin_mode=True),
    "gru_unit": lambda v: layers.gru_unit(layers.fc(v.x, 12), layers.fc(v.x, 4), 12,
                                          origin_mode=True),
    "lstm_unit": lambda v: layers.lstm_unit(v.x, layers.fc(v.x, 4), layers.fc(v.x, 4),
                                            forget_bias=1.0),
    "linear_chain_crf": lambda v: layers.linear_chain_crf(
        layers.fc(v.seq, 5), v.tags, param_attr=fluid.ParamAttr(name="crfw")),
    "crf_decoding": lambda v: [layers.linear_chain_crf(layers.fc(v.seq, 5), v.tags,
                                                       param_attr="crfw2"),
                               layers.crf_decoding(layers.fc(v.seq, 5), "crfw2")],
    "chunk_eval": lambda v: layers.chunk_eval(v.tags, v.tags, "IOB", 2,
                                              excluded_chunk_types=[1]),
    "Print": lambda v: layers.Print(v.x, first_n=2, message="x", summarize=3,
                                    print_phase="forward"),
    "py_func": lambda v: layers.py_func(
        lambda a: a, v.x, fluid.default_main_program().global_block().create_var(
            name="pyf_out", shape=[-1, 8], dtype="float32"), backward_func=lambda a, b, g: g),
    "sequence_expand": lambda v: layers.sequence_expand(v.x, v.seq, ref_level=0),
    "sequence_expand_as": lambda v: layers.sequence_expand_as(v.x, v.seq),
    "sequence_reshape": lambda v: layers.sequence_reshape(v.seq, 4),
    "sequence_concat": lambda v: layers.sequence_concat([v.seq, v.seq]),
    "sequence_slice": lambda v: layers.sequence_slice(v.seq, v.ids, v.ids),
    "sequence_enumerate": lambda v: layers.sequence_enumerate(v.tags, 3, pad_value=1),
    "lod_reset": lambda v: layers.lod_reset(v.x, target_lod=[0, 2]),
    "argmin": lambda v: layers.argmin(v.x, axis=1),
    "cumsum": lambda v: layers.cumsum(v.x, axis=1, exclusive=True, reverse=True),
    "reverse": lambda v: layers.reverse(v.x, [0, 1]),
    "range": lambda v: layers.range(0, 10, 2, "int64"),
    "linspace": lambda v: layers.linspace(0.0, 1.0, 5, "float32"),
    "eye": lambda v: layers.eye(3, 4),
    "diag": lambda v: layers.diag(layers.fill_constant([3], "float32", 2.0)),
    "reduce_prod": lambda v: layers.reduce_prod(v.x, dim=[1], keep_dim=True),
    "reduce_all": lambda v: layers.reduce_all(v.flag, dim=0),
    "reduce_any": lambda v: layers.reduce_any(v.flag),
    "gather_nd": lambda v: layers.gather_nd(v.x, layers.cast(layers.fill_constant(
        [2, 1], "float32", 0.0), "int64")),
    "scatter": lambda v: layers.scatter(v.x, v.index, v.x, overwrite=False),
    "unique": lambda v: layers.unique(v.index, dtype="int64"),
    "uniform_random_batch_size_like": lambda v: layers.uniform_random_batch_size_like(
        v.x, [-1, 4], min=-2.0, max=2.0, seed=3),
    "gaussian_random_batch_size_like": lambda v: layers.gaussian_random_batch_size_like(
        v.x, [-1, 4], mean=1.0, std=2.0, seed=3),
    "sequence_unpad": lambda v: layers.sequence_unpad(
        *layers.sequence_pad(v.seq, layers.fill_constant([1], "float32", 0.0))),
    # layers built from other layers
    "ones_like": lambda v: layers.ones_like(v.x),
    "reduce_min": lambda v: layers.reduce_min(v.x, dim=1, keep_dim=True),
    "mse_loss": lambda v: layers.mse_loss(v.x, v.x),
    "l2_normalize": lambda v: layers.l2_normalize(v.x, axis=1),
    "huber_loss": lambda v: layers.huber_loss(v.x, v.x, 1.0),
    "smooth_l1": lambda v: layers.smooth_l1(v.x, v.x, inside_weight=v.x, outside_weight=v.x,
                                            sigma=2.0),
    "log_loss": lambda v: layers.log_loss(layers.sigmoid(v.x), v.x),
    "margin_rank_loss": lambda v: layers.margin_rank_loss(v.x, v.x, v.x, margin=0.2),
    "rank_loss": lambda v: layers.rank_loss(v.x, v.x, v.x),
    "kldiv_loss": lambda v: layers.kldiv_loss(v.x, layers.softmax(v.x), reduction="batchmean"),
    "prelu": lambda v: layers.prelu(v.img, "channel"),
    "maxout": lambda v: layers.maxout(layers.concat([v.img, v.img], axis=1), groups=2),
    "pixel_shuffle": lambda v: layers.pixel_shuffle(layers.reshape(v.img, [-1, 12, 3, 3]), 2),
    "unstack": lambda v: layers.unstack(v.w, axis=1),
    "expand_as": lambda v: layers.expand_as(layers.fill_constant([1, 4], "float32", 1.0), v.w),
    "has_nan": lambda v: layers.has_nan(v.x),
    "has_inf": lambda v: layers.has_inf(v.x),
    "isfinite": lambda v: layers.isfinite(v.x),
    "rank": lambda v: layers.rank(v.img),
    "size": lambda v: layers.size(v.w),
    "elementwise_floordiv": lambda v: layers.elementwise_floordiv(v.ids, v.ids),
    "elementwise_mod": lambda v: layers.elementwise_mod(v.x, v.x),
    "autoincreased_step_counter": lambda v: layers.autoincreased_step_counter(begin=0, step=2),
    "crop": lambda v: layers.crop(v.img, shape=[-1, 2, 4, 4], offsets=[0, 1, 1, 2]),
    "crop_tensor": lambda v: layers.crop_tensor(v.x, shape=[-1, 4], offsets=[0, 2]),
    "pad": lambda v: layers.pad(v.w, [0, 0, 1, 2], pad_value=1.0),
    "pad_constant_like": lambda v: layers.pad_constant_like(
        v.w, layers.fill_constant([6, 3], "float32", 1.0), 0.5),
    "multiplex": lambda v: layers.multiplex([v.x, v.x], v.ids),
    "instance_norm": lambda v: layers.instance_norm(v.img),
    "group_norm": lambda v: layers.group_norm(v.img, 3, act="relu"),
    "lrn": lambda v: layers.lrn(layers.data("img4", [2, 3, 4, 4], append_batch_size=False), n=3),
}


class Inputs:
    def __init__(self):
        self.x = layers.data("x", [8])
        self.img = layers.data("img", [3, 6, 6])
        self.w = layers.data("w", [8, 4], append_batch_size=False)
        self.bias = layers.data("bias", [3], append_batch_size=False)
        self.ids = layers.data("ids", [1], dtype="int64")
        self.label = layers.data("label", [1], dtype="int64")
        self.index = layers.data("index", [3], dtype="int32", append_batch_size=False)
        self.flag = layers.data("flag", [1], dtype="bool", append_batch_size=False)
        self.seq = layers.data("seq", [8], lod_level=1)
        self.tags = layers.data("tags", [1], dtype="int64", lod_level=1)
        self.lengths = layers.data("lengths", [], dtype="int64")
        self.pred = layers.less_than(layers.reduce_mean(self.x),
                                     layers.fill_constant([1], "float32", 0.0))


def build(fn, calls):
    """Builds fn's ops into new programs; fails when fn itself builds none."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        inputs = Inputs()
        before = len(calls)
        fn(inputs)
        assert len(calls) > before, "builds no op: list it in SKIP instead"
    return main, startup


def check(calls, programs, where):
    problems = python_drift(calls, where)
    for name, p in programs:
        problems += program_drift(p, "%s (%s)" % (where, name))
    assert not problems, "attribute drift:\n" + "\n".join(problems)


def test_every_public_layer_has_a_case():
    names = set(public_layers())
    missing = sorted(names - set(CASES) - set(SKIP))
    assert not missing, (
        "public layer(s) %s have no case in tests/python/test_layer_attrs.py: add one to CASES "
        "(or to SKIP, with the reason it builds no op)" % ", ".join(missing))
    stale = sorted((set(CASES) | set(SKIP)) - names)
    assert not stale, "CASES/SKIP name(s) that are not public layers: %s" % ", ".join(stale)


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_attrs_match_the_registry(name, set_attrs):
    main, startup = build(CASES[name], set_attrs)
    check(set_attrs, [("main", main), ("startup", startup)], "layers.%s" % name)


def _classes(module, base):
    seen = {}
    for name in dir(module):
        obj = getattr(module, name)
        if inspect.isclass(obj) and issubclass(obj, base) and obj is not base:
            seen.setdefault(obj, name)
    return sorted(seen, key=lambda c: c.__name__)


OPTIMIZER_ARGS = {
    optimizer.SGDOptimizer: dict(learning_rate=0.1),
    optimizer.MomentumOptimizer: dict(learning_rate=0.1, momentum=0.9, use_nesterov=True),
    optimizer.AdamOptimizer: dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6),
    optimizer.AdagradOptimizer: dict(learning_rate=0.1, epsilon=1e-5),
    optimizer.DecayedAdagradOptimizer: dict(learning_rate=0.1, decay=0.9, epsilon=1e-5),
    optimizer.RMSPropOptimizer: dict(learning_rate=0.1, rho=0.9, epsilon=1e-5, momentum=0.5,
                                     centered=True),
    optimizer.AdamaxOptimizer: dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6),
    optimizer.AdadeltaOptimizer: dict(learning_rate=1.0, epsilon=1e-5, rho=0.9),
    optimizer.LambOptimizer: dict(learning_rate=0.01, lamb_weight_decay=0.02),
    optimizer.LarsMomentumOptimizer: dict(learning_rate=0.1, momentum=0.9, lars_coeff=0.01),
    optimizer.FtrlOptimizer: dict(learning_rate=0.1, l1=0.01, l2=0.01, lr_power=-0.6),
    optimizer.DpsgdOptimizer: dict(learning_rate=0.1, clip=1.0, batch_size=8.0, sigma=0.5),
}


def _training_net(v):
    """A loss over the differentiable layers, cond included, so backward builds their grad
    ops (whose attributes come from the C++ grad makers)."""
    c = layers.conv2d(v.img, 4, 3, padding=1, act="relu")
    c = layers.batch_norm(c)
    c = layers.pool2d(c, 2, "max", 2)
    c = layers.layer_norm(c, begin_norm_axis=1)
    h = layers.fc([c, layers.reshape(layers.embedding(v.ids, size=[10, 4]), [-1, 4])], 8)
    h = layers.dropout(layers.leaky_relu(h), 0.2, seed=1)
    h = layers.cond(v.pred, lambda: layers.scale(h, 2.0), lambda: layers.clip(h, -1.0, 1.0))
    a, b = layers.split(h, 2, dim=1)
    h = layers.concat([layers.softmax(a), layers.transpose(layers.transpose(b, [1, 0]), [1, 0])],
                      axis=1)
    h = layers.slice(layers.matmul(h, v.w, alpha=0.5), [1], [0], [4])
    h = layers.elementwise_mul(h, layers.reduce_sum(h, dim=0))
    logits = layers.fc(layers.stack([h, h], axis=1), 3, num_flatten_dims=1)
    return layers.mean(layers.softmax_with_cross_entropy(logits, v.label))


@pytest.mark.parametrize("opt_class", _classes(optimizer, optimizer.Optimizer),
                         ids=lambda c: c.__name__)
def test_optimizer_attrs_match_the_registry(opt_class, set_attrs):
    assert opt_class in OPTIMIZER_ARGS, (
        "optimizer %s has no case in tests/python/test_layer_attrs.py: add it to "
        "OPTIMIZER_ARGS" % opt_class.__name__)

    def net(v):
        loss = _training_net(v)
        opt = opt_class(regularization=regularizer.L2Decay(1e-4),
                        grad_clip=clip.GradientClipByGlobalNorm(5.0), **OPTIMIZER_ARGS[opt_class])
        opt.minimize(loss)

    main, startup = build(net, set_attrs)
    test = main.clone(for_test=True)
    grad_ops = [op.type for op in main.global_block().ops if op.type.endswith("_grad")]
    assert "conv2d_grad" in grad_ops and "conditional_block_grad" in grad_ops, grad_ops
    check(set_attrs, [("main", main), ("startup", startup), ("test clone", test)],
          opt_class.__name__)


@pytest.mark.parametrize("which", ["ModelAverage", "ExponentialMovingAverage", "Lookahead"])
def test_averaging_optimizer_attrs_match_the_registry(which, set_attrs):
    def net(v):
        loss = _training_net(v)
        if which == "Lookahead":
            optimizer.LookaheadOptimizer(optimizer.SGD(0.1), alpha=0.5, k=3).minimize(loss)
            return
        optimizer.SGD(0.1).minimize(loss)
        if which == "ModelAverage":
            net.extra = optimizer.ModelAverage(0.15, min_average_window=2,
                                               max_average_window=10)
        else:
            net.extra = optimizer.ExponentialMovingAverage(0.99, thres_steps=layers.fill_constant(
                [1], "int64", 3))
            net.extra.update()

    main, startup = build(net, set_attrs)
    programs = [("main", main), ("startup", startup)]
    if which != "Lookahead":
        programs += [("apply", net.extra.apply_program), ("restore", net.extra.restore_program)]
    check(set_attrs, programs, which)


@pytest.mark.parametrize("init_class", _classes(initializer, initializer.Initializer),
                         ids=lambda c: c.__name__)
def test_initializer_attrs_match_the_registry(init_class, set_attrs):
    def net(v):
        if init_class is initializer.NumpyArrayInitializer:
            init = init_class(np.ones((8, 4), "float32"))
        else:
            init = init_class()
        if init_class is initializer.BilinearInitializer:  # a conv2d_transpose filter
            layers.conv2d_transpose(v.img, 2, filter_size=4, stride=2,
                                    param_attr=fluid.ParamAttr(initializer=init))
            return
        layers.fc(v.x, 4, param_attr=fluid.ParamAttr(initializer=init))

    main, startup = build(net, set_attrs)
    check(set_attrs, [("main", main), ("startup", startup)], init_class.__name__)


def test_op_info_lists_the_forward_attributes_of_grad_ops():
    info = core.op_info("conv2d_grad")
    attrs = {a["name"]: a for a in info["attrs"]}
    assert {"strides", "paddings", "dilations", "groups"} <= set(attrs)
    assert attrs["strides"]["type"] == "int list" and attrs["strides"]["from"] == "conv2d"
    assert attrs["groups"]["default"] == 1 and not attrs["groups"]["required"]
    assert {a["name"] for a in core.common_attrs()} >= {"op_role", "op_role_var"}
    with pytest.raises(LookupError):
        core.op_info("no_such_op")
