"""Recurrences unrolled or run by an op: Fluid 1.8's cell-based RNN API (fluid.layers.rnn,
RNNCell, GRUCell, LSTMCell, birnn), the LSTM and GRU over LoD sequences (dynamic_lstm,
dynamic_gru, each one op) and their single steps (lstm_unit, gru_unit).

    cell = fluid.layers.GRUCell(hidden_size=32)
    outputs, final = fluid.layers.rnn(cell, inputs, sequence_length=lengths)

`inputs` is a padded batch [batch, time, ...] (or [time, batch, ...] with time_major). Loom
unrolls the recurrence over the static time dimension when the program is built: every step is
the cell's ops again, sharing the parameters the first step made (a user cell's fc included),
so backward needs nothing special. When the time dimension is unknown when building (-1, e.g.
inputs [-1, -1, H]), rnn builds one `while` op instead: the cell is called once, in the loop
body, and the loop runs as many steps as the inputs have at run time (gradients flow through
the while's gradient). With sequence_length ([batch] int64), a sequence's states stop
changing past its length and its outputs there are zeros, as Fluid's.
"""
from .. import core, unique_name
from ..framework import default_main_program, dtype_name
from ..layer_helper import LayerHelper, call_sharing_parameters
from ..param_attr import ParamAttr
from .activation import sigmoid, tanh
from .common import _check_var
from .control_flow import _outer_reads_writes, greater_than, increment, less_than
from .activation import relu
from .math import clip, elementwise_add, elementwise_mul, elementwise_sub, matmul, scale
from .nn import dropout, fc
from .sequence import sequence_pad, sequence_unpad
from .tensor import (assign, cast, concat, fill_constant, fill_constant_batch_size_like, gather,
                     reshape, shape, slice, split, squeeze, stack, transpose)
from .tensor_array import array_write, create_array, tensor_array_to_tensor

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "rnn", "birnn", "dynamic_lstm", "dynamic_gru",
           "gru_unit", "lstm_unit", "lstm", "dynamic_lstmp"]


class RNNCell:
    """A cell: call(inputs, states) -> (outputs, new_states); get_initial_states builds zeros
    shaped like state_shape for a batch."""

    def call(self, inputs, states, **kwargs):
        raise NotImplementedError("%s.call" % self.__class__.__name__)

    def __call__(self, inputs, states, **kwargs):
        return self.call(inputs, states, **kwargs)

    @property
    def state_shape(self):
        raise NotImplementedError("%s.state_shape" % self.__class__.__name__)

    def get_initial_states(self, batch_ref, shape=None, dtype="float32", init_value=0.0,
                           batch_dim_idx=0):
        shapes = shape if shape is not None else self.state_shape

        def build(s):
            return fill_constant_batch_size_like(
                batch_ref, [-1] + list(s), dtype, init_value, input_dim_idx=batch_dim_idx)
        if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], (list, tuple)):
            return [build(s) for s in shapes]
        return build(shapes)


class _GatedCell(RNNCell):
    """Shared by GRUCell and LSTMCell: the parameters are made on the first call (their input
    width is known then) and reused by every later step."""

    def __init__(self, hidden_size, param_attr, bias_attr, dtype, name):
        self.hidden_size = int(hidden_size)
        if self.hidden_size <= 0:
            raise ValueError("%s: hidden_size must be > 0, got %r"
                             % (self.__class__.__name__, hidden_size))
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._dtype = dtype
        self._name = name or unique_name.generate(self.__class__.__name__.lower())
        self._params = None

    def _weights(self, name, shape, attr, is_bias=False):
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        if not attr.name:
            attr = ParamAttr(name="%s.%s" % (self._name, name), initializer=attr.initializer,
                             learning_rate=getattr(attr, "learning_rate", 1.0),
                             regularizer=getattr(attr, "regularizer", None),
                             trainable=getattr(attr, "trainable", True))
        helper = LayerHelper(self._name)
        return helper.create_parameter(attr, shape, self._dtype, is_bias=is_bias)


class GRUCell(_GatedCell):
    """h' = (1 - u) h + u c with u, r = gate_activation([x, h] W_g + b_g) and c =
    activation([x, r h] W_c + b_c)."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, dtype="float32", name="GRUCell"):
        super().__init__(hidden_size, param_attr, bias_attr, dtype,
                         None if name == "GRUCell" else name)
        self._gate_act = gate_activation or sigmoid
        self._act = activation or tanh

    @property
    def state_shape(self):
        return [self.hidden_size]

    def call(self, inputs, states):
        h = states
        d = self.hidden_size
        if self._params is None:
            width = inputs.shape[-1] + d
            self._params = (self._weights("gate_w", [width, 2 * d], self._param_attr),
                            self._weights("gate_b", [2 * d], self._bias_attr, True),
                            self._weights("cand_w", [width, d], self._param_attr),
                            self._weights("cand_b", [d], self._bias_attr, True))
        gw, gb, cw, cb = self._params
        gates = matmul(concat([inputs, h], axis=1), gw)
        if gb is not None:
            gates = elementwise_add(gates, gb)
        u, r = split(self._gate_act(gates), 2, dim=1)
        cand = matmul(concat([inputs, elementwise_mul(r, h)], axis=1), cw)
        if cb is not None:
            cand = elementwise_add(cand, cb)
        c = self._act(cand)
        new_h = elementwise_add(elementwise_mul(u, elementwise_sub(c, h)), h)
        return new_h, new_h


class LSTMCell(_GatedCell):
    """[i, j, f, o] = [x, h] W + b; c' = c sigmoid(f + forget_bias) + sigmoid(i) tanh(j);
    h' = sigmoid(o) tanh(c'); states [h, c]."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, forget_bias=1.0, dtype="float32", name="LSTMCell"):
        super().__init__(hidden_size, param_attr, bias_attr, dtype,
                         None if name == "LSTMCell" else name)
        self._gate_act = gate_activation or sigmoid
        self._act = activation or tanh
        self._forget_bias = float(forget_bias)

    @property
    def state_shape(self):
        return [[self.hidden_size], [self.hidden_size]]

    def call(self, inputs, states):
        h, c = states
        d = self.hidden_size
        if self._params is None:
            width = inputs.shape[-1] + d
            self._params = (self._weights("w", [width, 4 * d], self._param_attr),
                            self._weights("b", [4 * d], self._bias_attr, True))
        w, b = self._params
        gates = matmul(concat([inputs, h], axis=1), w)
        if b is not None:
            gates = elementwise_add(gates, b)
        i, j, f, o = split(gates, 4, dim=1)
        new_c = elementwise_add(
            elementwise_mul(c, self._gate_act(scale(f, bias=self._forget_bias))),
            elementwise_mul(self._gate_act(i), self._act(j)))
        new_h = elementwise_mul(self._act(new_c), self._gate_act(o))
        return new_h, [new_h, new_c]


def _flatten(states):
    return list(states) if isinstance(states, (list, tuple)) else [states]


def _pack(template, flat):
    return list(flat) if isinstance(template, (list, tuple)) else flat[0]


def rnn(cell, inputs, initial_states=None, sequence_length=None, time_major=False,
        is_reverse=False, **kwargs):
    """Runs cell over the time dimension of inputs (unrolled when built if that dimension is
    static, else a while loop); returns (outputs [batch, time, ...] (or time-major), final
    states)."""
    _check_var(inputs, "inputs", "rnn")
    if len(inputs.shape) < 2:
        raise ValueError("rnn: inputs must be [batch, time, ...] (or [time, batch, ...] with "
                         "time_major), got shape %r" % (list(inputs.shape),))
    if sequence_length is not None:
        _check_var(sequence_length, "sequence_length", "rnn")
    t_axis = 0 if time_major else 1
    steps = inputs.shape[t_axis]
    b_axis = 1 if time_major else 0
    states = initial_states if initial_states is not None else \
        cell.get_initial_states(inputs, dtype=inputs.dtype, batch_dim_idx=b_axis)
    if steps is None or steps < 0:
        return _rnn_while(cell, inputs, states, sequence_length, time_major, is_reverse,
                          **kwargs)
    if steps == 0:
        raise ValueError("rnn: the time dimension of inputs is 0, got shape %r"
                         % (list(inputs.shape),))
    mask_src = None
    if sequence_length is not None:
        mask_src = cast(sequence_length, inputs.dtype)
    outputs = [None] * steps
    order = range(steps - 1, -1, -1) if is_reverse else range(steps)
    for t in order:
        x = squeeze(slice(inputs, axes=[t_axis], starts=[t], ends=[t + 1]), [t_axis])
        # every step shares the parameters the first step's layers made (an fc in a cell)
        out, new_states = call_sharing_parameters(cell, x, states, **kwargs)
        if mask_src is not None:
            # 1 while t < length: the state moves on and the output counts; else they stay.
            keep = cast(greater_than(
                mask_src, fill_constant([1], inputs.dtype, float(t))), inputs.dtype)
            flat_new, flat_old = _flatten(new_states), _flatten(states)
            mixed = [elementwise_add(elementwise_mul(elementwise_sub(n, o), keep, axis=0), o)
                     for n, o in zip(flat_new, flat_old)]
            new_states = _pack(new_states, mixed)
            out = elementwise_mul(out, keep, axis=0)
        outputs[t] = out
        states = new_states
    return stack(outputs, axis=t_axis), states


def _rnn_while(cell, inputs, states, sequence_length, time_major, is_reverse, **kwargs):
    """rnn over a time dimension known only at run time: one ``while`` op whose body calls the
    cell once (one set of parameters) per step t = i (or T - 1 - i when is_reverse). Step t
    reads row t of the time-major inputs (gather) and writes its output to element t of a
    tensor array, stacked to [T, batch, ...] after the loop: both have gradients, so training
    differentiates through the loop (the while's gradient runs the step's gradient block last
    step first), and only the states are copied per step for it."""
    program = default_main_program()
    parent = program.current_block()
    helper = LayerHelper("rnn")
    rank = len(inputs.shape)
    tm = inputs if time_major else transpose(inputs, [1, 0] + list(range(2, rank)))
    num_steps = cast(slice(shape(tm), axes=[0], starts=[0], ends=[1]), "int64")
    last = elementwise_sub(num_steps, fill_constant([1], "int64", 1))
    length = cast(sequence_length, "int64") if sequence_length is not None else None
    # the loop overwrites its state: start from copies, the caller's values stay as they were
    flat_init = _flatten(states)
    carried = [assign(s) for s in flat_init]
    counter = fill_constant([1], "int64", 0)
    cond = less_than(counter, num_steps)
    body = program._create_block()
    try:
        t = elementwise_sub(last, counter) if is_reverse else counter
        x = squeeze(gather(tm, t), [0])
        out, new_states = cell(x, _pack(states, carried), **kwargs)
        flat_new = _flatten(new_states)
        if len(flat_new) != len(carried):
            raise ValueError("rnn: the cell returns %d state(s) for %d initial state(s)"
                             % (len(flat_new), len(carried)))
        _check_var(out, "the cell's output", "rnn")
        rest = [int(d) for d in out.shape[1:]]
        if any(d < 0 for d in rest):
            raise ValueError("rnn: only the batch dim of the cell's output may be unknown when "
                             "the time dimension is, got shape %r" % (list(out.shape),))
        if length is not None:
            keep = cast(greater_than(length, t), inputs.dtype)  # [batch]: t < length
            flat_new = [elementwise_add(elementwise_mul(elementwise_sub(n, o), keep, axis=0), o)
                        for n, o in zip(flat_new, carried)]
            out = elementwise_mul(out, keep, axis=0)
        # the outputs: one array element per step (the array's gradient flows back through
        # the loop), stacked to [T, batch, ...] after it
        saved = program.current_block_idx
        program.current_block_idx = parent.idx
        try:
            outs = create_array(dtype_name(out.dtype))
        finally:
            program.current_block_idx = saved
        for n, o in zip(flat_new, carried):
            assign(n, o)
        array_write(out, t, array=outs)
        increment(counter, 1.0)
        less_than(counter, num_steps, cond=cond)
    finally:
        program._rollback()
    reads, writes = _outer_reads_writes(body)
    steps = parent.create_var(name=unique_name.generate(helper.name + ".steps"),
                              type=core.VarType.STEP_SCOPES, stop_gradient=True)
    parent.append_op("while", inputs={"X": reads, "Condition": cond},
                     outputs={"Out": writes, "StepScopes": steps},
                     attrs={"sub_block": body.idx, "is_test": False,
                            "max_iterations": 1 << 40})
    stacked = tensor_array_to_tensor(outs, axis=0, use_stack=True)[0]
    stacked.desc.set_shape([-1, -1] + rest)
    if not time_major:
        stacked = transpose(stacked, [1, 0] + list(range(2, 2 + len(rest))))
    return stacked, _pack(states, carried)


def birnn(cell_fw, cell_bw, inputs, initial_states=None, sequence_length=None,
          time_major=False, **kwargs):
    """A forward and a reversed rnn; returns (outputs concatenated on the last dim,
    (forward final states, backward final states))."""
    fw_init, bw_init = initial_states if initial_states is not None else (None, None)
    out_fw, st_fw = rnn(cell_fw, inputs, fw_init, sequence_length, time_major, **kwargs)
    out_bw, st_bw = rnn(cell_bw, inputs, bw_init, sequence_length, time_major, is_reverse=True,
                        **kwargs)
    return concat([out_fw, out_bw], axis=-1), (st_fw, st_bw)


def dynamic_lstm(input, size, h_0=None, c_0=None, param_attr=None, bias_attr=None,
                 use_peepholes=True, is_reverse=False, gate_activation="sigmoid",
                 cell_activation="tanh", candidate_activation="tanh", dtype="float32",
                 name=None):
    """An LSTM over LoD sequences (Fluid's dynamic_lstm): input [rows, size] holds the four
    gates' projected inputs (an fc of size 4 * D before it), size = 4 * D; returns (hidden,
    cell), each [rows, D] with input's LoD. Gate order c~, i, f, o; with use_peepholes the
    bias is [1, 7 * D] (4 * D biases, then W_ic, W_fc, W_oc)."""
    if int(size) % 4 or int(size) <= 0:
        raise ValueError("dynamic_lstm: size must be 4 * hidden width, got %r" % (size,))
    if len(input.shape) != 2 or (input.shape[1] > 0 and input.shape[1] != int(size)):
        raise ValueError("dynamic_lstm: input must be [rows, size=%d], got %r"
                         % (size, list(input.shape)))
    d = int(size) // 4
    helper = LayerHelper("lstm", name=name)
    w = helper.create_parameter(param_attr, [d, 4 * d], dtype)
    b = helper.create_parameter(bias_attr, [1, (7 if use_peepholes else 4) * d], dtype,
                                is_bias=True)
    if b is None:
        raise ValueError("dynamic_lstm: bias_attr=False is not supported (the op needs Bias)")
    hidden = helper.create_variable_for_type_inference(dtype)
    cell = helper.create_variable_for_type_inference(dtype)
    gate = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    pre = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    inputs = {"Input": input, "Weight": w, "Bias": b}
    if h_0 is not None:
        inputs["H0"] = h_0
    if c_0 is not None:
        inputs["C0"] = c_0
    helper.append_op("lstm", inputs=inputs,
                     outputs={"Hidden": hidden, "Cell": cell, "BatchGate": gate,
                              "BatchCellPreAct": pre},
                     attrs={"use_peepholes": bool(use_peepholes), "is_reverse": bool(is_reverse),
                            "gate_activation": gate_activation,
                            "cell_activation": cell_activation,
                            "candidate_activation": candidate_activation})
    return hidden, cell


def dynamic_gru(input, size, param_attr=None, bias_attr=None, is_reverse=False,
                gate_activation="sigmoid", candidate_activation="tanh", h_0=None,
                origin_mode=False):
    """A GRU over LoD sequences (Fluid's dynamic_gru): input [rows, 3 * size] holds the
    projected inputs of the update gate, the reset gate and the candidate; returns hidden
    [rows, size] with input's LoD."""
    d = int(size)
    if d <= 0 or len(input.shape) != 2 or (input.shape[1] > 0 and input.shape[1] != 3 * d):
        raise ValueError("dynamic_gru: input must be [rows, 3 * size = %d], got %r"
                         % (3 * d, list(input.shape)))
    helper = LayerHelper("gru")
    w = helper.create_parameter(param_attr, [d, 3 * d], input.dtype)
    b = helper.create_parameter(bias_attr, [1, 3 * d], input.dtype, is_bias=True)
    hidden = helper.create_variable_for_type_inference(input.dtype)
    gate = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    reset = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    inputs = {"Input": input, "Weight": w}
    if b is not None:
        inputs["Bias"] = b
    if h_0 is not None:
        inputs["H0"] = h_0
    helper.append_op("gru", inputs=inputs,
                     outputs={"Hidden": hidden, "BatchGate": gate,
                              "BatchResetHiddenPrev": reset},
                     attrs={"is_reverse": bool(is_reverse), "gate_activation": gate_activation,
                            "activation": candidate_activation,
                            "origin_mode": bool(origin_mode)})
    return hidden


_ACT_CODES = {"identity": 0, "sigmoid": 1, "tanh": 2, "relu": 3}


def gru_unit(input, hidden, size, param_attr=None, bias_attr=None, activation="tanh",
             gate_activation="sigmoid", origin_mode=False):
    """One GRU step (Fluid's gru_unit): input [N, size] (size = 3 * D, the projected inputs),
    hidden [N, D]; returns (updated hidden, reset hidden prev, gate)."""
    if int(size) % 3:
        raise ValueError("gru_unit: size must be 3 * hidden width, got %r" % (size,))
    for what, act in (("activation", activation), ("gate_activation", gate_activation)):
        if act not in _ACT_CODES:
            raise ValueError("gru_unit: %s %r is not identity, sigmoid, tanh or relu"
                             % (what, act))
    d = int(size) // 3
    helper = LayerHelper("gru_unit")
    w = helper.create_parameter(param_attr, [d, 3 * d], input.dtype)
    b = helper.create_parameter(bias_attr, [1, 3 * d], input.dtype, is_bias=True)
    gate = helper.create_variable_for_type_inference(input.dtype)
    reset = helper.create_variable_for_type_inference(input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    inputs = {"Input": input, "HiddenPrev": hidden, "Weight": w}
    if b is not None:
        inputs["Bias"] = b
    helper.append_op("gru_unit", inputs=inputs,
                     outputs={"Gate": gate, "ResetHiddenPrev": reset, "Hidden": out},
                     attrs={"activation": _ACT_CODES[activation],
                            "gate_activation": _ACT_CODES[gate_activation],
                            "origin_mode": bool(origin_mode)})
    return out, reset, gate


def lstm_unit(x_t, hidden_t_prev, cell_t_prev, forget_bias=0.0, param_attr=None,
              bias_attr=None, name=None):
    """One LSTM step (Fluid's lstm_unit): an fc of [x_t, hidden_t_prev] to 4 * D, then the
    lstm_unit op; returns (hidden, cell)."""
    d = cell_t_prev.shape[-1]
    if d <= 0:
        raise ValueError("lstm_unit: cell_t_prev needs a static width")
    pre = fc([x_t, hidden_t_prev], 4 * d, param_attr=param_attr, bias_attr=bias_attr)
    helper = LayerHelper("lstm_unit", name=name)
    c = helper.create_variable_for_type_inference(x_t.dtype)
    h = helper.create_variable_for_type_inference(x_t.dtype)
    helper.append_op("lstm_unit", inputs={"X": pre, "C_prev": cell_t_prev},
                     outputs={"C": c, "H": h}, attrs={"forget_bias": float(forget_bias)})
    return h, c


def lstm(input, init_h, init_c, max_len, hidden_size, num_layers, dropout_prob=0.0,
         is_bidirec=False, is_test=False, name=None, default_initializer=None, seed=-1):
    """Fluid's cuDNN-style multi-layer LSTM over padded batches: input [batch, max_len,
    input_size]; init_h and init_c [num_layers * directions, batch, hidden_size]. Returns
    (rnn_out [batch, max_len, hidden_size * directions], last_h, last_c), the last two shaped
    like init_h. Each layer (and direction, with is_bidirec) is an LSTMCell without forget
    bias (cuDNN's gates) run by rnn; layer l + 1 reads layer l's outputs (both directions
    concatenated), with dropout of dropout_prob between layers unless is_test. Weights are
    one [in + hidden, 4 * hidden] matrix and one bias per layer and direction, named
    NAME.l{layer}_{fw|bw}.w / .b (cuDNN's two biases add up to one)."""
    shape = list(input.shape)
    if len(shape) != 3:
        raise ValueError("lstm: input must be [batch, max_len, input_size], got %s" % shape)
    if int(hidden_size) <= 0 or int(num_layers) <= 0:
        raise ValueError("lstm: hidden_size and num_layers must be positive, got %r and %r"
                         % (hidden_size, num_layers))
    if shape[1] > 0 and int(max_len) != shape[1]:
        raise ValueError("lstm: max_len %d differs from the time dim of input %s"
                         % (max_len, shape))
    if not 0.0 <= float(dropout_prob) < 1.0:
        raise ValueError("lstm: dropout_prob must be in [0, 1), got %r" % (dropout_prob,))
    dirs = 2 if is_bidirec else 1
    for what, v in (("init_h", init_h), ("init_c", init_c)):
        vs = list(v.shape)
        if len(vs) != 3 or vs[0] not in (-1, num_layers * dirs) or \
                vs[2] not in (-1, int(hidden_size)):
            raise ValueError("lstm: %s must be [num_layers * directions = %d, batch, "
                             "hidden_size = %d], got %s" % (what, num_layers * dirs,
                                                            hidden_size, vs))
    prefix = name or unique_name.generate("lstm")
    attr = ParamAttr(initializer=default_initializer) if default_initializer else None

    def initial(v, k):
        return reshape(slice(v, [0], [k], [k + 1]), [-1, int(hidden_size)])
    x = input
    last_h, last_c = [], []
    for layer in range(int(num_layers)):
        if layer > 0 and dropout_prob > 0 and not is_test:
            x = dropout(x, float(dropout_prob), seed=None if seed == -1 else seed,
                        dropout_implementation="upscale_in_train")
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            cell = LSTMCell(int(hidden_size), param_attr=attr, bias_attr=None, forget_bias=0.0,
                            dtype=input.dtype,
                            name="%s.l%d_%s" % (prefix, layer, "bw" if d else "fw"))
            out, (h, c) = rnn(cell, x, initial_states=[initial(init_h, k), initial(init_c, k)],
                              is_reverse=bool(d))
            outs.append(out)
            last_h.append(h)
            last_c.append(c)
        x = outs[0] if dirs == 1 else concat(outs, axis=2)
    return x, stack(last_h, axis=0), stack(last_c, axis=0)


_ACTS = {"sigmoid": sigmoid, "tanh": tanh, "relu": relu, "identity": lambda x: x}


class _LstmpCell(RNNCell):
    """One step of dynamic_lstmp over padded rows: input [batch, 4 D] (gates c~, i, f, o
    already projected), states [r (projection, P), c (cell, D)]; the output is [r, c]
    concatenated (both are returned per row)."""

    def __init__(self, w, w_proj, bias, d, peepholes, acts, cell_clip, proj_clip):
        self.w, self.w_proj, self.bias, self.d = w, w_proj, bias, d
        self.peepholes = peepholes
        self.gate, self.cell, self.cand, self.proj = acts
        self.cell_clip, self.proj_clip = cell_clip, proj_clip

    def call(self, inputs, states):
        r, c = states
        d = self.d
        gates = elementwise_add(inputs, matmul(r, self.w))
        gates = elementwise_add(gates, reshape(slice(self.bias, [1], [0], [4 * d]), [-1]))
        cand, i, f, o = split(gates, 4, dim=1)
        if self.peepholes:
            w_ic, w_fc, w_oc = [reshape(slice(self.bias, [1], [k * d], [(k + 1) * d]), [-1])
                                for k in (4, 5, 6)]
            i = elementwise_add(i, elementwise_mul(c, w_ic))
            f = elementwise_add(f, elementwise_mul(c, w_fc))
        new_c = elementwise_add(elementwise_mul(self.gate(f), c),
                                elementwise_mul(self.gate(i), self.cand(cand)))
        if self.cell_clip is not None:
            new_c = clip(new_c, -self.cell_clip, self.cell_clip)
        if self.peepholes:
            o = elementwise_add(o, elementwise_mul(new_c, w_oc))
        h = elementwise_mul(self.gate(o), self.cell(new_c))
        new_r = self.proj(matmul(h, self.w_proj))
        if self.proj_clip is not None:
            new_r = clip(new_r, -self.proj_clip, self.proj_clip)
        return concat([new_r, new_c], axis=1), [new_r, new_c]


def dynamic_lstmp(input, size, proj_size, param_attr=None, bias_attr=None, use_peepholes=True,
                  is_reverse=False, gate_activation="sigmoid", cell_activation="tanh",
                  candidate_activation="tanh", proj_activation="tanh", dtype="float32",
                  name=None, h_0=None, c_0=None, cell_clip=None, proj_clip=None):
    """Fluid's LSTM with a recurrent projection (LSTMP, Sak et al. 2014) over LoD sequences:
    input [rows, size] holds the four gates' projected inputs (gates c~, i, f, o), size = 4 * D;
    each step r_t = proj_act(h_t W_proj) ([D, proj_size]) is what the gates see next
    (W: [proj_size, 4 D]); with use_peepholes the bias is [1, 7 D] (4 D biases, then W_ic,
    W_fc, W_oc). A named param_attr names W; W_proj is then NAME_proj. cell_clip / proj_clip
    clip c_t and r_t. h_0 ([sequences, D]) starts r at
    proj_act(h_0 W_proj), c_0 ([sequences, D]) the cell. Returns (projection [rows,
    proj_size], cell [rows, D]) with input's LoD. Built from rnn over the padded batch
    (sequence_length freezes each sequence past its end), so its gradients are rnn's."""
    if int(size) % 4 or int(size) <= 0:
        raise ValueError("dynamic_lstmp: size must be 4 * hidden width, got %r" % (size,))
    if int(proj_size) <= 0:
        raise ValueError("dynamic_lstmp: proj_size must be positive, got %r" % (proj_size,))
    if len(input.shape) != 2 or (input.shape[1] > 0 and input.shape[1] != int(size)):
        raise ValueError("dynamic_lstmp: input must be [rows, size=%d], got %r"
                         % (size, list(input.shape)))
    acts = []
    for what, a in (("gate_activation", gate_activation), ("cell_activation", cell_activation),
                    ("candidate_activation", candidate_activation),
                    ("proj_activation", proj_activation)):
        if a not in _ACTS:
            raise ValueError("dynamic_lstmp: %s %r is not one of %s"
                             % (what, a, ", ".join(sorted(_ACTS))))
        acts.append(_ACTS[a])
    d, p = int(size) // 4, int(proj_size)
    helper = LayerHelper("lstmp", name=name)
    w = helper.create_parameter(param_attr, [p, 4 * d], dtype)
    proj_attr = ParamAttr._to_attr(param_attr)
    if proj_attr and proj_attr.name:  # a named weight: the projection is NAME_proj
        proj_attr = ParamAttr(name=proj_attr.name + "_proj", initializer=proj_attr.initializer,
                              learning_rate=proj_attr.learning_rate,
                              regularizer=proj_attr.regularizer, trainable=proj_attr.trainable)
    w_proj = helper.create_parameter(proj_attr, [d, p], dtype, suffix="w_proj")
    b = helper.create_parameter(bias_attr, [1, (7 if use_peepholes else 4) * d], dtype,
                                is_bias=True)
    if b is None:
        raise ValueError("dynamic_lstmp: bias_attr=False is not supported (as Fluid's)")
    padded, length = sequence_pad(input, fill_constant([1], dtype, 0.0))
    cell = _LstmpCell(w, w_proj, b, d, use_peepholes, acts,
                      None if cell_clip is None else float(cell_clip),
                      None if proj_clip is None else float(proj_clip))
    batch_ref = reshape(slice(padded, [1], [0], [1]), [-1, int(size)])
    r0 = acts[3](matmul(h_0, w_proj)) if h_0 is not None else \
        fill_constant_batch_size_like(batch_ref, [-1, p], dtype, 0.0)
    c0 = c_0 if c_0 is not None else fill_constant_batch_size_like(batch_ref, [-1, d], dtype,
                                                                     0.0)
    out, _ = rnn(cell, padded, initial_states=[r0, c0], sequence_length=length,
                 is_reverse=bool(is_reverse))
    both = sequence_unpad(out, length)
    proj, cell_out = split(both, [p, d], dim=1)
    return proj, cell_out
