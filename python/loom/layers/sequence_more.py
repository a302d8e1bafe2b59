"""More sequence layers of Fluid 1.8: edit_distance, row_conv, ctc_greedy_decoder,
im2sequence, sequence_scatter, lod_append, and the CTR layers continuous_value_model and
filter_by_instag."""
from ..framework import Variable, convert_dtype
from ..layer_helper import LayerHelper
from .activation import _act, _check_act
from .common import _check_var
from .tensor import squeeze, topk

__all__ = ["edit_distance", "row_conv", "ctc_greedy_decoder", "im2sequence", "sequence_scatter",
           "lod_append", "continuous_value_model", "filter_by_instag"]


def _check_int64(x, what, layer):
    _check_var(x, what, layer)
    if convert_dtype(x.dtype) != convert_dtype("int64"):
        raise TypeError("%s: %s '%s' must be int64" % (layer, what, x.name))


def edit_distance(input, label, normalized=True, ignored_tokens=None, input_length=None,
                  label_length=None):
    """(float32 [sequences, 1] Levenshtein distances of each input sequence to its label
    sequence, divided by the label's length when normalized; int64 [1] the number of
    sequences). input and label are int64 LoD tensors [rows, 1], or padded [batch, time]
    tensors with input_length and label_length; tokens in ignored_tokens are dropped first."""
    _check_int64(input, "input", "edit_distance")
    _check_int64(label, "label", "edit_distance")
    if (input_length is None) != (label_length is None):
        raise ValueError("edit_distance: input_length and label_length go together (both or "
                         "neither)")
    tokens = [] if ignored_tokens is None else list(ignored_tokens)
    if not all(isinstance(t, int) for t in tokens):
        raise TypeError("edit_distance: ignored_tokens must be ints, got %r" % (ignored_tokens,))
    helper = LayerHelper("edit_distance")
    inputs = {"Hyps": input, "Refs": label}
    if input_length is not None:
        _check_var(input_length, "input_length", "edit_distance")
        _check_var(label_length, "label_length", "edit_distance")
        inputs.update(HypsLength=input_length, RefsLength=label_length)
    out = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    num = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("edit_distance", inputs=inputs, outputs={"Out": out, "SequenceNum": num},
                     attrs={"normalized": bool(normalized), "tokens": [int(t) for t in tokens]})
    return out, num


def row_conv(input, future_context_size, param_attr=None, act=None):
    """The lookahead convolution: out[t] = sum_j input[t + j] * w[j] (element-wise) over
    j <= future_context_size within t's sequence; w is a [future_context_size + 1, D]
    parameter. input is a LoD tensor [rows, D] or a padded [batch, time, D]."""
    _check_var(input, "input", "row_conv")
    _check_act(act)
    if not isinstance(future_context_size, int) or future_context_size < 0:
        raise ValueError("row_conv: future_context_size must be an int >= 0, got %r"
                         % (future_context_size,))
    if len(input.shape) not in (2, 3) or input.shape[-1] <= 0:
        raise ValueError("row_conv: input '%s' must be [rows, D] or [batch, time, D] with a "
                         "static D, got %r" % (input.name, list(input.shape)))
    helper = LayerHelper("row_conv")
    w = helper.create_parameter(param_attr, [future_context_size + 1, input.shape[-1]],
                                input.dtype)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("row_conv", inputs={"X": input, "Filter": w}, outputs={"Out": out})
    return _act(out, act)


def ctc_greedy_decoder(input, blank, input_length=None, padding_value=0, name=None):
    """The best path of CTC probabilities: the arg max label of every step, repeats merged and
    blanks dropped. A LoD input [rows, classes] gives an int64 LoD tensor [rows', 1] ([[-1]]
    when every transcript is empty); a padded input [batch, time, classes] with input_length
    gives ([batch, time] padded with padding_value, int64 [batch, 1] lengths)."""
    _check_var(input, "input", "ctc_greedy_decoder")
    if not isinstance(blank, int) or blank < 0:
        raise ValueError("ctc_greedy_decoder: blank must be an int >= 0, got %r" % (blank,))
    if input_length is None and len(input.shape) != 2:
        raise ValueError("ctc_greedy_decoder: input '%s' must be a LoD tensor [rows, classes] "
                         "(or [batch, time, classes] with input_length), got %r"
                         % (input.name, list(input.shape)))
    if input_length is not None and len(input.shape) != 3:
        raise ValueError("ctc_greedy_decoder: with input_length, input '%s' must be [batch, "
                         "time, classes], got %r" % (input.name, list(input.shape)))
    _, ids = topk(input, k=1)
    helper = LayerHelper("ctc_align", name=name)
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    attrs = {"blank": blank, "merge_repeated": True}
    if input_length is None:
        helper.append_op("ctc_align", inputs={"Input": ids}, outputs={"Output": out}, attrs=attrs)
        return out
    _check_var(input_length, "input_length", "ctc_greedy_decoder")
    out_len = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    attrs["padding_value"] = int(padding_value)
    helper.append_op("ctc_align", inputs={"Input": squeeze(ids, [2]), "InputLength": input_length},
                     outputs={"Output": out, "OutputLength": out_len}, attrs=attrs)
    return out, out_len


def _pair(v, what):
    v = [v, v] if isinstance(v, int) else list(v)
    if len(v) != 2 or not all(isinstance(i, int) for i in v):
        raise ValueError("im2sequence: %s must be an int or 2 ints, got %r" % (what, v))
    return v


def im2sequence(input, filter_size=1, stride=1, padding=0, input_image_size=None, out_stride=1,
                name=None):
    """The filter_size patches of every image of input [N, C, H, W] (zero-padded by padding:
    an int, (height, width) or (up, left, down, right); stepped by stride) as a LoD tensor
    [N * oh * ow, C * fh * fw] with one sequence per image."""
    _check_var(input, "input", "im2sequence")
    if input_image_size is not None:
        raise NotImplementedError("im2sequence: input_image_size (per-image real sizes) is not "
                                  "supported; pass images of one size")
    if len(input.shape) != 4:
        raise ValueError("im2sequence: input '%s' must be NCHW [N, C, H, W], got %r"
                         % (input.name, list(input.shape)))
    filter_size, stride = _pair(filter_size, "filter_size"), _pair(stride, "stride")
    padding = [padding] * 4 if isinstance(padding, int) else list(padding)
    if len(padding) == 2:
        padding = padding + padding
    if len(padding) != 4 or not all(isinstance(p, int) for p in padding):
        raise ValueError("im2sequence: padding must be an int, 2 ints or 4 ints, got %r"
                         % (padding,))
    helper = LayerHelper("im2sequence", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("im2sequence", inputs={"X": input}, outputs={"Out": out},
                     attrs={"kernels": filter_size, "strides": stride, "paddings": padding})
    return out


def sequence_scatter(input, index, updates, name=None):
    """input [rows, width] with updates[j] added at input[i, index[j]] for every j of sequence
    i of index; index (int) and updates are LoD tensors [K, 1] with one sequence per row of
    input."""
    _check_var(input, "input", "sequence_scatter")
    _check_var(index, "index", "sequence_scatter")
    _check_var(updates, "updates", "sequence_scatter")
    if convert_dtype(index.dtype) not in (convert_dtype("int32"), convert_dtype("int64")):
        raise TypeError("sequence_scatter: index '%s' must be int32 or int64" % index.name)
    helper = LayerHelper("sequence_scatter", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("sequence_scatter", inputs={"X": input, "Ids": index, "Updates": updates},
                     outputs={"Out": out})
    return out


def lod_append(x, level):
    """x with level added as the last level of its LoD: level holds offsets (a list, or an
    int Variable of them; a Variable with a LoD gives its last level), and x's old last level
    then groups the new sequences."""
    _check_var(x, "x", "lod_append")
    helper = LayerHelper("lod_reset")
    inputs = {"X": x}
    attrs = {"append": True}
    if isinstance(level, Variable):
        inputs["Y"] = level
    elif isinstance(level, (list, tuple)) and all(isinstance(v, int) for v in level) and level:
        attrs["target_lod"] = [int(v) for v in level]
    else:
        raise TypeError("lod_append: level must be a non-empty list of int offsets or a "
                        "Variable, got %r" % (level,))
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("lod_reset", inputs=inputs, outputs={"Out": out}, attrs=attrs)
    return out


def continuous_value_model(input, cvm, use_cvm=True):
    """CTR features input [batch, D] whose first two columns count shows and clicks: with
    use_cvm those become log(show + 1) and log(click + 1) - log(show + 1), else they are
    dropped ([batch, D - 2]). The gradient of the two columns is cvm [batch, 2] (as Fluid's)."""
    _check_var(input, "input", "continuous_value_model")
    _check_var(cvm, "cvm", "continuous_value_model")
    if len(input.shape) != 2 or 0 <= input.shape[1] < 2:
        raise ValueError("continuous_value_model: input '%s' must be [batch, D] with D >= 2, "
                         "got %r" % (input.name, list(input.shape)))
    helper = LayerHelper("cvm")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cvm", inputs={"X": input, "CVM": cvm}, outputs={"Y": out},
                     attrs={"use_cvm": bool(use_cvm)})
    return out


def filter_by_instag(ins, ins_tag, filter_tag, is_lod, out_val_if_empty=0):
    """[the instances of ins (its sequences when is_lod, else its rows) with a tag of
    filter_tag among their tags in ins_tag (int64, a LoD tensor with a sequence per instance
    or a row per instance), float64 [kept, 1] loss weights (ones)]. When none is kept: one row
    of out_val_if_empty and a weight of 0."""
    for what, v in (("ins", ins), ("ins_tag", ins_tag), ("filter_tag", filter_tag)):
        _check_var(v, what, "filter_by_instag")
    for what, v in (("ins_tag", ins_tag), ("filter_tag", filter_tag)):
        if convert_dtype(v.dtype) != convert_dtype("int64"):
            raise TypeError("filter_by_instag: %s '%s' must be int64" % (what, v.name))
    if not isinstance(out_val_if_empty, int):
        raise TypeError("filter_by_instag: out_val_if_empty must be an int, got %r"
                        % (out_val_if_empty,))
    helper = LayerHelper("filter_by_instag")
    out = helper.create_variable_for_type_inference(ins.dtype)
    weight = helper.create_variable_for_type_inference("float64", stop_gradient=True)
    index_map = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("filter_by_instag",
                     inputs={"Ins": ins, "Ins_tag": ins_tag, "Filter_tag": filter_tag},
                     outputs={"Out": out, "LossWeight": weight, "IndexMap": index_map},
                     attrs={"is_lod": bool(is_lod), "out_val_if_empty": out_val_if_empty})
    return [out, weight]
