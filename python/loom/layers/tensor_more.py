"""More tensor layers of Fluid 1.8: strided slices, n-d scatters, unique with counts, id
sharding and hashing, sampling, the position encoding, the bilinear tensor product and
similarity_focus."""
from ..framework import Variable, convert_dtype
from ..layer_helper import LayerHelper
from .activation import _act, _check_act
from .common import _check_var
from .tensor import fill_constant

__all__ = ["strided_slice", "scatter_nd_add", "scatter_nd", "unique_with_counts", "shard_index",
           "hash", "sampling_id", "add_position_encoding", "bilinear_tensor_product",
           "similarity_focus"]


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


def _check_int_ids(x, what, layer):
    _check_var(x, what, layer)
    if convert_dtype(x.dtype) not in (convert_dtype("int32"), convert_dtype("int64")):
        raise TypeError("%s: %s '%s' must be int32 or int64" % (layer, what, x.name))


def shard_index(input, index_num, nshards, shard_id, ignore_value=-1):
    """The ids of input ([..., 1], in [0, index_num)) within shard shard_id of nshards equal
    shards (of ceil(index_num / nshards) ids): id % shard_size, or ignore_value for ids of
    other shards."""
    _check_int_ids(input, "input", "shard_index")
    for what, v in (("index_num", index_num), ("nshards", nshards), ("shard_id", shard_id),
                    ("ignore_value", ignore_value)):
        if not isinstance(v, int):
            raise TypeError("shard_index: %s must be an int, got %r" % (what, v))
    if index_num <= 0 or nshards <= 0:
        raise ValueError("shard_index: index_num (%d) and nshards (%d) must be > 0"
                         % (index_num, nshards))
    if not 0 <= shard_id < nshards:
        raise ValueError("shard_index: shard_id must be in [0, nshards = %d), got %d"
                         % (nshards, shard_id))
    helper = LayerHelper("shard_index")
    out = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("shard_index", inputs={"X": input}, outputs={"Out": out},
                     attrs={"index_num": index_num, "nshards": nshards, "shard_id": shard_id,
                            "ignore_value": ignore_value})
    return out


def hash(input, hash_size, num_hash=1, name=None):
    """int64 [rows, num_hash, 1]: num_hash hashes (XXH64 seeded by the hash's index, modulo
    hash_size, as Fluid's) of every row of the int input [rows, width]."""
    _check_int_ids(input, "input", "hash")
    if not isinstance(hash_size, int) or hash_size < 1:
        raise ValueError("hash: hash_size must be an int >= 1, got %r" % (hash_size,))
    if not isinstance(num_hash, int) or num_hash < 1:
        raise ValueError("hash: num_hash must be an int >= 1, got %r" % (num_hash,))
    helper = LayerHelper("hash", name=name)
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("hash", inputs={"X": input}, outputs={"Out": out},
                     attrs={"num_hash": num_hash, "mod_by": hash_size})
    return out


def sampling_id(x, min=0.0, max=1.0, seed=0, dtype="float32"):
    """int64 [batch]: one id drawn from each row of x [batch, width] (a distribution): the
    first j whose cumulative sum exceeds r ~ U[min, max). seed 0 draws a fresh seed. dtype is
    accepted for compatibility (Fluid's kernel writes int64 ids too)."""
    _check_var(x, "x", "sampling_id")
    convert_dtype(dtype)
    if len(x.shape) != 2:
        raise ValueError("sampling_id: x '%s' must be [batch, width], got %r"
                         % (x.name, list(x.shape)))
    if not min < max:
        raise ValueError("sampling_id: min (%r) must be below max (%r)" % (min, max))
    helper = LayerHelper("sampling_id")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sampling_id", inputs={"X": x}, outputs={"Out": out},
                     attrs={"min": float(min), "max": float(max), "seed": int(seed)})
    return out


def add_position_encoding(input, alpha, beta, name=None):
    """alpha * input + beta * the sinusoid position encoding (sin on the first half of the
    features, cos on the second) of each position; input is [batch, time, D] or a LoD tensor
    [rows, D] (positions restart at every sequence), D even."""
    _check_var(input, "input", "add_position_encoding")
    if len(input.shape) not in (2, 3):
        raise ValueError("add_position_encoding: input '%s' must be [batch, time, D] or a LoD "
                         "tensor [rows, D], got %r" % (input.name, list(input.shape)))
    helper = LayerHelper("add_position_encoding", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("add_position_encoding", inputs={"X": input}, outputs={"Out": out},
                     attrs={"alpha": float(alpha), "beta": float(beta)})
    return out


def bilinear_tensor_product(x, y, size, act=None, name=None, param_attr=None, bias_attr=None):
    """out[b, i] = x[b] . W[i] . y[b]^T + bias[i] for x [batch, M], y [batch, N] and the
    parameter W [size, M, N] (bias [1, size])."""
    _check_var(x, "x", "bilinear_tensor_product")
    _check_var(y, "y", "bilinear_tensor_product")
    _check_act(act)
    if len(x.shape) != 2 or len(y.shape) != 2 or x.shape[1] <= 0 or y.shape[1] <= 0:
        raise ValueError("bilinear_tensor_product: x and y must be [batch, M] and [batch, N] "
                         "with static M, N, got %r and %r" % (list(x.shape), list(y.shape)))
    if not isinstance(size, int) or size < 1:
        raise ValueError("bilinear_tensor_product: size must be an int >= 1, got %r" % (size,))
    helper = LayerHelper("bilinear_tensor_product", name=name)
    w = helper.create_parameter(param_attr, [size, x.shape[1], y.shape[1]], x.dtype)
    inputs = {"X": x, "Y": y, "Weight": w}
    b = helper.create_parameter(bias_attr, [1, size], x.dtype, is_bias=True)
    if b is not None:
        inputs["Bias"] = b
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("bilinear_tensor_product", inputs=inputs, outputs={"Out": out})
    return _act(out, act)


def similarity_focus(input, axis, indexes, name=None):
    """A 0/1 mask of input [N, A, B, C]: for every batch entry and every channel i of indexes
    along axis (1, 2 or 3), the largest elements of input's slice i taken greedily one per row
    and column, marked along all of axis; the masks of the indexes are OR-ed."""
    _check_var(input, "input", "similarity_focus")
    if len(input.shape) != 4:
        raise ValueError("similarity_focus: input '%s' must be 4-D [N, A, B, C], got %r"
                         % (input.name, list(input.shape)))
    if axis not in (1, 2, 3):
        raise ValueError("similarity_focus: axis must be 1, 2 or 3, got %r" % (axis,))
    indexes = _int_list(indexes, "indexes", "similarity_focus")
    if not indexes:
        raise ValueError("similarity_focus: indexes must not be empty")
    helper = LayerHelper("similarity_focus", name=name)
    out = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    helper.append_op("similarity_focus", inputs={"X": input}, outputs={"Out": out},
                     attrs={"axis": axis, "indexes": indexes})
    return out
