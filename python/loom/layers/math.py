"""Arithmetic: element-wise ops of two inputs (broadcast along ``axis``), products,
reductions, scale and clip, and the finiteness tests."""
from .. import core
from ..layer_helper import LayerHelper
from .activation import _act, abs, floor
from .common import _check_var, _unary
from .control_flow import equal, greater_than, logical_not, logical_or, not_equal
from .tensor import cast, fill_constant

__all__ = ["elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
           "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_floordiv",
           "elementwise_mod", "mul", "matmul", "sums", "sum", "mean", "reduce_sum", "reduce_mean",
           "reduce_max", "reduce_min", "reduce_prod", "reduce_all", "reduce_any", "cumsum", "scale",
           "pow", "clip", "clip_by_norm", "cos_sim", "has_nan", "has_inf", "isfinite"]


def _elementwise(op_type, x, y, axis=-1, act=None, name=None):
    _check_var(x, "x", op_type)
    _check_var(y, "y", op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"axis": axis})
    return _act(out, act)


def elementwise_add(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_add", x, y, axis, act, name)


def elementwise_sub(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_sub", x, y, axis, act, name)


def elementwise_mul(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_mul", x, y, axis, act, name)


def elementwise_div(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_div", x, y, axis, act, name)


def elementwise_max(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_max", x, y, axis, act, name)


def elementwise_min(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_min", x, y, axis, act, name)


def elementwise_pow(x, y, axis=-1, act=None, name=None):
    return _elementwise("elementwise_pow", x, y, axis, act, name)


def elementwise_floordiv(x, y, axis=-1, act=None, name=None):
    """floor(x / y) (computed in float64 for integer inputs)."""
    return _int_safe(lambda a, b: floor(elementwise_div(a, b, axis=axis)), x, y)


def elementwise_mod(x, y, axis=-1, act=None, name=None):
    """x - floor(x / y) y: the remainder with y's sign (computed in float64 for integers)."""
    def mod(a, b):
        q = floor(elementwise_div(a, b, axis=axis))
        return elementwise_sub(a, elementwise_mul(q, b, axis=axis))
    return _int_safe(mod, x, y)


def _int_safe(fn, x, y):
    if int(x.dtype) in (int(core.DataType.INT32), int(core.DataType.INT64)):
        return cast(fn(cast(x, "float64"), cast(y, "float64")), x.dtype)
    return fn(x, y)


def mul(x, y, x_num_col_dims=1, y_num_col_dims=1, name=None):
    helper = LayerHelper("mul", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("mul", inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"x_num_col_dims": x_num_col_dims, "y_num_col_dims": y_num_col_dims})
    return out


def matmul(x, y, transpose_x=False, transpose_y=False, alpha=1.0, name=None):
    helper = LayerHelper("matmul", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("matmul", inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"transpose_X": transpose_x, "transpose_Y": transpose_y,
                            "alpha": float(alpha)})
    return out


def sums(input, out=None):
    helper = LayerHelper("sum")
    out = out or helper.create_variable_for_type_inference(input[0].dtype)
    helper.append_op("sum", inputs={"X": list(input)}, outputs={"Out": out})
    return out


def sum(x):
    return sums(x if isinstance(x, (list, tuple)) else [x])


def mean(x, name=None):
    return _unary("mean", x, name=name)


def _reduce(op_type, input, dim, keep_dim, name):
    attrs = {"keep_dim": keep_dim, "reduce_all": dim is None,
             "dim": [0] if dim is None else ([dim] if isinstance(dim, int) else list(dim))}
    return _unary(op_type, input, attrs, name=name)


def reduce_sum(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_sum", input, dim, keep_dim, name)


def reduce_mean(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_mean", input, dim, keep_dim, name)


def reduce_max(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_max", input, dim, keep_dim, name)


def reduce_min(input, dim=None, keep_dim=False, name=None):
    return scale(reduce_max(scale(input, -1.0), dim, keep_dim), -1.0)


def reduce_prod(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_prod", input, dim, keep_dim, name)


def reduce_all(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_all", input, dim, keep_dim, name)


def reduce_any(input, dim=None, keep_dim=False, name=None):
    return _reduce("reduce_any", input, dim, keep_dim, name)


def cumsum(x, axis=None, exclusive=None, reverse=None):
    attrs = {"axis": -1 if axis is None else int(axis), "exclusive": bool(exclusive),
             "reverse": bool(reverse), "flatten": axis is None}
    return _unary("cumsum", x, attrs)


def scale(x, scale=1.0, bias=0.0, bias_after_scale=True, act=None, name=None):
    out = _unary("scale", x, {"scale": float(scale), "bias": float(bias),
                              "bias_after_scale": bias_after_scale}, name=name)
    return _act(out, act)


def pow(x, factor=1.0, name=None):
    return _unary("pow", x, {"factor": float(factor)}, name=name)


def clip(x, min, max, name=None):
    return _unary("clip", x, {"min": float(min), "max": float(max)}, name=name)


def clip_by_norm(x, max_norm, name=None):
    return _unary("clip_by_norm", x, {"max_norm": float(max_norm)}, name=name)


def cos_sim(X, Y):
    """Row-wise cosine similarity [N, 1] (Y may be one row)."""
    helper = LayerHelper("cos_sim")
    out = helper.create_variable_for_type_inference(X.dtype)
    xn = helper.create_variable_for_type_inference(X.dtype)
    yn = helper.create_variable_for_type_inference(X.dtype)
    helper.append_op("cos_sim", inputs={"X": X, "Y": Y},
                     outputs={"Out": out, "XNorm": xn, "YNorm": yn})
    return out


def has_nan(x):
    """A one-element bool: whether x holds a NaN."""
    nan = cast(not_equal(x, x), "float32")
    return greater_than(reduce_max(nan), fill_constant([1], "float32", 0.5))


def has_inf(x):
    """A one-element bool: whether x holds an infinity."""
    inf = cast(equal(abs(x), fill_constant([1], x.dtype, float("inf"))), "float32")
    return greater_than(reduce_max(inf), fill_constant([1], "float32", 0.5))


def isfinite(x):
    """A one-element bool: whether every element of x is finite."""
    return logical_not(logical_or(has_nan(x), has_inf(x)))
