"""More tensor layers of Fluid 1.8: strided slices, n-d scatters and unique with counts."""
from ..framework import Variable, convert_dtype
from ..layer_helper import LayerHelper
from .common import _check_var
from .tensor import fill_constant

__all__ = ["strided_slice", "scatter_nd_add", "scatter_nd", "unique_with_counts"]


def _int_list(value, what, layer):
    if isinstance(value, Variable):
        raise TypeError("%s: %s must be a list of ints (a Variable is not supported), got '%s'"
                        % (layer, what, value.name))
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) for v in value):
        raise TypeError("%s: %s must be a list of ints, got %r" % (layer, what, value))
    return [int(v) for v in value]


def strided_slice(input, axes, starts, ends, strides):
    """input[starts[i]:ends[i]:strides[i]] on each dim axes[i], other dims whole. Negative
    starts / ends count from the end; a negative stride walks backwards (an end of -1 then
    reaches index 0); a start / end pair pointing against its stride is an error."""
    _check_var(input, "input", "strided_slice")
    lists = [_int_list(v, w, "strided_slice") for v, w in
             ((axes, "axes"), (starts, "starts"), (ends, "ends"), (strides, "strides"))]
    if len(set(len(v) for v in lists)) != 1:
        raise ValueError("strided_slice: axes %r, starts %r, ends %r and strides %r must have "
                         "the same length" % tuple(lists))
    if 0 in lists[3]:
        raise ValueError("strided_slice: strides %r must not hold 0" % (lists[3],))
    helper = LayerHelper("strided_slice")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("strided_slice", inputs={"Input": input}, outputs={"Out": out},
                     attrs=dict(zip(("axes", "starts", "ends", "strides"), lists)))
    return out


def scatter_nd_add(ref, index, updates, name=None):
    """ref with updates[r, ...] added at ref[index[r, 0], ..., index[r, k - 1], ...] for every
    row r of index ([..., k]); updates has index.shape[:-1] + ref.shape[k:]. A slice named
    twice gets both updates."""
    _check_var(ref, "ref", "scatter_nd_add")
    _check_var(index, "index", "scatter_nd_add")
    _check_var(updates, "updates", "scatter_nd_add")
    if convert_dtype(index.dtype) not in (convert_dtype("int32"), convert_dtype("int64")):
        raise TypeError("scatter_nd_add: index '%s' must be int32 or int64" % index.name)
    helper = LayerHelper("scatter_nd_add", name=name)
    out = helper.create_variable_for_type_inference(ref.dtype)
    helper.append_op("scatter_nd_add", inputs={"X": ref, "Index": index, "Updates": updates},
                     outputs={"Out": out})
    return out


def scatter_nd(index, updates, shape, name=None):
    """scatter_nd_add into zeros of shape (and updates' dtype)."""
    _check_var(updates, "updates", "scatter_nd")
    shape = _int_list(shape, "shape", "scatter_nd")
    if any(s < 0 for s in shape):
        raise ValueError("scatter_nd: shape %r must be static (no -1)" % (shape,))
    return scatter_nd_add(fill_constant(shape, updates.dtype, 0), index, updates, name=name)


def unique_with_counts(x, dtype="int32"):
    """(the distinct values of the 1-D x in order of first appearance, each x's index into
    them, how often each occurs); index and count are of dtype int32 or int64."""
    _check_var(x, "x", "unique_with_counts")
    if convert_dtype(dtype) not in (convert_dtype("int32"), convert_dtype("int64")):
        raise TypeError("unique_with_counts: dtype must be int32 or int64, got %r" % (dtype,))
    if len(x.shape) != 1:
        raise ValueError("unique_with_counts: x '%s' must be 1-D, got shape %r"
                         % (x.name, list(x.shape)))
    helper = LayerHelper("unique_with_counts")
    out = helper.create_variable_for_type_inference(x.dtype, stop_gradient=True)
    index = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    count = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("unique_with_counts", inputs={"X": x},
                     outputs={"Out": out, "Index": index, "Count": count},
                     attrs={"dtype": int(convert_dtype(dtype))})
    return out, index, count
