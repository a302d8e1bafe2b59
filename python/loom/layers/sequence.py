"""Layers over LoD sequences (docs/FORMATS.md): pooling, padding, masks, convolution,
expansion and slicing of sequences, lod_reset, and the linear-chain CRF."""
from ..framework import convert_dtype, default_main_program
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .activation import _act, _check_act
from .common import _unary

__all__ = ["sequence_pool", "sequence_first_step", "sequence_last_step", "sequence_softmax",
           "sequence_mask", "sequence_pad", "sequence_unpad", "sequence_conv", "sequence_expand",
           "sequence_expand_as", "sequence_reshape", "sequence_concat", "sequence_slice",
           "sequence_enumerate", "lod_reset", "linear_chain_crf", "crf_decoding"]


def sequence_pool(input, pool_type, is_test=False, pad_value=0.0):
    """One row per sequence of input's last LoD level: pool_type "sum", "average", "sqrt",
    "max", "last" or "first"; an empty sequence gives pad_value."""
    kind = str(pool_type).upper()
    if kind not in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"):
        raise ValueError("sequence_pool: pool_type %r is not sum, average, sqrt, max, last or "
                         "first" % (pool_type,))
    helper = LayerHelper("sequence_pool")
    out = helper.create_variable_for_type_inference(input.dtype)
    outputs = {"Out": out}
    if kind == "MAX":
        outputs["MaxIndex"] = helper.create_variable_for_type_inference("int64",
                                                                        stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": input}, outputs=outputs,
                     attrs={"pooltype": kind, "is_test": bool(is_test),
                            "pad_value": float(pad_value)})
    return out


def sequence_first_step(input):
    return sequence_pool(input, "first")


def sequence_last_step(input):
    return sequence_pool(input, "last")


def sequence_softmax(input, use_cudnn=False, name=None):
    return _unary("sequence_softmax", input, name=name)


def sequence_mask(x, maxlen=None, dtype="int64", name=None):
    """mask[..., j] = j < x[...] for j < maxlen (None: the largest length)."""
    helper = LayerHelper("sequence_mask", name=name)
    out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("sequence_mask", inputs={"X": x}, outputs={"Y": out},
                     attrs={"maxlen": -1 if maxlen is None else int(maxlen),
                            "out_dtype": int(convert_dtype(dtype))})
    return out


def sequence_pad(x, pad_value, maxlen=None, name=None):
    """(padded [sequences, maxlen, ...], int64 lengths); maxlen None pads to the longest."""
    helper = LayerHelper("sequence_pad", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    length = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sequence_pad", inputs={"X": x, "PadValue": pad_value},
                     outputs={"Out": out, "Length": length},
                     attrs={"padded_length": -1 if maxlen is None else int(maxlen)})
    return out, length


def sequence_unpad(x, length, name=None):
    """The first length[s] rows of each x[s], as one LoD tensor."""
    helper = LayerHelper("sequence_unpad", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("sequence_unpad", inputs={"X": x, "Length": length}, outputs={"Out": out})
    return out


def sequence_conv(input, num_filters, filter_size=3, filter_stride=1, padding=True,
                  padding_start=None, bias_attr=None, param_attr=None, act=None, name=None):
    """A convolution along each sequence: every row's window of filter_size rows starting
    padding_start rows away (default -(filter_size // 2): centred), zeros past the sequence's
    ends, times a [filter_size * width, num_filters] filter."""
    _check_act(act)
    if filter_stride != 1:
        raise ValueError("sequence_conv: filter_stride must be 1, got %r" % (filter_stride,))
    if len(input.shape) != 2 or input.shape[1] <= 0:
        raise ValueError("sequence_conv: input must be [rows, width] with a static width, got %r"
                         % (list(input.shape),))
    helper = LayerHelper("sequence_conv", name=name)
    w = helper.create_parameter(param_attr, [filter_size * input.shape[1], num_filters],
                                input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    start = -int(filter_size // 2) if padding_start is None else int(padding_start)
    helper.append_op("sequence_conv", inputs={"X": input, "Filter": w}, outputs={"Out": out},
                     attrs={"contextLength": int(filter_size), "contextStart": start,
                            "contextStride": 1})
    b = helper.create_parameter(bias_attr, [num_filters], input.dtype, is_bias=True)
    if b is not None:
        biased = helper.create_variable_for_type_inference(input.dtype)
        helper.append_op("elementwise_add", inputs={"X": out, "Y": b}, outputs={"Out": biased},
                         attrs={"axis": 1})
        out = biased
    return _act(out, act)


def _seq_op(op, inputs, attrs=None, dtype=None, stop_gradient=False):
    helper = LayerHelper(op)
    first = next(iter(inputs.values()))
    first = first[0] if isinstance(first, (list, tuple)) else first
    out = helper.create_variable_for_type_inference(dtype or first.dtype,
                                                    stop_gradient=stop_gradient)
    helper.append_op(op, inputs=inputs, outputs={"Out": out}, attrs=attrs or {})
    return out


def sequence_expand(x, y, ref_level=-1, name=None):
    """Each sequence of x (each row when x has no LoD) repeated as many times as the matching
    sequence of y's LoD level ref_level is long."""
    return _seq_op("sequence_expand", {"X": x, "Y": y}, {"ref_level": int(ref_level)})


def sequence_expand_as(x, y, name=None):
    """Row i of x repeated as many times as sequence i of y is long; the result has y's LoD."""
    return _seq_op("sequence_expand_as", {"X": x, "Y": y})


def sequence_reshape(input, new_dim):
    """Each sequence's values laid out new_dim wide."""
    return _seq_op("sequence_reshape", {"X": input}, {"new_dim": int(new_dim)})


def sequence_concat(input, name=None):
    """Sequence i of the result = sequence i of each input, one after the other."""
    return _seq_op("sequence_concat", {"X": list(input)})


def sequence_slice(input, offset, length, name=None):
    """Rows [offset[i], offset[i] + length[i]) of each sequence i."""
    return _seq_op("sequence_slice", {"X": input, "Offset": offset, "Length": length})


def sequence_enumerate(input, win_size, pad_value=0, name=None):
    """For every id, the win_size ids from it on within its sequence (pad_value past the end)."""
    return _seq_op("sequence_enumerate", {"X": input},
                   {"win_size": int(win_size), "pad_value": int(pad_value)},
                   stop_gradient=True)


def lod_reset(x, y=None, target_lod=None):
    """x with the LoD of y (all its levels; or y's values as offsets), or target_lod (offsets)."""
    if y is None and target_lod is None:
        raise ValueError("lod_reset: give y or target_lod")
    inputs = {"X": x}
    if y is not None:
        inputs["Y"] = y
    return _seq_op("lod_reset", inputs,
                   {"target_lod": [int(v) for v in (target_lod or [])]})


def linear_chain_crf(input, label, param_attr=None, length=None):
    """The negative log-likelihood [sequences, 1] of label's tags under a linear-chain CRF
    over input's emission scores [rows, D]; the transition parameter is [D + 2, D] (name it
    with param_attr to share it with crf_decoding)."""
    if length is not None:
        raise NotImplementedError("linear_chain_crf: length (padded input) is not supported; "
                                  "feed LoD sequences")
    d = input.shape[-1]
    if d <= 0:
        raise ValueError("linear_chain_crf: input needs a static tag count, got %r"
                         % (list(input.shape),))
    helper = LayerHelper("linear_chain_crf")
    w = helper.create_parameter(param_attr, [d + 2, d], input.dtype)
    outs = {k: helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
            for k in ("Alpha", "EmissionExps", "TransitionExps")}
    ll = helper.create_variable_for_type_inference(input.dtype)
    outs["LogLikelihood"] = ll
    helper.append_op("linear_chain_crf",
                     inputs={"Emission": input, "Transition": w, "Label": label}, outputs=outs)
    return ll


def crf_decoding(input, param_attr, label=None, length=None):
    """The Viterbi tags [rows, 1] of input's emissions under the CRF transition named by
    param_attr (the one linear_chain_crf trained); with label, 1 / 0 per tag for right /
    wrong."""
    if length is not None:
        raise NotImplementedError("crf_decoding: length (padded input) is not supported")
    attr = ParamAttr._to_attr(param_attr)
    if not attr or not attr.name:
        raise ValueError("crf_decoding: param_attr must name linear_chain_crf's transition")
    helper = LayerHelper("crf_decoding")
    block = default_main_program().global_block()
    if not block.has_var(attr.name):
        raise ValueError("crf_decoding: no parameter '%s' (build linear_chain_crf with "
                         "param_attr=ParamAttr(name='%s') first)" % (attr.name, attr.name))
    path = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    inputs = {"Emission": input, "Transition": block.var(attr.name)}
    if label is not None:
        inputs["Label"] = label
    helper.append_op("crf_decoding", inputs=inputs, outputs={"ViterbiPath": path})
    return path
