"""Tensors: constants and random fills, parameters and global variables, casts, shapes
(reshape, transpose, concat, split, slice, pad, ...), indexing (gather, scatter, where, arg*)
and sequences of numbers (range, linspace, eye)."""
import builtins as _builtins

import numpy as np

from .. import core, unique_name
from ..framework import (Variable, _fill_value_attrs, convert_dtype, default_main_program,
                         default_startup_program, dtype_name)
from ..initializer import NumpyArrayInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .activation import _act
from .common import _check_var, _unary

__all__ = ["fill_constant", "fill_constant_batch_size_like", "create_global_var",
           "create_parameter", "create_tensor", "zeros", "ones", "zeros_like", "ones_like",
           "uniform_random", "gaussian_random", "uniform_random_batch_size_like",
           "gaussian_random_batch_size_like", "assign", "cast", "reshape", "transpose", "flatten",
           "squeeze", "unsqueeze", "concat", "stack", "unstack", "split", "slice", "crop_tensor",
           "crop", "pad", "pad_constant_like", "expand", "expand_as", "gather", "gather_nd",
           "scatter", "one_hot", "shape", "rank", "size", "argmax", "argmin", "argsort", "topk",
           "where", "unique", "reverse", "range", "linspace", "eye", "diag"]


def fill_constant(shape, dtype, value, force_cpu=False, out=None):
    helper = LayerHelper("fill_constant")
    out = out or helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    attrs = {"shape": [int(s) for s in shape]}
    attrs.update(_fill_value_attrs(value, dtype))
    helper.append_op("fill_constant", outputs={"Out": out}, attrs=attrs)
    return out


def fill_constant_batch_size_like(input, shape, dtype, value, input_dim_idx=0, output_dim_idx=0,
                                  force_cpu=False):
    """A tensor of shape (dim output_dim_idx replaced by input's dim input_dim_idx) filled
    with value."""
    helper = LayerHelper("fill_constant_batch_size_like")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    attrs = {"shape": [int(s) for s in shape], "input_dim_idx": int(input_dim_idx),
             "output_dim_idx": int(output_dim_idx)}
    attrs.update(_fill_value_attrs(value, dtype))
    helper.append_op("fill_constant_batch_size_like", inputs={"Input": input},
                     outputs={"Out": out}, attrs=attrs)
    return out


def create_global_var(shape, value, dtype, persistable=False, force_cpu=False, name=None):
    """A variable of the global block filled with value by the startup program (Fluid's
    create_global_var), e.g. a step counter. persistable=True keeps it across runs."""
    name = name or unique_name.generate("global_var")
    shape = [int(s) for s in shape]
    main_var = default_main_program().global_block().create_var(
        name=name, shape=shape, dtype=dtype, persistable=persistable, stop_gradient=True)
    sblock = default_startup_program().global_block()
    svar = sblock.create_var(name=name, shape=shape, dtype=dtype, persistable=persistable,
                             stop_gradient=True)
    attrs = {"shape": shape}
    attrs.update(_fill_value_attrs(value, dtype))
    sblock.append_op("fill_constant", outputs={"Out": svar}, attrs=attrs)
    return main_var


def create_parameter(shape, dtype, name=None, attr=None, is_bias=False,
                     default_initializer=None):
    """A parameter of the given shape, initialized by the startup program (Fluid's
    layers.create_parameter): attr (a ParamAttr) names it and picks its initializer."""
    attr = ParamAttr._to_attr(attr)
    if name is not None and attr.name is None:
        attr.name = name
    helper = LayerHelper("create_parameter")
    return helper.create_parameter(attr, shape, dtype, is_bias, default_initializer)


def create_tensor(dtype, name=None, persistable=False):
    """A variable to assign to later (no op)."""
    return default_main_program().global_block().create_var(
        name=name or unique_name.generate("create_tensor"), dtype=dtype, persistable=persistable)


def zeros(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 0.0)


def ones(shape, dtype, force_cpu=False):
    return fill_constant(shape, dtype, 1.0)


def zeros_like(x, out=None):
    _check_var(x, "x", "zeros_like")
    helper = LayerHelper("fill_zeros_like")
    if out is None:
        out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("fill_zeros_like", inputs={"X": x}, outputs={"Out": out})
    return out


def ones_like(x, out=None):
    """Ones with x's dims and dtype: x's zeros plus one (a scale op)."""
    return _unary("scale", zeros_like(x), {"scale": 0.0, "bias": 1.0, "bias_after_scale": True})


def uniform_random(shape, dtype="float32", min=-1.0, max=1.0, seed=0):
    helper = LayerHelper("uniform_random")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("uniform_random", outputs={"Out": out},
                     attrs={"shape": [int(s) for s in shape], "min": float(min),
                            "max": float(max), "seed": int(seed),
                            "dtype": int(convert_dtype(dtype))})
    return out


def gaussian_random(shape, mean=0.0, std=1.0, seed=0, dtype="float32"):
    helper = LayerHelper("gaussian_random")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("gaussian_random", outputs={"Out": out},
                     attrs={"shape": [int(s) for s in shape], "mean": float(mean),
                            "std": float(std), "seed": int(seed),
                            "dtype": int(convert_dtype(dtype))})
    return out


def _random_like(op, input, shape, dtype, input_dim_idx, output_dim_idx, seed, extra):
    helper = LayerHelper(op)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    attrs = {"shape": [int(s) for s in shape], "input_dim_idx": int(input_dim_idx),
             "output_dim_idx": int(output_dim_idx), "seed": int(seed),
             "dtype": int(convert_dtype(dtype))}
    attrs.update(extra)
    helper.append_op(op, inputs={"Input": input}, outputs={"Out": out}, attrs=attrs)
    return out


def uniform_random_batch_size_like(input, shape, dtype="float32", input_dim_idx=0,
                                   output_dim_idx=0, min=-1.0, max=1.0, seed=0):
    return _random_like("uniform_random_batch_size_like", input, shape, dtype, input_dim_idx,
                        output_dim_idx, seed, {"min": float(min), "max": float(max)})


def gaussian_random_batch_size_like(input, shape, input_dim_idx=0, output_dim_idx=0, mean=0.0,
                                    std=1.0, seed=0, dtype="float32"):
    return _random_like("gaussian_random_batch_size_like", input, shape, dtype, input_dim_idx,
                        output_dim_idx, seed, {"mean": float(mean), "std": float(std)})


def assign(input, output=None):
    helper = LayerHelper("assign")
    if isinstance(input, (np.ndarray, list, tuple, float, int)):
        # A constant array: an assign_value op holding its values.
        value = np.asarray(input)
        if value.dtype == np.float64:
            value = value.astype("float32")
        dtype = dtype_name(convert_dtype(str(value.dtype)))
        output = output or helper.create_variable_for_type_inference(dtype)
        attrs = {"shape": list(value.shape) or [1], "dtype": int(convert_dtype(dtype))}
        flat = value.ravel()
        if value.dtype == np.float32:
            attrs["fp32_values"] = [float(v) for v in flat]
        elif value.dtype == np.int32:
            attrs["int32_values"] = [int(v) for v in flat]
        elif value.dtype == np.int64:
            attrs["int64_values"] = [int(v) for v in flat]
        else:
            raise TypeError("assign: a %s array is not supported (float32, int32, int64)"
                            % value.dtype)
        helper.append_op("assign_value", outputs={"Out": output}, attrs=attrs)
        return output
    output = output or helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("assign", inputs={"X": input}, outputs={"Out": output})
    return output


def cast(x, dtype):
    helper = LayerHelper("cast")
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("cast", inputs={"X": x}, outputs={"Out": out},
                     attrs={"in_dtype": int(x.dtype), "out_dtype": int(convert_dtype(dtype))})
    return out


def reshape(x, shape, actual_shape=None, act=None, inplace=False, name=None):
    out = _unary("reshape", x, {"shape": [int(s) for s in shape]},
                 name=name)
    return _act(out, act)


def transpose(x, perm, name=None):
    return _unary("transpose", x, {"axis": list(perm)}, name=name)


def flatten(x, axis=1, name=None):
    return _unary("flatten", x, {"axis": axis}, name=name)


def squeeze(input, axes, name=None):
    return _unary("squeeze", input, {"axes": list(axes)}, name=name)


def unsqueeze(input, axes, name=None):
    return _unary("unsqueeze", input, {"axes": list(axes)}, name=name)


def concat(input, axis=0, name=None):
    helper = LayerHelper("concat", name=name)
    out = helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("concat", inputs={"X": list(input)}, outputs={"Out": out},
                     attrs={"axis": axis})
    return out


def stack(x, axis=0):
    helper = LayerHelper("stack")
    out = helper.create_variable_for_type_inference(x[0].dtype)
    helper.append_op("stack", inputs={"X": list(x)}, outputs={"Y": out}, attrs={"axis": axis})
    return out


def unstack(x, axis=0, num=None):
    """The slices of x along axis, each without that dim."""
    n = num if num is not None else x.shape[axis]
    if n is None or n <= 0:
        raise ValueError("unstack: the length of axis %d must be static or given as num" % axis)
    return [squeeze(p, [axis]) for p in split(x, int(n), dim=axis)]


def split(input, num_or_sections, dim=-1, name=None):
    _check_var(input, "input", "split")
    helper = LayerHelper("split", name=name)
    if isinstance(num_or_sections, int):
        if num_or_sections <= 0:
            raise ValueError("split: num_or_sections must be > 0, got %r" % (num_or_sections,))
        n, attrs = num_or_sections, {"num": num_or_sections, "sections": []}
    else:
        sections = [int(s) for s in num_or_sections]
        n, attrs = len(sections), {"num": 0, "sections": sections}
    attrs["axis"] = dim
    outs = [helper.create_variable_for_type_inference(input.dtype) for _ in _builtins.range(n)]
    helper.append_op("split", inputs={"X": input}, outputs={"Out": outs}, attrs=attrs)
    return outs


def slice(input, axes, starts, ends):
    _check_var(input, "input", "slice")
    helper = LayerHelper("slice")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("slice", inputs={"Input": input}, outputs={"Out": out},
                     attrs={"axes": [int(a) for a in axes], "starts": [int(s) for s in starts],
                            "ends": [int(e) for e in ends]})
    return out


def crop_tensor(x, shape=None, offsets=None, name=None):
    """The block of x at offsets (default 0) of the given shape (-1: to the end)."""
    if shape is None:
        raise ValueError("crop_tensor: shape is required")
    offsets = list(offsets or [0] * len(x.shape))
    if len(shape) != len(x.shape) or len(offsets) != len(x.shape):
        raise ValueError("crop_tensor: shape and offsets need one entry per dim of %r"
                         % (list(x.shape),))
    axes, starts, ends = [], [], []
    for a, (n, o) in enumerate(zip(shape, offsets)):
        if n == -1 and o == 0:
            continue
        axes.append(a)
        starts.append(int(o))
        ends.append(int(o + n) if n != -1 else 2 ** 31 - 1)
    return slice(x, axes=axes, starts=starts, ends=ends) if axes else x


def crop(x, shape=None, offsets=None, name=None):
    """Fluid's crop: shape may be a list or a Variable whose (static) shape is taken."""
    if isinstance(shape, Variable):
        shape = list(shape.shape)
    return crop_tensor(x, shape, offsets)


def pad(x, paddings, pad_value=0.0, name=None):
    """x padded with pad_value: paddings = [before_0, after_0, before_1, after_1, ...] (static
    dims where padding is added)."""
    if len(paddings) != 2 * len(x.shape):
        raise ValueError("pad: %d paddings for %d dims (two per dim)" % (len(paddings),
                                                                         len(x.shape)))
    out = x
    for a in _builtins.range(len(x.shape)):
        before, after = int(paddings[2 * a]), int(paddings[2 * a + 1])
        if before == 0 and after == 0:
            continue
        dims = list(out.shape)
        if any(d < 0 for i, d in enumerate(dims) if i != a) and a != 0:
            raise ValueError("pad: padding dim %d needs the other dims static, got %r"
                             % (a, dims))
        parts = []
        for n in (before, after):
            if n:
                shape = list(dims)
                shape[a] = n
                if shape[0] < 0:
                    parts.append(fill_constant_batch_size_like(out, shape, out.dtype, pad_value))
                else:
                    parts.append(fill_constant(shape, out.dtype, pad_value))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], out, parts[1]) if p is not None]
        out = concat(pieces, axis=a)
    return out


def pad_constant_like(x, y, pad_value=0.0, name=None):
    """y padded at the end of each dim with pad_value to x's (static) dims."""
    paddings = []
    for a, (dx, dy) in enumerate(zip(x.shape, y.shape)):
        if dx < 0 or dy < 0:
            if dx == dy:
                paddings += [0, 0]
                continue
            raise ValueError("pad_constant_like: dim %d must be static" % a)
        if dy > dx:
            raise ValueError("pad_constant_like: y is larger than x in dim %d" % a)
        paddings += [0, dx - dy]
    return pad(y, paddings, pad_value)


def expand(x, expand_times, name=None):
    return _unary("expand", x, {"expand_times": [int(t) for t in expand_times]}, name=name)


def expand_as(x, target_tensor, name=None):
    """x tiled to target_tensor's (static) dims."""
    times = []
    for a, b in zip(x.shape, target_tensor.shape):
        if a <= 0 or b <= 0 or b % a:
            raise ValueError("expand_as: %r does not tile to %r" % (list(x.shape),
                                                                   list(target_tensor.shape)))
        times.append(b // a)
    return expand(x, times)


def gather(input, index):
    helper = LayerHelper("gather")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("gather", inputs={"X": input, "Index": index}, outputs={"Out": out})
    return out


def gather_nd(input, index, name=None):
    """out[i...] = input[index[i..., 0], ..., index[i..., k - 1], ...]."""
    helper = LayerHelper("gather_nd", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("gather_nd", inputs={"X": input, "Index": index}, outputs={"Out": out})
    return out


def scatter(input, index, updates, name=None, overwrite=True):
    """input with row index[i] replaced by updates[i] (overwrite), or set to the sum of that
    row's updates."""
    helper = LayerHelper("scatter", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("scatter", inputs={"X": input, "Ids": index, "Updates": updates},
                     outputs={"Out": out}, attrs={"overwrite": bool(overwrite)})
    return out


def one_hot(input, depth, allow_out_of_range=False):
    """[..., 1] int ids -> [..., depth] float32 rows."""
    helper = LayerHelper("one_hot")
    out = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    helper.append_op("one_hot", inputs={"X": input}, outputs={"Out": out},
                     attrs={"depth": int(depth), "allow_out_of_range": bool(allow_out_of_range),
                            "dtype": int(core.DataType.FP32)})
    return out


def shape(input):
    helper = LayerHelper("shape")
    out = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("shape", inputs={"Input": input}, outputs={"Out": out})
    return out


def rank(input):
    """The number of dims of input, as a one-element int32 tensor."""
    return fill_constant([1], "int32", len(input.shape))


def size(input):
    """The number of elements of input (its dims must be static), as a one-element int64."""
    n = 1
    for d in input.shape:
        if d < 0:
            raise ValueError("size: '%s' has a dynamic dim %r" % (input.name, list(input.shape)))
        n *= d
    return fill_constant([1], "int64", n)


def argmax(x, axis=0):
    helper = LayerHelper("arg_max")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("arg_max", inputs={"X": x}, outputs={"Out": out}, attrs={"axis": axis})
    return out


def argmin(x, axis=0):
    helper = LayerHelper("arg_min")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("arg_min", inputs={"X": x}, outputs={"Out": out}, attrs={"axis": axis})
    return out


def argsort(input, axis=-1, descending=False, name=None):
    """(sorted values, int64 indices) along axis."""
    helper = LayerHelper("argsort", name=name)
    out = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    ids = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("argsort", inputs={"X": input}, outputs={"Out": out, "Indices": ids},
                     attrs={"axis": int(axis), "descending": bool(descending)})
    return out, ids


def topk(input, k, name=None):
    helper = LayerHelper("top_k", name=name)
    values = helper.create_variable_for_type_inference(input.dtype)
    indices = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("top_k", inputs={"X": input}, outputs={"Out": values, "Indices": indices},
                     attrs={"k": k})
    return values, indices


def where(condition):
    """The int64 coordinates [K, rank] of condition's true elements."""
    helper = LayerHelper("where_index")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("where_index", inputs={"Condition": condition}, outputs={"Out": out})
    return out


def unique(x, dtype="int32"):
    """(the distinct values of x in order of first appearance, each x's index into them)."""
    helper = LayerHelper("unique")
    out = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    index = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("unique", inputs={"X": x}, outputs={"Out": out, "Index": index},
                     attrs={"dtype": int(convert_dtype(dtype))})
    return out, index


def reverse(x, axis):
    return _unary("reverse", x, {"axis": [axis] if isinstance(axis, int) else list(axis)})


def _scalar(v, dtype):
    return v if isinstance(v, Variable) else fill_constant([1], dtype, v)


def range(start, end, step, dtype):
    """start, start + step, ... below end (1-D)."""
    helper = LayerHelper("range")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("range", inputs={"Start": _scalar(start, dtype), "End": _scalar(end, dtype),
                                      "Step": _scalar(step, dtype)}, outputs={"Out": out})
    return out


def linspace(start, stop, num, dtype):
    """num values from start to stop, both included."""
    helper = LayerHelper("linspace")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("linspace", inputs={"Start": _scalar(start, dtype),
                                         "Stop": _scalar(stop, dtype),
                                         "Num": _scalar(num, "int32")}, outputs={"Out": out})
    return out


def eye(num_rows, num_columns=None, batch_shape=None, dtype="float32"):
    if batch_shape:
        raise NotImplementedError("eye: batch_shape is not supported")
    helper = LayerHelper("eye")
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("eye", outputs={"Out": out},
                     attrs={"num_rows": int(num_rows),
                            "num_columns": -1 if num_columns is None else int(num_columns),
                            "dtype": int(convert_dtype(dtype))})
    return out


def diag(diagonal):
    """A square matrix with diagonal (a Variable or numpy array) on its diagonal."""
    if not isinstance(diagonal, Variable):
        value = np.asarray(diagonal)
        d = create_global_var(list(value.shape), 0.0, dtype_name(convert_dtype(
            str(value.dtype))), persistable=True)
        NumpyArrayInitializer(value)(d, default_main_program().global_block())
        diagonal = d
    helper = LayerHelper("diag")
    out = helper.create_variable_for_type_inference(diagonal.dtype, stop_gradient=True)
    helper.append_op("diag", inputs={"Diagonal": diagonal}, outputs={"Out": out})
    return out
