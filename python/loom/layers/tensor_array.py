"""Tensor arrays and Fluid 1.x's LoD beam search.

A tensor array (Fluid's LoDTensorArray) is a variable holding a list of tensors indexed by an
int64: ``create_array`` declares it, ``array_write`` stores a copy of a tensor at an index (the
array grows), ``array_read`` reads one back, ``array_length`` counts them. A decoding loop
keeps each step's choices in arrays, and ``beam_search_decode`` walks them back into
sentences::

    ids = layers.create_array("int64")
    scores = layers.create_array("float32")
    layers.array_write(init_ids, i=counter, array=ids)
    ...
    loop = layers.While(cond)
    with loop.block():
        pre_ids = layers.array_read(ids, counter)
        ...
        sel_ids, sel_scores = layers.beam_search(pre_ids, pre_score, topk_ids, acc_scores,
                                                 beam_size, end_id)
        layers.increment(counter)
        layers.array_write(sel_ids, i=counter, array=ids)
        ...
        layers.logical_and(layers.less_than(counter, max_len),
                           layers.logical_not(layers.is_empty(sel_ids)), out=cond)
    sentence_ids, sentence_scores = layers.beam_search_decode(ids, scores, beam_size, end_id)

Every run of a program starts its arrays empty. The gradient of an array is an array, so a
``While`` loop that reads and writes arrays trains; Fluid 1.x's hand-written dynamic RNN::

    table = layers.lod_rank_table(x)              # x's sequences, longest first
    steps = layers.lod_tensor_to_array(x, table)  # element t: word t of the sequences running
    n = layers.max_sequence_len(table)
    mem = layers.reorder_lod_tensor_by_rank(boot, table)  # per-sequence rows, table order
    outs = layers.create_array("float32")
    i = layers.fill_constant([1], "int64", 0)
    cond = layers.less_than(i, n)
    loop = layers.While(cond)
    with loop.block():
        word = layers.array_read(steps, i)
        prev = layers.shrink_memory(mem, i, table)  # the rows of the sequences still running
        h = layers.fc([word, prev], size, act="tanh")
        layers.array_write(h, i, outs)
        layers.assign(h, mem)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    out = layers.array_to_lod_tensor(outs, table)  # x's rows and order, x's LoD

A rank table is an int64 tensor [sequences, 2] of (index, length) rows (Fluid's
LOD_RANK_TABLE variable). The beam search rules are in operators/nn/beam_search.cc and
docs/PYTHON.md.
"""
from .. import core, unique_name
from ..framework import convert_dtype
from ..layer_helper import LayerHelper
from .common import _check_var

__all__ = ["create_array", "array_write", "array_read", "array_length", "is_empty",
           "tensor_array_to_tensor", "beam_search", "beam_search_decode", "lod_rank_table",
           "max_sequence_len", "lod_tensor_to_array", "array_to_lod_tensor", "shrink_memory",
           "reorder_lod_tensor_by_rank"]


def _check_array(a, layer):
    _check_var(a, "array", layer)
    if a.desc.type() != core.VarType.LOD_TENSOR_ARRAY:
        raise TypeError("%s: '%s' is not a tensor array (create it with layers.create_array)"
                        % (layer, a.name))


def create_array(dtype, name=None):
    """A new, empty tensor array of ``dtype`` elements in the current block."""
    helper = LayerHelper("array", name=name)
    return helper.block.create_var(name=name or unique_name.generate("array"),
                                   dtype=convert_dtype(dtype),
                                   type=core.VarType.LOD_TENSOR_ARRAY)


def array_write(x, i, array=None):
    """Stores a copy of ``x`` (dims and LoD) at index ``i`` (a one-element int64 Variable) of
    ``array``, created when None; returns the array."""
    _check_var(x, "x", "array_write")
    _check_var(i, "i", "array_write")
    if array is None:
        array = create_array(x.dtype)
    _check_array(array, "array_write")
    # The array's declared dims: those its elements share, -1 where they differ.
    have, new = list(array.shape or []), list(x.shape or [])
    if not have:
        merged = new
    elif len(have) == len(new):
        merged = [a if a == b else -1 for a, b in zip(have, new)]
    else:
        merged = []
    array.desc.set_shape([int(d) for d in merged])
    helper = LayerHelper("array_write")
    helper.append_op("write_to_array", inputs={"X": x, "I": i}, outputs={"Out": array})
    return array


def array_read(array, i):
    """A copy of element ``i`` (a one-element int64 Variable) of ``array``; reading past the
    end is an error that names the array and its length."""
    _check_array(array, "array_read")
    _check_var(i, "i", "array_read")
    helper = LayerHelper("array_read")
    out = helper.create_variable_for_type_inference(array.dtype)
    helper.append_op("read_from_array", inputs={"X": array, "I": i}, outputs={"Out": out})
    return out


def array_length(array):
    """The number of elements of ``array``, as a one-element int64 Variable."""
    _check_array(array, "array_length")
    helper = LayerHelper("array_length")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("lod_array_length", inputs={"X": array}, outputs={"Out": out})
    return out


def is_empty(x, cond=None):
    """A one-element bool Variable: whether ``x`` has no elements (written into ``cond`` when
    given)."""
    _check_var(x, "x", "is_empty")
    helper = LayerHelper("is_empty")
    out = cond if cond is not None else helper.create_variable_for_type_inference(
        "bool", stop_gradient=True)
    helper.append_op("is_empty", inputs={"X": x}, outputs={"Out": out})
    return out


def tensor_array_to_tensor(input, axis=1, name=None, use_stack=False):
    """The elements of array ``input`` concatenated along ``axis`` (stacked along a new axis
    with ``use_stack``); returns (the tensor, each element's extent along axis as int32)."""
    _check_array(input, "tensor_array_to_tensor")
    helper = LayerHelper("tensor_array_to_tensor", name=name)
    out = helper.create_variable_for_type_inference(input.dtype)
    index = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("tensor_array_to_tensor", inputs={"X": input},
                     outputs={"Out": out, "OutIndex": index},
                     attrs={"axis": int(axis), "use_stack": bool(use_stack)})
    return out, index


def beam_search(pre_ids, pre_scores, ids, scores, beam_size, end_id, level=0,
                is_accumulated=True, name=None, return_parent_idx=False):
    """One step of LoD beam search (Fluid 1.x): for every source sentence, the ``beam_size``
    best continuations of its prefixes.

    pre_ids, pre_scores: [rows, 1] — the previous step's selections and their accumulated
    scores (for the first step: the start ids and zeros with LoD
    ``[[0, 1, ..., B], [0, 1, ..., B]]``). ids: int64 [rows, K] candidate ids (None: the
    column index); scores: [rows, K] with a 2-level LoD whose level ``level`` groups rows by
    source — accumulated scores, or (``is_accumulated=False``) probabilities added as logs to
    pre_scores. A prefix that ended (``end_id``) competes with its own score and continues
    with ``end_id``; a source whose winners are all ended prefixes selects nothing from then
    on.

    Returns (selected_ids, selected_scores) as [M, 1] with LoD [prefixes per source,
    selections per prefix], and parent_idx (int32 [M]: the row each selection extends) when
    ``return_parent_idx``.
    """
    for v, what in ((pre_ids, "pre_ids"), (pre_scores, "pre_scores"), (scores, "scores")):
        _check_var(v, what, "beam_search")
    if ids is not None:
        _check_var(ids, "ids", "beam_search")
    helper = LayerHelper("beam_search", name=name)
    sel_ids = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    sel_scores = helper.create_variable_for_type_inference(scores.dtype, stop_gradient=True)
    parent = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    inputs = {"pre_ids": pre_ids, "pre_scores": pre_scores, "scores": scores}
    if ids is not None:
        inputs["ids"] = ids
    helper.append_op("beam_search", inputs=inputs,
                     outputs={"selected_ids": sel_ids, "selected_scores": sel_scores,
                              "parent_idx": parent},
                     attrs={"level": int(level), "beam_size": int(beam_size),
                            "end_id": int(end_id), "is_accumulated": bool(is_accumulated)})
    if return_parent_idx:
        return sel_ids, sel_scores, parent
    return sel_ids, sel_scores


def beam_search_decode(ids, scores, beam_size, end_id, name=None):
    """The sentences of a finished LoD beam search: ``ids`` and ``scores`` are the arrays of
    every step's ``beam_search`` outputs (step 0: the start ids). Each source's hypotheses
    are its rows at the last step where it has any, walked back to step 0; an ended
    hypothesis ends with one ``end_id``.

    Returns (sentence_ids, sentence_scores): 1-D, every token with its accumulated score,
    best sentence first within a source (at most ``beam_size``), with LoD [sentences per
    source, tokens per sentence].
    """
    _check_array(ids, "beam_search_decode")
    _check_array(scores, "beam_search_decode")
    helper = LayerHelper("beam_search_decode", name=name)
    sentence_ids = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    sentence_scores = helper.create_variable_for_type_inference(scores.dtype,
                                                                stop_gradient=True)
    helper.append_op("beam_search_decode", inputs={"Ids": ids, "Scores": scores},
                     outputs={"SentenceIds": sentence_ids, "SentenceScores": sentence_scores},
                     attrs={"beam_size": int(beam_size), "end_id": int(end_id)})
    return sentence_ids, sentence_scores


def _check_rank_table(t, what, layer):
    _check_var(t, what, layer)
    if t.dtype != core.DataType.INT64 or len(t.shape) != 2 or t.shape[1] != 2:
        raise TypeError("%s: %s '%s' is not a rank table (make it with layers.lod_rank_table)"
                        % (layer, what, t.name))


def lod_rank_table(x, level=0):
    """The rank table of ``x``'s LoD level ``level``: its sequences, longest first (equal
    lengths keep x's order), as an int64 [sequences, 2] tensor of (index, length) rows."""
    _check_var(x, "x", "lod_rank_table")
    if int(level) < 0:
        raise ValueError("lod_rank_table: level must be >= 0, got %r" % (level,))
    helper = LayerHelper("lod_rank_table")
    table = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("lod_rank_table", inputs={"X": x}, outputs={"Out": table},
                     attrs={"level": int(level)})
    return table


def max_sequence_len(rank_table):
    """The length of the longest sequence of ``rank_table``, as a one-element int64."""
    _check_rank_table(rank_table, "rank_table", "max_sequence_len")
    helper = LayerHelper("max_sequence_len")
    out = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("max_sequence_len", inputs={"RankTable": rank_table},
                     outputs={"Out": out})
    return out


def lod_tensor_to_array(x, table):
    """Splits the LoD tensor ``x`` by time step: element t of the returned array holds step t
    of every sequence longer than t, in ``table``'s order (longest first). A step is a row,
    or (x with nested sequences) a sub-sequence, which keeps its LoD in the element."""
    _check_var(x, "x", "lod_tensor_to_array")
    _check_rank_table(table, "table", "lod_tensor_to_array")
    helper = LayerHelper("lod_tensor_to_array")
    array = helper.block.create_var(name=unique_name.generate("lod_tensor_to_array"),
                                    dtype=x.dtype, type=core.VarType.LOD_TENSOR_ARRAY)
    if x.shape:
        array.desc.set_shape([-1] + [int(d) for d in x.shape[1:]])
    helper.append_op("lod_tensor_to_array", inputs={"X": x, "RankTable": table},
                     outputs={"Out": array})
    return array


def array_to_lod_tensor(x, table):
    """The inverse of ``lod_tensor_to_array``: the rows of array ``x``'s elements back in
    sequence order, as a LoD tensor with the sequences ``table`` describes."""
    _check_array(x, "array_to_lod_tensor")
    _check_rank_table(table, "table", "array_to_lod_tensor")
    helper = LayerHelper("array_to_lod_tensor")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("array_to_lod_tensor", inputs={"X": x, "RankTable": table},
                     outputs={"Out": out})
    return out


def shrink_memory(x, i, table):
    """The first rows of ``x``: one per sequence of ``table`` still running at step ``i``
    (longer than i), as the table orders them — a memory as the batch shrinks."""
    _check_var(x, "x", "shrink_memory")
    _check_var(i, "i", "shrink_memory")
    _check_rank_table(table, "table", "shrink_memory")
    helper = LayerHelper("shrink_memory")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("shrink_rnn_memory", inputs={"X": x, "I": i, "RankTable": table},
                     outputs={"Out": out})
    return out


def reorder_lod_tensor_by_rank(x, rank_table):
    """``x``'s sequences (its rows when it has no LoD; one per table entry) in
    ``rank_table``'s order: sequence k of the result is x's sequence rank_table[k].index."""
    _check_var(x, "x", "reorder_lod_tensor_by_rank")
    _check_rank_table(rank_table, "rank_table", "reorder_lod_tensor_by_rank")
    helper = LayerHelper("reorder_lod_tensor_by_rank")
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("reorder_lod_tensor_by_rank", inputs={"X": x, "RankTable": rank_table},
                     outputs={"Out": out})
    return out
