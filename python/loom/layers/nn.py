"""Neural-network layers with parameters or of their own kind: fc, embedding, convolutions,
pooling, normalizations, dropout, prelu / maxout, pixel_shuffle, multiplex, label_smooth and
py_func (a Python callable as an op)."""
import numpy as np

from .. import core
from ..framework import Variable
from ..initializer import ConstantInitializer, MSRAInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .activation import _act, _check_act, relu, sqrt, square
from .common import _check_var, _unary
from .math import (elementwise_add, elementwise_div, elementwise_max, elementwise_mul,
                   elementwise_sub, pow, reduce_max, reduce_mean, reduce_sum, scale, sums)
from .tensor import (cast, expand, fill_constant, one_hot, pad, reshape, slice, squeeze, transpose,
                     unsqueeze)

__all__ = ["fc", "embedding", "conv2d", "conv2d_transpose", "pool2d", "batch_norm", "layer_norm",
           "instance_norm", "group_norm", "lrn", "l2_normalize", "dropout", "prelu", "maxout",
           "pixel_shuffle", "multiplex", "label_smooth", "py_func", "merge_selected_rows",
           "get_tensor_from_selected_rows"]


def fc(input, size, num_flatten_dims=1, param_attr=None, bias_attr=None, act=None, name=None):
    """Fully connected: act(input · W + b). Input is flattened to 2-D at num_flatten_dims."""
    _check_act(act)
    helper = LayerHelper("fc", name=name)
    inputs = input if isinstance(input, (list, tuple)) else [input]
    if int(size) <= 0:
        raise ValueError("fc: size must be positive, got %r" % (size,))
    partial = []
    for i, x in enumerate(inputs):
        _check_var(x, "input", "fc")
        shape = x.shape
        if not 0 < num_flatten_dims < len(shape):
            raise ValueError("fc: num_flatten_dims=%d is out of range for input '%s' of shape %s"
                             % (num_flatten_dims, x.name, list(shape)))
        in_features = int(np.prod(shape[num_flatten_dims:]))
        if in_features <= 0:
            raise ValueError("fc: input '%s' has unknown feature dims %s" % (x.name, list(shape)))
        attr = param_attr
        if isinstance(param_attr, (list, tuple)):  # one attribute per input, as Fluid allows
            if len(param_attr) != len(inputs):
                raise ValueError("fc: %d param_attrs for %d inputs" % (len(param_attr),
                                                                       len(inputs)))
            attr = param_attr[i]
        w = helper.create_parameter(attr, [in_features, int(size)], x.dtype,
                                    suffix="w_%d" % i if len(inputs) > 1 else "w")
        out = helper.create_variable_for_type_inference(x.dtype)
        helper.append_op("mul", inputs={"X": x, "Y": w}, outputs={"Out": out},
                         attrs={"x_num_col_dims": num_flatten_dims, "y_num_col_dims": 1})
        partial.append(out)
    pre_bias = partial[0] if len(partial) == 1 else sums(partial)
    b = helper.create_parameter(bias_attr, [int(size)], pre_bias.dtype, is_bias=True)
    if b is not None:
        with_bias = helper.create_variable_for_type_inference(pre_bias.dtype)
        helper.append_op("elementwise_add", inputs={"X": pre_bias, "Y": b},
                         outputs={"Out": with_bias}, attrs={"axis": num_flatten_dims})
        pre_bias = with_bias
    return _act(pre_bias, act)


def embedding(input, size, is_sparse=False, is_distributed=False, padding_idx=None,
              param_attr=None, dtype="float32"):
    """Looks up rows of a [size[0], size[1]] table: Out[i] = W[input[i]] (ids int64, [N, 1]
    or [N]; a last dim of 1 is dropped). padding_idx's rows are zero and get no gradient.

    is_sparse=True makes the table's gradient a SelectedRows: the looked-up rows only, so a
    step costs the batch's rows, not the table's. SGD, Adagrad and Adam(lazy_mode=True) then
    update only those rows; Momentum and non-lazy Adam still move every row (their state
    decays everywhere), exactly as with the dense gradient."""
    helper = LayerHelper("embedding")
    w = helper.create_parameter(param_attr, list(size), dtype)
    out = helper.create_variable_for_type_inference(dtype)
    pad = -1 if padding_idx is None else (padding_idx if padding_idx >= 0 else size[0] + padding_idx)
    helper.append_op("lookup_table", inputs={"Ids": input, "W": w}, outputs={"Out": out},
                     attrs={"padding_idx": pad, "is_sparse": is_sparse,
                            "is_distributed": is_distributed})
    return out


def merge_selected_rows(x, name=None):
    """A SelectedRows x (a sparse gradient) with its repeated ids summed: one row per id, the
    ids ascending."""
    helper = LayerHelper("merge_selected_rows", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("merge_selected_rows", inputs={"X": x}, outputs={"Out": out})
    return out


def get_tensor_from_selected_rows(x, name=None):
    """The value of a SelectedRows x as a dense tensor: one row per id of x, in x's order."""
    helper = LayerHelper("get_tensor_from_selected_rows", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("get_tensor_from_selected_rows", inputs={"X": x}, outputs={"Out": out})
    return out


def _embedding_v2(input, size, is_sparse=False, is_distributed=False, padding_idx=None,
                  param_attr=None, dtype="float32"):
    """fluid.embedding (Fluid 1.6+): Out has input's dims plus one of size[1] (ids [N, 1] give
    [N, 1, D]; fluid.layers.embedding drops a last dim of 1). is_sparse as in
    layers.embedding: the table's gradient is a SelectedRows of the looked-up rows."""
    # lookup_table drops a trailing 1 of Ids: a trailing 1 added here keeps every dim of
    # input, however many of them are unknown when building ([batch, time] ids).
    ids = unsqueeze(input, [len(input.shape)]) if len(input.shape) else input
    return embedding(ids, size, is_sparse=is_sparse, is_distributed=is_distributed,
                     padding_idx=padding_idx, param_attr=param_attr, dtype=dtype)


def conv2d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None):
    _check_act(act)
    helper = LayerHelper("conv2d", name=name)
    _check_var(input, "input", "conv2d")
    pair = lambda v: [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]
    groups = groups or 1
    channels = input.shape[1]
    if channels <= 0 or channels % groups:
        raise ValueError("conv2d: input channels %d must be positive and divisible by groups %d"
                         % (channels, groups))
    k = pair(filter_size)
    w = helper.create_parameter(param_attr, [num_filters, channels // groups] + k, input.dtype,
                                default_initializer=MSRAInitializer())
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("conv2d", inputs={"Input": input, "Filter": w}, outputs={"Output": out},
                     attrs={"strides": pair(stride), "paddings": pair(padding),
                            "dilations": pair(dilation), "groups": groups})
    b = helper.create_parameter(bias_attr, [num_filters], input.dtype, is_bias=True)
    if b is not None:
        biased = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("elementwise_add", inputs={"X": out, "Y": b}, outputs={"Out": biased},
                         attrs={"axis": 1})
        out = biased
    return _act(out, act)


def _pair(v, what):
    if isinstance(v, int):
        return [int(v), int(v)]
    v = [int(x) for x in v]
    if len(v) != 2:
        raise ValueError("%s must be an int or two ints, got %r" % (what, v))
    return v


def conv2d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0, stride=1,
                     dilation=1, groups=None, param_attr=None, bias_attr=None, use_cudnn=True,
                     act=None, name=None, data_format="NCHW"):
    """The transpose of conv2d (Fluid's conv2d_transpose): filter [C, num_filters / groups, kh,
    kw]; with output_size and no filter_size the filter is sized to reach output_size."""
    _check_act(act)
    _check_var(input, "input", "conv2d_transpose")
    if data_format != "NCHW":
        raise NotImplementedError("conv2d_transpose: data_format %r (NCHW only)" % (data_format,))
    helper = LayerHelper("conv2d_transpose", name=name)
    groups = groups or 1
    channels = input.shape[1]
    if channels <= 0 or channels % groups or num_filters % groups:
        raise ValueError("conv2d_transpose: input channels %d and num_filters %d must be "
                         "divisible by groups %d" % (channels, num_filters, groups))
    stride, padding = _pair(stride, "stride"), _pair(padding, "padding")
    dilation = _pair(dilation, "dilation")
    size = None if output_size is None else _pair(output_size, "output_size")
    if filter_size is None:
        if size is None:
            raise ValueError("conv2d_transpose: give filter_size or output_size")
        hw = input.shape[2:4]
        if any(d < 0 for d in hw):
            raise ValueError("conv2d_transpose: filter_size is needed when the input's height "
                             "and width are not static")
        filter_size = [(size[a] - (hw[a] - 1) * stride[a] + 2 * padding[a] - 1) // dilation[a] + 1
                       for a in range(2)]
    k = _pair(filter_size, "filter_size")
    # Fluid's default for this filter is Xavier (its layer names no initializer): He's, with
    # fan_in = out channels x kernel, would be far too large for a generator's last layer.
    w = helper.create_parameter(param_attr, [channels, num_filters // groups] + k, input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("conv2d_transpose", inputs={"Input": input, "Filter": w},
                     outputs={"Output": out},
                     attrs={"strides": stride, "paddings": padding, "dilations": dilation,
                            "groups": groups, "output_size": size or []})
    b = helper.create_parameter(bias_attr, [num_filters], input.dtype, is_bias=True)
    if b is not None:
        biased = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("elementwise_add", inputs={"X": out, "Y": b}, outputs={"Out": biased},
                         attrs={"axis": 1})
        out = biased
    return _act(out, act)


def pool2d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0,
           global_pooling=False, use_cudnn=True, ceil_mode=False, name=None, exclusive=True):
    if pool_type not in ("max", "avg"):
        raise ValueError("pool2d: pool_type must be 'max' or 'avg', got %r" % (pool_type,))
    pair = lambda v: [int(v), int(v)] if isinstance(v, int) else [int(x) for x in v]
    return _unary("pool2d", input, {"pooling_type": pool_type, "ksize": pair(pool_size),
                                         "strides": pair(pool_stride),
                                         "paddings": pair(pool_padding),
                                         "global_pooling": global_pooling,
                                         "ceil_mode": ceil_mode, "exclusive": exclusive},
                  name=name)


def batch_norm(input, act=None, is_test=False, momentum=0.9, epsilon=1e-05, param_attr=None,
               bias_attr=None, data_layout="NCHW", name=None, moving_mean_name=None,
               moving_variance_name=None):
    helper = LayerHelper("batch_norm", name=name)
    c = input.shape[1] if data_layout == "NCHW" else input.shape[-1]
    scale = helper.create_parameter(param_attr, [c], input.dtype,
                                    default_initializer=ConstantInitializer(1.0), suffix="w")
    bias = helper.create_parameter(bias_attr, [c], input.dtype, is_bias=True)
    mean = helper.create_parameter(
        ParamAttr(name=moving_mean_name or helper.name + ".mean", trainable=False,
                  initializer=ConstantInitializer(0.0)), [c], input.dtype)
    var = helper.create_parameter(
        ParamAttr(name=moving_variance_name or helper.name + ".var", trainable=False,
                  initializer=ConstantInitializer(1.0)), [c], input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    saved_mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    saved_var = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("batch_norm",
                     inputs={"X": input, "Scale": scale, "Bias": bias, "Mean": mean,
                             "Variance": var},
                     outputs={"Y": out, "MeanOut": mean, "VarianceOut": var,
                              "SavedMean": saved_mean, "SavedVariance": saved_var},
                     attrs={"momentum": momentum, "epsilon": epsilon, "is_test": is_test,
                            "data_layout": data_layout})
    return _act(out, act)


def layer_norm(input, scale=True, shift=True, begin_norm_axis=1, epsilon=1e-05,
               param_attr=None, bias_attr=None, act=None, name=None):
    _check_var(input, "input", "layer_norm")
    rank = len(input.shape)
    if not 0 < begin_norm_axis < rank:
        raise ValueError("layer_norm: begin_norm_axis must be in [1, %d), got %r"
                         % (rank, begin_norm_axis))
    helper = LayerHelper("layer_norm", name=name)
    norm_size = int(np.prod(input.shape[begin_norm_axis:]))
    inputs = {"X": input}
    if scale:
        inputs["Scale"] = helper.create_parameter(
            param_attr, [norm_size], input.dtype,
            default_initializer=ConstantInitializer(1.0), suffix="w")
    if shift:
        inputs["Bias"] = helper.create_parameter(bias_attr, [norm_size], input.dtype,
                                                 is_bias=True)
    out = helper.create_variable_for_type_inference(input.dtype)
    mean = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    var = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("layer_norm", inputs=inputs,
                     outputs={"Y": out, "Mean": mean, "Variance": var},
                     attrs={"begin_norm_axis": begin_norm_axis, "epsilon": epsilon})
    return _act(out, act)


def _tile_to(v, like):
    """v ([..., 1, ...]) tiled along its size-1 dims to like's static dims."""
    times = []
    for a, b in zip(v.shape, like.shape):
        times.append(b if a == 1 and b > 1 else 1)
    return expand(v, times) if any(t > 1 for t in times) else v


def _normalize(x, dims, epsilon):
    mean = reduce_mean(x, dim=dims, keep_dim=True)
    centered = elementwise_sub(x, _tile_to(mean, x))
    var = reduce_mean(square(centered), dim=dims, keep_dim=True)
    std = sqrt(scale(var, 1.0, bias=float(epsilon)))
    return elementwise_div(centered, _tile_to(std, x))


def _affine(x, param_attr, bias_attr, name, c):
    helper = LayerHelper(name)
    scale = helper.create_parameter(param_attr, [c], x.dtype,
                                    default_initializer=ConstantInitializer(1.0))
    bias = helper.create_parameter(bias_attr, [c], x.dtype, is_bias=True)
    out = x
    if scale is not None:
        out = elementwise_mul(out, scale, axis=1)
    if bias is not None:
        out = elementwise_add(out, bias, axis=1)
    return out


def instance_norm(input, epsilon=1e-05, param_attr=None, bias_attr=None, name=None):
    """Each (sample, channel) plane normalized over its H x W, then a per-channel scale and
    bias (static C, H, W)."""
    if len(input.shape) != 4 or any(d <= 0 for d in input.shape[1:]):
        raise ValueError("instance_norm: input must be [N, C, H, W] with static C, H, W, got %r"
                         % (list(input.shape),))
    return _affine(_normalize(input, [2, 3], epsilon), param_attr, bias_attr,
                   name or "instance_norm", input.shape[1])


def group_norm(input, groups, epsilon=1e-05, param_attr=None, bias_attr=None, act=None,
               data_layout="NCHW", name=None):
    """The channels in `groups` groups, each group of a sample normalized over its channels
    and positions, then a per-channel scale and bias (static C, H, W)."""
    if data_layout != "NCHW":
        raise NotImplementedError("group_norm: data_layout %r (NCHW only)" % (data_layout,))
    c = input.shape[1]
    rest = list(input.shape[2:])
    if c <= 0 or c % groups or any(d <= 0 for d in rest):
        raise ValueError("group_norm: channels %d must be static and divisible by groups %d, "
                         "and the other dims static: %r" % (c, groups, list(input.shape)))
    x = reshape(input, [0, groups, -1])
    x = reshape(_normalize(x, [2], epsilon), [0, c] + rest)
    out = _affine(x, param_attr, bias_attr, name or "group_norm", c)
    return _act(out, act) if act else out


def lrn(input, n=5, k=1.0, alpha=1e-4, beta=0.75, name=None):
    """Local response normalization across channels: x / (k + alpha * the sum of x^2 over the
    n channels around each) ^ beta (static C)."""
    c = input.shape[1]
    if c <= 0:
        raise ValueError("lrn: the channel dim must be static")
    sq = square(input)
    half = (n - 1) // 2
    padded = pad(sq, [0, 0, half, n - 1 - half] + [0, 0] * (len(input.shape) - 2))
    total = None
    for s in range(n):
        part = slice(padded, axes=[1], starts=[s], ends=[s + c])
        total = part if total is None else elementwise_add(total, part)
    denom = pow(scale(total, float(alpha), bias=float(k)), factor=float(beta))
    return elementwise_div(input, denom)


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    """x / sqrt(max(sum(x^2 along axis), epsilon))."""
    axis = axis % len(x.shape)
    if x.shape[axis] <= 0:
        raise ValueError("l2_normalize: dim %d of %r must be static" % (axis, list(x.shape)))
    sq = reduce_sum(square(x), dim=axis, keep_dim=True)
    norm = sqrt(elementwise_max(sq, fill_constant([1], x.dtype, float(epsilon))))
    # The norm tiled back along axis, so the division needs no broadcast.
    times = [x.shape[axis] if i == axis else 1 for i in range(len(x.shape))]
    return elementwise_div(x, expand(norm, times))


def dropout(x, dropout_prob, is_test=False, seed=None, name=None,
            dropout_implementation="downgrade_in_infer"):
    if not 0 <= dropout_prob < 1:
        raise ValueError("dropout: dropout_prob must be in [0, 1), got %r" % (dropout_prob,))
    helper = LayerHelper("dropout", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    mask = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    helper.append_op("dropout", inputs={"X": x}, outputs={"Out": out, "Mask": mask},
                     attrs={"dropout_prob": float(dropout_prob), "is_test": is_test,
                            "seed": seed or 0,
                            "dropout_implementation": dropout_implementation})
    return out


def prelu(x, mode, param_attr=None, name=None):
    """max(0, x) + alpha min(0, x) with alpha one value (mode "all"), one per channel
    ("channel", dim 1) or one per element ("element")."""
    if mode not in ("all", "channel", "element"):
        raise ValueError("prelu: mode %r is not all, channel or element" % (mode,))
    shape = {"all": [1], "channel": [x.shape[1]], "element": list(x.shape[1:])}[mode]
    if any(s <= 0 for s in shape):
        raise ValueError("prelu: mode %r needs static dims, input is %r" % (mode,
                                                                            list(x.shape)))
    helper = LayerHelper("prelu", name=name)
    alpha = helper.create_parameter(param_attr, shape, x.dtype,
                                    default_initializer=ConstantInitializer(0.25))
    neg = scale(relu(scale(x, -1.0)), -1.0)  # min(0, x)
    axis = {"all": -1, "channel": 1, "element": 1}[mode]
    return elementwise_add(relu(x), elementwise_mul(neg, alpha, axis=axis))


def maxout(x, groups, name=None, axis=1):
    """Channel groups of `groups` reduced by max: [N, C, ...] -> [N, C / groups, ...]."""
    c = x.shape[axis]
    if c <= 0 or c % groups:
        raise ValueError("maxout: channels %d are not divisible by groups %d" % (c, groups))
    shape = [0 if i < axis else d for i, d in enumerate(x.shape)]
    shape = shape[:axis] + [c // groups, groups] + [d for d in x.shape[axis + 1:]]
    return reduce_max(reshape(x, shape), dim=axis + 1)


def pixel_shuffle(x, upscale_factor):
    """[N, C r^2, H, W] -> [N, C, H r, W r]."""
    r = int(upscale_factor)
    n, c, h, w = x.shape
    if c <= 0 or c % (r * r) or h <= 0 or w <= 0:
        raise ValueError("pixel_shuffle: input %r needs static C divisible by %d and static H, W"
                         % (list(x.shape), r * r))
    y = reshape(x, [-1, c // (r * r), r, r, h, w])
    y = transpose(y, [0, 1, 4, 2, 5, 3])
    return reshape(y, [-1, c // (r * r), h * r, w * r])


def multiplex(inputs, index):
    """Row i of the result = row i of inputs[index[i]] (index: int [N, 1])."""
    k = len(inputs)
    onehot = cast(one_hot(index, k), inputs[0].dtype)  # [N, k]
    out = None
    for j, x in enumerate(inputs):
        w = slice(onehot, axes=[1], starts=[j], ends=[j + 1])  # [N, 1]
        term = elementwise_mul(x, squeeze(w, [1]), axis=0)
        out = term if out is None else elementwise_add(out, term)
    return out


def label_smooth(label, prior_dist=None, epsilon=0.1, dtype="float32", name=None):
    """(1 - epsilon) * label + epsilon * prior (uniform 1 / classes when prior_dist is None)."""
    if not 0 <= epsilon <= 1:
        raise ValueError("label_smooth: epsilon must be in [0, 1], got %r" % (epsilon,))
    if prior_dist is None:
        classes = label.shape[-1]
        if classes <= 0:
            raise ValueError("label_smooth: the last dim of label must be static")
        return scale(label, scale=1.0 - epsilon, bias=epsilon / classes)
    smoothed = scale(label, scale=1.0 - epsilon)
    return elementwise_add(smoothed, scale(prior_dist, scale=float(epsilon)))


def py_func(func, x, out, backward_func=None, skip_vars_in_backward_input=None):
    """Runs the Python callable func on x's values (numpy arrays) when the program runs; its
    results (arrays, one per out variable, which the caller declares with their dims and
    dtypes) become out. backward_func, when given, gets x, out (minus
    skip_vars_in_backward_input) and out's gradients, and returns x's gradients. Programs with
    py_func run from Python only (the loom CLI has no callables)."""
    if not callable(func):
        raise TypeError("py_func: func must be callable, got %r" % (func,))
    xs = [] if x is None else (list(x) if isinstance(x, (list, tuple)) else [x])
    outs = [] if out is None else (list(out) if isinstance(out, (list, tuple)) else [out])
    skip = [v.name if isinstance(v, Variable) else v
            for v in (skip_vars_in_backward_input or [])]
    known = {v.name for v in xs + outs}
    for name in skip:
        if name not in known:
            raise ValueError("py_func: skip_vars_in_backward_input names '%s', which is "
                             "neither an input nor an output" % name)
    fid = core.register_py_func(func)
    bid = core.register_py_func(backward_func) if backward_func is not None else -1
    helper = LayerHelper("py_func")
    helper.append_op("py_func", inputs={"X": xs}, outputs={"Out": outs},
                     attrs={"forward_callable_id": fid, "backward_callable_id": bid,
                            "backward_skip_vars": skip})
    return out
