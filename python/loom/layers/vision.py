"""Image and volume layers: pad2d, resizing (image_resize and its bilinear / nearest / trilinear
forms, image_resize_short), adaptive pooling, conv3d / conv3d_transpose / pool3d on NCDHW
volumes, and the channel rearrangements affine_channel, space_to_depth, shuffle_channel,
temporal_shift and unfold; affine_grid and grid_sampler (a spatial transformer); random_crop.

Layers with their own ops (pad2d, the resizes, the poolings, the 3-D convolutions) build one op;
the channel rearrangements are exact compositions of reshape / transpose / slice / concat and the
element-wise ops. A channels-last data_format the op does not take is handled by transposing to
channels-first and back."""
import numpy as np

from .. import unique_name
from ..framework import Variable, dtype_name
from ..initializer import MSRAInitializer
from ..layer_helper import LayerHelper
from .activation import _act, _check_act
from .common import _check_var
from .math import elementwise_add, elementwise_mul
from .tensor import (assign, cast, concat, create_global_var, fill_constant_batch_size_like,
                     reshape, slice, transpose)

__all__ = ["pad2d", "image_resize", "resize_bilinear", "resize_nearest", "resize_trilinear",
           "image_resize_short", "adaptive_pool2d", "adaptive_pool3d", "pool3d", "conv3d",
           "conv3d_transpose", "affine_channel", "space_to_depth", "shuffle_channel",
           "temporal_shift", "unfold", "affine_grid", "grid_sampler", "random_crop"]


def _ints(v, n, what, layer):
    """v as a list of n ints (an int repeats)."""
    if isinstance(v, (int, np.integer)):
        return [int(v)] * n
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise ValueError("%s: %s must be an int or %d ints, got %r" % (layer, what, n, v))
    return [int(x) for x in v]


def _one_op(op_type, x, attrs, name=None, in_slot="X", out_slot="Out", extra_inputs=None):
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    inputs = {in_slot: x}
    inputs.update(extra_inputs or {})
    helper.append_op(op_type, inputs=inputs, outputs={out_slot: out}, attrs=attrs)
    return out


# ---- padding ---------------------------------------------------------------------------------

def pad2d(input, paddings=[0, 0, 0, 0], mode="constant", pad_value=0.0, data_format="NCHW",
          name=None):
    """input [N, C, H, W] (or NHWC) padded by paddings = [top, bottom, left, right] (4 ints, or
    an int32 [4] Variable read when the program runs): with pad_value (mode 'constant'), the
    mirror image without the border pixel ('reflect') or the border pixel repeated ('edge')."""
    _check_var(input, "input", "pad2d")
    size_var = None
    if isinstance(paddings, Variable):  # read when the program runs
        size_var = _size_variable(paddings, "paddings", 4, "pad2d")
        paddings = [0, 0, 0, 0]
    paddings = _ints(paddings, 4, "paddings", "pad2d")
    if any(p < 0 for p in paddings):
        raise ValueError("pad2d: paddings must be >= 0, got %r" % (paddings,))
    if mode not in ("constant", "reflect", "edge"):
        raise ValueError("pad2d: mode must be 'constant', 'reflect' or 'edge', got %r" % (mode,))
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError("pad2d: data_format must be 'NCHW' or 'NHWC', got %r" % (data_format,))
    if len(input.shape) != 4:
        raise ValueError("pad2d: input must be 4-D, got shape %r" % (list(input.shape),))
    return _one_op("pad2d", input, {"paddings": paddings, "mode": mode,
                                    "pad_value": float(pad_value), "data_format": data_format},
                   name=name, extra_inputs={"Paddings": size_var} if size_var else None)


# ---- resizing --------------------------------------------------------------------------------

_RESAMPLE_OPS = {"BILINEAR": "bilinear_interp", "NEAREST": "nearest_interp",
                 "TRILINEAR": "trilinear_interp"}


def image_resize(input, out_shape=None, scale=None, name=None, resample="BILINEAR",
                 actual_shape=None, align_corners=True, align_mode=1, data_format="NCHW"):
    """input resized on its spatial axes to out_shape ([H, W], or [D, H, W] for TRILINEAR), or
    by scale when out_shape is None (out = int(in * scale)). out_shape may be an int32
    Variable, and actual_shape (an int32 Variable) overrides out_shape and scale when the
    program runs; both are then read at run time. Fluid's index rules: with align_corners the
    corner pixels of input and output coincide; otherwise align_mode 0 samples at pixel centres
    and align_mode 1 at ratio * index."""
    layer = "image_resize"
    _check_var(input, "input", layer)
    if resample not in _RESAMPLE_OPS:
        raise ValueError("%s: resample must be 'BILINEAR', 'TRILINEAR' or 'NEAREST', got %r"
                         % (layer, resample))
    rank = 3 if resample == "TRILINEAR" else 2
    # As in Fluid, the 4-D and 5-D spellings both say where the channels are.
    if data_format not in ("NCHW", "NHWC", "NCDHW", "NDHWC"):
        raise ValueError("%s: data_format must be 'NCHW', 'NHWC', 'NCDHW' or 'NDHWC', got %r"
                         % (layer, data_format))
    channels_last = data_format in ("NHWC", "NDHWC")
    layout = ["NCHW", "NHWC", "NCDHW", "NDHWC"][2 * (rank == 3) + channels_last]
    if len(input.shape) != rank + 2:
        raise ValueError("%s: %s needs a %d-D input, got shape %r"
                         % (layer, resample, rank + 2, list(input.shape)))
    size_var = None  # an int32 [rank] Variable read when the op runs (the op's OutSize)
    if actual_shape is not None:
        size_var = _size_variable(actual_shape, "actual_shape", rank, layer)
    if not isinstance(align_corners, bool):
        raise TypeError("%s: align_corners must be a bool, got %r" % (layer, align_corners))
    if align_mode not in (0, 1):
        raise ValueError("%s: align_mode must be 0 or 1, got %r" % (layer, align_mode))
    if out_shape is None and scale is None:
        raise ValueError("%s: give out_shape or scale (one of them must not be None)" % layer)
    attrs = {"align_corners": align_corners, "align_mode": int(align_mode),
             "data_layout": layout, "scale": 0.0}
    if isinstance(out_shape, Variable):
        size_var = size_var or _size_variable(out_shape, "out_shape", rank, layer)
    elif out_shape is not None:
        if not isinstance(out_shape, (list, tuple)) or len(out_shape) != rank:
            raise ValueError("%s: out_shape must be a list of %d ints for %s, got %r"
                             % (layer, rank, resample, out_shape))
        if any(isinstance(v, Variable) for v in out_shape):
            raise NotImplementedError("%s: out_shape must be ints or one int32 Variable; "
                                      "Variables inside the list are not supported" % layer)
        out_shape = [int(v) for v in out_shape]
        if any(v <= 0 for v in out_shape):
            raise ValueError("%s: out_shape must be positive, got %r" % (layer, out_shape))
        for key, v in zip(["out_d", "out_h", "out_w"][3 - rank:], out_shape):
            attrs[key] = v
    elif size_var is None:
        if isinstance(scale, Variable):
            raise NotImplementedError("%s: scale must be a number; a Variable is not supported"
                                      % layer)
        if float(scale) <= 0:
            raise ValueError("%s: scale must be > 0, got %r" % (layer, scale))
        attrs["scale"] = float(scale)
    extra = {"OutSize": size_var} if size_var is not None else None
    return _one_op(_RESAMPLE_OPS[resample], input, attrs, name=name, extra_inputs=extra)


def _size_variable(v, what, rank, layer):
    if not isinstance(v, Variable):
        raise TypeError("%s: %s must be a Variable, got %r" % (layer, what, v))
    if dtype_name(v.dtype) != "int32" or len(v.shape) != 1 or v.shape[0] not in (-1, rank):
        raise ValueError("%s: %s must be an int32 Variable of shape [%d], got %s %r"
                         % (layer, what, rank, dtype_name(v.dtype), list(v.shape)))
    return v


def resize_bilinear(input, out_shape=None, scale=None, name=None, actual_shape=None,
                    align_corners=True, align_mode=1, data_format="NCHW"):
    """image_resize with resample='BILINEAR'."""
    return image_resize(input, out_shape, scale, name, "BILINEAR", actual_shape, align_corners,
                        align_mode, data_format)


def resize_trilinear(input, out_shape=None, scale=None, name=None, actual_shape=None,
                     align_corners=True, align_mode=1, data_format="NCDHW"):
    """image_resize with resample='TRILINEAR' (5-D input)."""
    return image_resize(input, out_shape, scale, name, "TRILINEAR", actual_shape, align_corners,
                        align_mode, data_format)


def resize_nearest(input, out_shape=None, scale=None, name=None, actual_shape=None,
                   align_corners=True, data_format="NCHW"):
    """image_resize with resample='NEAREST'."""
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape, align_corners,
                        1, data_format)


def image_resize_short(input, out_short_len, resample="BILINEAR"):
    """input [N, C, H, W] resized so that its shorter side is out_short_len, keeping the aspect
    ratio (the longer side rounded to the nearest int)."""
    _check_var(input, "input", "image_resize_short")
    if len(input.shape) != 4:
        raise ValueError("image_resize_short: input must be 4-D [N, C, H, W], got shape %r"
                         % (list(input.shape),))
    hw = [int(d) for d in input.shape[2:4]]
    if any(d <= 0 for d in hw):
        raise ValueError("image_resize_short: input height and width must be static, got %r"
                         % (hw,))
    short = hw.index(min(hw))
    out = list(hw)
    out[short] = int(out_short_len)
    out[1 - short] = int(float(hw[1 - short]) * (float(out_short_len) / float(hw[short])) + 0.5)
    return image_resize(input, out_shape=out, resample=resample)


# ---- pooling ---------------------------------------------------------------------------------

def _adaptive_pool(rank, input, pool_size, pool_type, require_index, name):
    layer = "adaptive_pool%dd" % rank
    _check_var(input, "input", layer)
    if pool_type not in ("max", "avg"):
        raise ValueError("%s: pool_type must be 'max' or 'avg', got %r" % (layer, pool_type))
    if require_index and pool_type != "max":
        raise ValueError("%s: require_index=True needs pool_type 'max', got %r"
                         % (layer, pool_type))
    if len(input.shape) != rank + 2:
        raise ValueError("%s: input must be %d-D, got shape %r"
                         % (layer, rank + 2, list(input.shape)))
    size = _ints(pool_size, rank, "pool_size", layer)
    if any(s < 1 for s in size):
        raise ValueError("%s: pool_size must be >= 1, got %r" % (layer, size))
    helper = LayerHelper(layer, name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    outputs = {"Out": out}
    if require_index:
        mask = helper.create_variable_for_type_inference("int32", stop_gradient=True)
        outputs["Mask"] = mask
    helper.append_op(layer, inputs={"X": input}, outputs=outputs,
                     attrs={"pooling_type": pool_type, "pool_size": size})
    return (out, mask) if require_index else out


def adaptive_pool2d(input, pool_size, pool_type="max", require_index=False, name=None):
    """input [N, C, H, W] pooled to [N, C, pool_size[0], pool_size[1]]: output i of an axis
    pools input [floor(i * H / Ho), ceil((i + 1) * H / Ho)). With require_index (max only),
    returns (out, mask): mask (int32) holds the offset h * W + w of each max in its plane."""
    return _adaptive_pool(2, input, pool_size, pool_type, require_index, name)


def adaptive_pool3d(input, pool_size, pool_type="max", require_index=False, name=None):
    """input [N, C, D, H, W] pooled to [N, C] + pool_size, windows as in adaptive_pool2d; the
    mask of require_index holds offsets d * H * W + h * W + w."""
    return _adaptive_pool(3, input, pool_size, pool_type, require_index, name)


def _to_channels_first(x, data_format, layer):
    if data_format == "NCDHW":
        return x
    if data_format == "NDHWC":
        return transpose(x, [0, 4, 1, 2, 3])
    raise ValueError("%s: data_format must be 'NCDHW' or 'NDHWC', got %r" % (layer, data_format))


def _from_channels_first(x, data_format):
    return transpose(x, [0, 2, 3, 4, 1]) if data_format == "NDHWC" else x


def _volume_padding(padding, layer, data_format="NCDHW", x=None, k=None, s=None):
    """The 'paddings' attribute of a 3-D op for Fluid's padding argument: an int, 3 ints, 6 ints
    [front, back, top, bottom, left, right], 5 [before, after] pairs in data_format's order (0 on
    the batch and channel dims), 'VALID' (none) or 'SAME' (out = ceil(in / stride); the extra
    before = half the total rounded down; needs x (channels-first), kernel k and strides s).
    Returns 3 values when every axis is symmetric, else 6, and whether it was 'SAME'."""
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return [0, 0, 0], False
        if mode != "SAME":
            raise ValueError("%s: padding must be ints, pairs, 'SAME' or 'VALID', got %r"
                             % (layer, padding))
        spatial = [int(d) for d in x.shape[2:5]]
        if any(d < 0 for d in spatial):
            raise ValueError("%s: padding 'SAME' needs static spatial dims, got %r"
                             % (layer, spatial))
        pads = []
        for n, kk, ss in zip(spatial, k, s):
            total = max((-(-n // ss) - 1) * ss + kk - n, 0)
            pads += [total // 2, total - total // 2]
        same = True
    elif (isinstance(padding, (list, tuple)) and len(padding) == 5
          and all(isinstance(v, (list, tuple)) for v in padding)):
        pairs = [[int(b), int(e)] for b, e in padding]
        outer = [0, 1] if data_format == "NCDHW" else [0, 4]
        if any(pairs[i] != [0, 0] for i in outer):
            raise ValueError("%s: padding pairs %r pad the batch or channel dim"
                             % (layer, padding))
        pads = [v for i, pair in enumerate(pairs) if i not in outer for v in pair]
        same = False
    elif isinstance(padding, (list, tuple)) and len(padding) == 6:
        pads, same = [int(v) for v in padding], False
    else:
        return _ints(padding, 3, "padding", layer), False
    if any(v < 0 for v in pads):
        raise ValueError("%s: padding must be >= 0, got %r" % (layer, padding))
    if all(pads[2 * a] == pads[2 * a + 1] for a in range(3)):
        pads = pads[0::2]
    return pads, same


def _pad_sum(pads, axis):
    return 2 * pads[axis] if len(pads) == 3 else pads[2 * axis] + pads[2 * axis + 1]


def pool3d(input, pool_size=-1, pool_type="max", pool_stride=1, pool_padding=0,
           global_pooling=False, use_cudnn=True, ceil_mode=False, name=None, exclusive=True,
           data_format="NCDHW"):
    """Max or average pooling over D, H and W of input [N, C, D, H, W] (or NDHWC)."""
    layer = "pool3d"
    _check_var(input, "input", layer)
    if pool_type not in ("max", "avg"):
        raise ValueError("%s: pool_type must be 'max' or 'avg', got %r" % (layer, pool_type))
    if len(input.shape) != 5:
        raise ValueError("%s: input must be 5-D, got shape %r" % (layer, list(input.shape)))
    x = _to_channels_first(input, data_format, layer)
    ksize = _ints(pool_size, 3, "pool_size", layer)
    if not global_pooling and any(k < 1 for k in ksize):
        raise ValueError("%s: pool_size must be >= 1 without global_pooling, got %r"
                         % (layer, pool_size))
    strides = _ints(pool_stride, 3, "pool_stride", layer)
    if isinstance(pool_padding, str) and pool_padding.upper() == "VALID" and ceil_mode:
        raise ValueError("%s: pool_padding 'VALID' needs ceil_mode=False" % layer)
    pads, _ = _volume_padding(pool_padding, layer, data_format, x, ksize, strides)
    out = _one_op("pool3d", x, {"pooling_type": pool_type, "ksize": ksize,
                                "strides": strides, "paddings": pads,
                                "global_pooling": bool(global_pooling),
                                "ceil_mode": bool(ceil_mode), "exclusive": bool(exclusive)},
                  name=name)
    return _from_channels_first(out, data_format)


# ---- 3-D convolutions ------------------------------------------------------------------------

def _add_bias(helper, out, bias_attr, num_filters):
    b = helper.create_parameter(bias_attr, [num_filters], out.dtype, is_bias=True)
    if b is None:
        return out
    biased = helper.create_variable_for_type_inference(out.dtype)
    helper.append_op("elementwise_add", inputs={"X": out, "Y": b}, outputs={"Out": biased},
                     attrs={"axis": 1})
    return biased


def _conv3d_setup(layer, input, num_filters, groups, act, data_format, name):
    """The checks conv3d and conv3d_transpose share: (input in NCDHW, helper, groups, input
    channels)."""
    _check_act(act)
    _check_var(input, "input", layer)
    if len(input.shape) != 5:
        raise ValueError("%s: input must be 5-D, got shape %r" % (layer, list(input.shape)))
    x = _to_channels_first(input, data_format, layer)
    groups = groups or 1
    channels = x.shape[1]
    if channels <= 0 or channels % groups or num_filters % groups:
        raise ValueError("%s: input channels %d and num_filters %d must be divisible by groups "
                         "%d" % (layer, channels, num_filters, groups))
    return x, LayerHelper(layer, name=name), groups, channels


def conv3d(input, num_filters, filter_size, stride=1, padding=0, dilation=1, groups=None,
           param_attr=None, bias_attr=None, use_cudnn=True, act=None, name=None,
           data_format="NCDHW"):
    """3-D convolution of input [N, C, D, H, W] (or NDHWC) with num_filters filters [C / groups,
    kd, kh, kw] (He-initialized), plus a bias per filter and act."""
    layer = "conv3d"
    x, helper, groups, channels = _conv3d_setup(layer, input, num_filters, groups, act,
                                                data_format, name)
    k = _ints(filter_size, 3, "filter_size", layer)
    stride = _ints(stride, 3, "stride", layer)
    dilation = _ints(dilation, 3, "dilation", layer)
    pads, same = _volume_padding(padding, layer, data_format, x, k, stride)
    if same:  # as in Fluid, 'SAME' convolves undilated
        dilation = [1, 1, 1]
    w = helper.create_parameter(param_attr, [num_filters, channels // groups] + k, x.dtype,
                                default_initializer=MSRAInitializer())
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("conv3d", inputs={"Input": x, "Filter": w}, outputs={"Output": out},
                     attrs={"strides": stride, "paddings": pads, "dilations": dilation,
                            "groups": groups})
    out = _add_bias(helper, out, bias_attr, num_filters)
    return _from_channels_first(_act(out, act), data_format)


def conv3d_transpose(input, num_filters, output_size=None, filter_size=None, padding=0, stride=1,
                     dilation=1, groups=None, param_attr=None, bias_attr=None, use_cudnn=True,
                     act=None, name=None, data_format="NCDHW"):
    """The transpose of conv3d: filter [C, num_filters / groups, kd, kh, kw]; with output_size
    and no filter_size the filter is sized to reach output_size."""
    layer = "conv3d_transpose"
    x, helper, groups, channels = _conv3d_setup(layer, input, num_filters, groups, act,
                                                data_format, name)
    stride = _ints(stride, 3, "stride", layer)
    dilation = _ints(dilation, 3, "dilation", layer)
    size = None if output_size is None else _ints(output_size, 3, "output_size", layer)
    if filter_size is None:
        if size is None:
            raise ValueError("%s: give filter_size or output_size" % layer)
        if isinstance(padding, str) and padding.upper() == "SAME":
            raise ValueError("%s: padding 'SAME' needs filter_size" % layer)
        padding, _ = _volume_padding(padding, layer, data_format)
        dhw = x.shape[2:5]
        if any(d < 0 for d in dhw):
            raise ValueError("%s: filter_size is needed when the input's spatial dims are not "
                             "static" % layer)
        filter_size = [(size[a] - (dhw[a] - 1) * stride[a] + _pad_sum(padding, a) - 1)
                       // dilation[a] + 1 for a in range(3)]
    k = _ints(filter_size, 3, "filter_size", layer)
    padding, same = _volume_padding(padding, layer, data_format, x, k, stride)
    if same:
        dilation = [1, 1, 1]
    w = helper.create_parameter(param_attr, [channels, num_filters // groups] + k, x.dtype)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("conv3d_transpose", inputs={"Input": x, "Filter": w},
                     outputs={"Output": out},
                     attrs={"strides": stride, "paddings": padding, "dilations": dilation,
                            "groups": groups, "output_size": size or []})
    out = _add_bias(helper, out, bias_attr, num_filters)
    return _from_channels_first(_act(out, act), data_format)


# ---- channel rearrangements ------------------------------------------------------------------

def affine_channel(x, scale=None, bias=None, data_layout="NCHW", name=None, act=None):
    """x * scale + bias per channel: scale and bias are [C] Variables, C on axis 1 (NCHW) or the
    last axis (NHWC)."""
    layer = "affine_channel"
    _check_var(x, "x", layer)
    _check_act(act)
    _check_var(scale, "scale", layer)
    _check_var(bias, "bias", layer)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError("%s: data_layout must be 'NCHW' or 'NHWC', got %r"
                         % (layer, data_layout))
    axis = 1 if data_layout == "NCHW" else len(x.shape) - 1
    c = x.shape[axis]
    for what, v in (("scale", scale), ("bias", bias)):
        if len(v.shape) != 1 or (c > 0 and v.shape[0] > 0 and v.shape[0] != c):
            raise ValueError("%s: %s must be 1-D [%d] (the channels of x), got shape %r"
                             % (layer, what, c, list(v.shape)))
    out = elementwise_add(elementwise_mul(x, scale, axis=axis), bias, axis=axis, name=name)
    return _act(out, act)


def _static_chw(x, layer):
    if len(x.shape) != 4:
        raise ValueError("%s: x must be 4-D [N, C, H, W], got shape %r" % (layer, list(x.shape)))
    c, h, w = [int(d) for d in x.shape[1:]]
    if c <= 0 or h <= 0 or w <= 0:
        raise ValueError("%s: x needs static C, H and W, got shape %r" % (layer, list(x.shape)))
    return c, h, w


def space_to_depth(x, blocksize, name=None):
    """Fluid's space_to_depth: [N, C, H, W] -> [N, C * b^2, H / b, W / b]. As in Fluid, the
    values are laid out as x[n, (dy * b + dx) * C' + c, i, j] -> row-major position [n, c,
    i * b + dy, j * b + dx] of a [N, C' = C / b^2, H * b, W * b] array, read in the output shape."""
    layer = "space_to_depth"
    _check_var(x, "x", layer)
    b = int(blocksize)
    if b < 1:
        raise ValueError("%s: blocksize must be >= 1, got %r" % (layer, blocksize))
    c, h, w = _static_chw(x, layer)
    if c % (b * b) or h % b or w % b:
        raise ValueError("%s: channels %d must be divisible by blocksize^2 = %d and height %d, "
                         "width %d by blocksize %d" % (layer, c, b * b, h, w, b))
    y = reshape(x, [-1, b, b, c // (b * b), h, w])
    y = transpose(y, [0, 3, 4, 1, 5, 2])
    return reshape(y, [-1, c * b * b, h // b, w // b], name=name)


def shuffle_channel(x, group, name=None):
    """[N, C, H, W] with its channels viewed as [group, C / group] and transposed."""
    layer = "shuffle_channel"
    _check_var(x, "x", layer)
    c, h, w = _static_chw(x, layer)
    g = int(group)
    if g < 1 or c % g:
        raise ValueError("%s: channels %d must be divisible by group %r" % (layer, c, group))
    y = reshape(x, [-1, g, c // g, h, w])
    y = transpose(y, [0, 2, 1, 3, 4])
    return reshape(y, [-1, c, h, w], name=name)


def temporal_shift(x, seg_num, shift_ratio=0.25, name=None):
    """x [N * seg_num, C, H, W], seen as [N, T = seg_num, C, H, W]: the first int(C *
    shift_ratio) channels take their values from the previous time step, the next ones up to
    int(2 * C * shift_ratio) from the following step (zeros past either end), the rest stay."""
    layer = "temporal_shift"
    _check_var(x, "x", layer)
    c, h, w = _static_chw(x, layer)
    t = int(seg_num)
    if t < 1:
        raise ValueError("%s: seg_num must be >= 1, got %r" % (layer, seg_num))
    if not 0 <= shift_ratio <= 0.5:
        raise ValueError("%s: shift_ratio must be in [0, 0.5], got %r" % (layer, shift_ratio))
    if x.shape[0] > 0 and x.shape[0] % t:
        raise ValueError("%s: the batch %d is not divisible by seg_num %d"
                         % (layer, x.shape[0], t))
    c1, c2 = int(c * shift_ratio), int(c * 2 * shift_ratio)
    y = reshape(x, [-1, t, c, h, w])

    def shifted(c0, c1, start, before):
        # Steps [start, start + t - 1) of channels [c0, c1), one zero step added before or
        # after: padded as the height of [N, 1, t - 1, (c1 - c0) * h * w] (batch may be unknown).
        part = slice(y, axes=[1, 2], starts=[start, c0], ends=[start + t - 1, c1])
        flat = reshape(part, [-1, 1, t - 1, (c1 - c0) * h * w])
        flat = pad2d(flat, [1, 0, 0, 0] if before else [0, 1, 0, 0])
        return reshape(flat, [-1, t, c1 - c0, h, w])

    parts = []
    if c1 > 0 and t > 1:  # from step t - 1: one zero step in front, the last dropped
        parts.append(shifted(0, c1, 0, True))
    if c2 > c1 and t > 1:  # from step t + 1: the first dropped, one zero step behind
        parts.append(shifted(c1, c2, 1, False))
    if t == 1 and c2 > 0:  # a single step: the shifted channels read past the ends
        parts.append(fill_constant_batch_size_like(y, [-1, 1, c2, h, w], x.dtype, 0.0))
    if c > c2:
        parts.append(slice(y, axes=[2], starts=[c2], ends=[c]))
    y = concat(parts, axis=2) if len(parts) > 1 else parts[0]
    return reshape(y, [-1, c, h, w], name=name)


def unfold(x, kernel_sizes, strides=1, paddings=0, dilations=1, name=None):
    """im2col: x [N, C, H, W] -> [N, C * kh * kw, L], column l holding the (dilated) kh x kw
    window of output position l (row-major over the Ho x Wo positions). paddings: one int, [ph,
    pw] or [top, left, bottom, right]."""
    layer = "unfold"
    _check_var(x, "x", layer)
    c, h, w = _static_chw(x, layer)
    k = _ints(kernel_sizes, 2, "kernel_sizes", layer)
    s = _ints(strides, 2, "strides", layer)
    d = _ints(dilations, 2, "dilations", layer)
    if isinstance(paddings, (list, tuple)) and len(paddings) == 4:
        p = [int(v) for v in paddings]
    else:
        p2 = _ints(paddings, 2, "paddings", layer)
        p = [p2[0], p2[1], p2[0], p2[1]]
    if min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise ValueError("%s: kernel_sizes, strides and dilations must be >= 1 and paddings >= "
                         "0, got %r, %r, %r, %r" % (layer, k, s, d, p))
    span = [(h, p[0] + p[2]), (w, p[1] + p[3])]
    out_hw = [(n + pads - (d[a] * (k[a] - 1) + 1)) // s[a] + 1 for a, (n, pads) in enumerate(span)]
    if min(out_hw) < 1:
        raise ValueError("%s: the padded input %r is smaller than the dilated kernel %r"
                         % (layer, [n + pads for n, pads in span],
                            [d[a] * (k[a] - 1) + 1 for a in range(2)]))
    if p != [p[0], p[1], p[0], p[1]]:
        x = pad2d(x, [p[0], p[2], p[1], p[3]])
        conv_pad = [0, 0]
    else:
        conv_pad = [p[0], p[1]]
    # A grouped convolution with one-hot filters copies each window element to its own output
    # channel exactly (x * 1 plus zeros).
    kk = k[0] * k[1]
    onehot = np.zeros([c * kk, 1, k[0], k[1]], dtype="float32")
    for ch in range(c):
        for i in range(kk):
            onehot[ch * kk + i, 0, i // k[1], i % k[1]] = 1.0
    filt = assign(onehot)
    if x.dtype != filt.dtype:
        filt = cast(filt, x.dtype)
    filt.stop_gradient = True
    helper = LayerHelper(layer, name=name)
    cols = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("conv2d", inputs={"Input": x, "Filter": filt}, outputs={"Output": cols},
                     attrs={"strides": s, "paddings": conv_pad, "dilations": d, "groups": c})
    return reshape(cols, [-1, c * kk, int(cols.shape[2]) * int(cols.shape[3])])


# ---- spatial transformer and cropping --------------------------------------------------------

def affine_grid(theta, out_shape, name=None):
    """The sampling grid [N, H, W, 2] of out_shape = [N, C, H, W] (4 ints, or an int32 [4]
    Variable read when the program runs): theta [N, 2, 3] applied to (x, y, 1) with x and y
    spanning [-1, 1] over W and H points (corners included)."""
    layer = "affine_grid"
    _check_var(theta, "theta", layer)
    if len(theta.shape) != 3 or list(theta.shape[1:]) != [2, 3]:
        raise ValueError("%s: theta must be [N, 2, 3], got shape %r" % (layer, list(theta.shape)))
    if isinstance(out_shape, Variable):  # read when the program runs
        shape_var = _size_variable(out_shape, "out_shape", 4, layer)
        return _one_op(layer, theta, {}, name=name, in_slot="Theta", out_slot="Output",
                       extra_inputs={"OutputShape": shape_var})
    if not isinstance(out_shape, (list, tuple)) or len(out_shape) != 4:
        raise ValueError("%s: out_shape must be [N, C, H, W], got %r" % (layer, out_shape))
    return _one_op(layer, theta, {"output_shape": [int(v) for v in out_shape]}, name=name,
                   in_slot="Theta", out_slot="Output")


def grid_sampler(x, grid, name=None):
    """x [N, C, H, W] sampled bilinearly at grid [N, Ho, Wo, 2] (x, y in [-1, 1] spanning the
    corner pixels; neighbours outside the image count as zero) -> [N, C, Ho, Wo]."""
    layer = "grid_sampler"
    _check_var(x, "x", layer)
    _check_var(grid, "grid", layer)
    if len(x.shape) != 4:
        raise ValueError("%s: x must be 4-D [N, C, H, W], got shape %r" % (layer, list(x.shape)))
    if len(grid.shape) != 4 or grid.shape[3] != 2:
        raise ValueError("%s: grid must be [N, Ho, Wo, 2], got shape %r"
                         % (layer, list(grid.shape)))
    return _one_op(layer, x, {}, name=name, out_slot="Output", extra_inputs={"Grid": grid})


def random_crop(x, shape, seed=None):
    """x with its last len(shape) dims cropped to shape at a random offset per instance. seed:
    an int (a persistable seed variable is made and advanced on every run), an int64 [1]
    Variable used the same way, or None (a random int)."""
    layer = "random_crop"
    _check_var(x, "x", layer)
    if not isinstance(shape, (list, tuple)) or not shape:
        raise ValueError("%s: shape must be a non-empty list of ints, got %r" % (layer, shape))
    shape = [int(v) for v in shape]
    if len(shape) > len(x.shape):
        raise ValueError("%s: shape %r has more dims than x %r" % (layer, shape, list(x.shape)))
    for s, d in zip(shape, x.shape[len(x.shape) - len(shape):]):
        if s < 1 or (d >= 0 and s > d):
            raise ValueError("%s: shape %r must fit in the trailing dims of x %r"
                             % (layer, shape, list(x.shape)))
    if seed is None:
        seed = int(np.random.randint(1, 65536))
    startup_seed = 0
    if isinstance(seed, (int, np.integer)):
        startup_seed = int(seed)
        seed = create_global_var([1], startup_seed, "int64", persistable=True,
                                 name=unique_name.generate("random_crop_seed"))
    elif not isinstance(seed, Variable):
        raise TypeError("%s: seed must be an int, an int64 Variable or None, got %r"
                        % (layer, seed))
    helper = LayerHelper(layer)
    out = helper.create_variable_for_type_inference(x.dtype)
    out.stop_gradient = True
    helper.append_op(layer, inputs={"X": x, "Seed": seed}, outputs={"Out": out, "SeedOut": seed},
                     attrs={"shape": shape, "startup_seed": startup_seed})
    return out
