"""Fluid 1.8's decoding API: Decoder, BeamSearchDecoder, dynamic_decode and gather_tree.

    decoder = fluid.layers.BeamSearchDecoder(cell, start_token=0, end_token=1, beam_size=4,
                                             embedding_fn=embed, output_fn=project)
    ids, states = fluid.layers.dynamic_decode(decoder, inits=encoder_final_states,
                                              max_step_num=20)      # ids: [batch, time, beam]

With max_step_num None (or a Variable), dynamic_decode runs Fluid's while loop: decoder.step is
called once, in the loop body, and the loop ends when every sequence has finished (or after
max_step_num steps); each step's outputs are kept in tensor arrays. With an int max_step_num,
as layers.rnn, dynamic_decode unrolls the loop when the program is built: `max_step_num` steps,
each the decoder's ops again, sharing the parameters the first step made (the cell's, and
those of embedding_fn and output_fn, also called by initialize). Fluid stops its while loop once
every beam has finished; the unrolled loop always runs `max_step_num` steps, and a beam that
finished earlier keeps emitting `end_token` without changing its score, so the ids are Fluid's
padded with end_token (`return_length=True` gives each beam's length).
"""
import collections

import numpy as np

from .. import core, unique_name
from ..framework import Variable, default_main_program, dtype_name
from ..layer_helper import LayerHelper, call_sharing_parameters
from .activation import log_softmax
from .control_flow import (_outer_reads_writes, equal, increment, less_than, logical_and,
                           logical_not, logical_or)
from .math import (cumsum, elementwise_add, elementwise_floordiv, elementwise_max, elementwise_mod,
                   elementwise_mul, elementwise_sub, reduce_all, scale)
from .tensor_array import array_write, create_array, tensor_array_to_tensor
from .tensor import (assign, cast, expand, fill_constant, fill_constant_batch_size_like, gather,
                     reshape, stack, topk, transpose, unsqueeze, zeros_like)

__all__ = ["gather_tree", "Decoder", "BeamSearchDecoder", "dynamic_decode"]


_NEG_INF = -1e9  # the score of a continuation that must never be chosen (Fluid's kinf)


def gather_tree(ids, parents):
    """Backtraces beam search: ids and parents are [time, batch, beam] int tensors (the token
    chosen at each step and the beam of the previous step it extends); returns the full path
    ending in each final beam, [time, batch, beam]."""
    helper = LayerHelper("gather_tree")
    out = helper.create_variable_for_type_inference(ids.dtype, stop_gradient=True)
    helper.append_op("gather_tree", inputs={"Ids": ids, "Parents": parents},
                     outputs={"Out": out})
    return out


class Decoder:
    """The interface dynamic_decode drives: initialize(inits) -> (inputs, states, finished);
    step(time, inputs, states, **kwargs) -> (outputs, next_states, next_inputs, finished);
    finalize(outputs, final_states, sequence_lengths) -> (outputs, final_states). `finished`
    is a bool tensor [batch] (or [batch, beam]); outputs may be a variable or a (named)
    tuple of them, each stacked over time by dynamic_decode."""

    def initialize(self, inits):
        raise NotImplementedError("%s.initialize" % self.__class__.__name__)

    def step(self, time, inputs, states, **kwargs):
        raise NotImplementedError("%s.step" % self.__class__.__name__)

    def finalize(self, outputs, final_states, sequence_lengths):
        return outputs, final_states


def _flat(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _like(template, flat):
    if isinstance(template, tuple) and hasattr(template, "_fields"):
        return type(template)(*flat)
    if isinstance(template, (list, tuple)):
        return type(template)(flat)
    return flat[0]


class BeamSearchDecoder(Decoder):
    """Beam search over a cell: each step runs the cell on every beam of every batch row
    ([batch * beam, ...]), takes the log-softmax of output_fn(cell output), adds it to each
    beam's score and keeps the beam_size best (beam, token) pairs of each row; a finished
    beam (it produced end_token) only extends with end_token at no cost. Cell states given to
    initialize are [batch, ...] and are tiled over the beams; tensors the cell reads through
    dynamic_decode's kwargs (an encoder's output) must be tiled by the caller with
    tile_beam_merge_with_batch."""

    OutputWrapper = collections.namedtuple("OutputWrapper",
                                           ("scores", "predicted_ids", "parent_ids"))
    StateWrapper = collections.namedtuple("StateWrapper",
                                          ("cell_states", "log_probs", "finished", "lengths"))

    def __init__(self, cell, start_token, end_token, beam_size, embedding_fn=None,
                 output_fn=None):
        if int(beam_size) < 1:
            raise ValueError("BeamSearchDecoder: beam_size must be >= 1, got %r" % (beam_size,))
        self.cell = cell
        self.start_token, self.end_token = int(start_token), int(end_token)
        self.beam_size = int(beam_size)
        self.embedding_fn, self.output_fn = embedding_fn, output_fn
        self._row_base = None  # [batch, beam] int64: b * beam_size in row b

    @staticmethod
    def tile_beam_merge_with_batch(x, beam_size):
        """[batch, ...] -> [batch * beam_size, ...], each row repeated beam_size times in a
        row (the layout the decoder runs the cell on)."""
        rest = [int(d) for d in x.shape[1:]]
        if any(d < 0 for d in rest):
            raise ValueError("tile_beam_merge_with_batch: only the batch dim of %s may be "
                             "unknown, got shape %r" % (x.name, list(x.shape)))
        tiled = expand(unsqueeze(x, [1]), [1, int(beam_size)] + [1] * len(rest))
        return reshape(tiled, [-1] + rest)

    # ---- helpers on [batch, beam, ...] <-> [batch * beam, ...]

    def _merge(self, x):
        return reshape(x, [-1] + [int(d) for d in x.shape[2:]])

    def _split(self, x):
        return reshape(x, [-1, self.beam_size] + [int(d) for d in x.shape[1:]])

    def _rows(self, beam_indices):
        """The rows of [batch * beam, ...] holding the beams chosen per batch row."""
        return reshape(elementwise_add(beam_indices, self._row_base), [-1])

    def _gather(self, x, beam_indices):
        """x [batch * beam, ...]: the rows of the chosen beams."""
        return gather(x, self._rows(beam_indices))

    def _gather_beams(self, x, beam_indices):
        """x [batch, beam]: the entries of the chosen beams."""
        return reshape(gather(reshape(x, [-1]), self._rows(beam_indices)),
                       [-1, self.beam_size])

    def _beam_var(self, ref, value, dtype):
        return fill_constant_batch_size_like(ref, [-1, self.beam_size], dtype, value)

    def _embed(self, ids):
        """The cell's next inputs from ids [batch, beam]: embedding_fn's [batch, beam, ...]
        merged to [batch * beam, ...] (an embedding_fn that already merged is kept as is);
        without embedding_fn the ids themselves, [batch * beam]."""
        if self.embedding_fn is None:
            return reshape(ids, [-1])
        emb = call_sharing_parameters(self.embedding_fn, ids)
        return self._merge(emb) if len(emb.shape) >= 3 else emb

    def initialize(self, initial_cell_states):
        states = _flat(initial_cell_states)
        if not states:
            raise ValueError("BeamSearchDecoder.initialize: no initial cell states")
        ref = states[0]
        tiled = [self.tile_beam_merge_with_batch(s, self.beam_size) for s in states]
        # Row b's beams start at b * beam in the merged [batch * beam, ...] layout.
        ones = self._beam_var(ref, 1.0, "float32")
        dtype = dtype_name(ref.dtype)  # the scores' dtype: the cell states' (float32 / 64)
        self._row_base = cast(scale(scale(cumsum(ones, axis=0), bias=-1.0),
                                    float(self.beam_size)), "int64")
        first_only = np.array([0.0] + [_NEG_INF] * (self.beam_size - 1), "float32")
        log_probs = elementwise_add(self._beam_var(ref, 0.0, dtype),
                                    cast(assign(first_only), dtype), axis=1)
        finished = self._beam_var(ref, 0.0, dtype)  # 0 / 1 (gathered like the rest)
        lengths = self._beam_var(ref, 0, "int64")
        start = self._beam_var(ref, self.start_token, "int64")
        state = self.StateWrapper(_like(initial_cell_states, tiled), log_probs, finished,
                                  lengths)
        return self._embed(start), state, cast(finished, "bool")

    def step(self, time, inputs, states, **kwargs):
        cell_out, cell_states = call_sharing_parameters(self.cell, inputs, states.cell_states,
                                                        **kwargs)
        logits = call_sharing_parameters(self.output_fn, cell_out) if self.output_fn \
            else cell_out
        vocab = int(logits.shape[-1])
        if not 0 <= self.end_token < vocab:
            raise ValueError("BeamSearchDecoder: end_token %d is outside the %d-word output"
                             % (self.end_token, vocab))
        step_lp = self._split(log_softmax(logits))  # [batch, beam, vocab]
        # A finished beam may only add end_token, at no cost.
        noend = np.full(vocab, _NEG_INF, "float32")
        noend[self.end_token] = 0.0
        noend_full = elementwise_add(
            scale(step_lp, 0.0), cast(assign(noend), step_lp.dtype), axis=2)
        step_lp = elementwise_add(step_lp, elementwise_mul(
            elementwise_sub(noend_full, step_lp), states.finished, axis=0))
        total = elementwise_add(step_lp, states.log_probs, axis=0)
        scores, flat_idx = topk(reshape(total, [-1, self.beam_size * vocab]), self.beam_size)
        beam_idx = elementwise_floordiv(flat_idx, fill_constant([1], "int64", vocab))
        token = elementwise_mod(flat_idx, fill_constant([1], "int64", vocab))
        next_cells = _like(cell_states, [self._gather(s, beam_idx) for s in _flat(cell_states)])
        was_finished = self._gather_beams(states.finished, beam_idx)
        lengths = elementwise_add(
            self._gather_beams(states.lengths, beam_idx),
            cast(scale(was_finished, -1.0, bias=1.0), "int64"))
        is_end = cast(equal(token, fill_constant([1], "int64", self.end_token)),
                      was_finished.dtype)
        finished = elementwise_max(was_finished, is_end)
        next_state = self.StateWrapper(next_cells, scores, finished, lengths)
        outputs = self.OutputWrapper(scores, token, beam_idx)
        return outputs, next_state, self._embed(token), cast(finished, "bool")

    def finalize(self, outputs, final_states, sequence_lengths):
        """outputs stacked time-major ([time, batch, beam]): the predicted ids backtraced
        along the parents (gather_tree)."""
        return gather_tree(outputs.predicted_ids, outputs.parent_ids), final_states


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def _rebuild(template, leaves):
    """template's nesting (lists, tuples, namedtuples) over the next items of iterator
    leaves."""
    if isinstance(template, (list, tuple)):
        items = [_rebuild(t, leaves) for t in template]
        if isinstance(template, tuple) and hasattr(template, "_fields"):
            return type(template)(*items)
        return type(template)(items)
    return next(leaves)


def _decode_while(decoder, inits, max_step_num, output_time_major, impute_finished, is_test,
                  return_length, **kwargs):
    """dynamic_decode as Fluid runs it: one while loop whose body calls decoder.step once, until
    every sequence has finished (or max_step_num steps, a Variable, have run). Each step's
    outputs go to tensor arrays, stacked over time after the loop. Arrays carry no gradient:
    this is for decoding (inference)."""
    program = default_main_program()
    parent = program.current_block()
    helper = LayerHelper("dynamic_decode")
    beam = isinstance(decoder, BeamSearchDecoder)
    inputs, states, finished = decoder.initialize(inits)
    lengths = cast(zeros_like(cast(finished, "float32")), "int64")
    # the loop state, as copies the body overwrites
    in_vars = [assign(v) for v in _leaves(inputs)]
    st_vars = [assign(v) for v in _leaves(states)]
    fin_var, len_var = assign(finished), assign(lengths)
    counter = fill_constant([1], "int64", 0)
    limit = cast(max_step_num, "int64") if max_step_num is not None else None

    def go_on(fin, step):
        more = logical_not(reduce_all(fin))
        return more if limit is None else logical_and(more, less_than(step, limit))

    cond = go_on(fin_var, counter)
    arrays = []
    body = program._create_block()
    try:
        state_now = _rebuild(states, iter(st_vars))
        outputs, next_states, next_inputs, next_finished = call_sharing_parameters(
            decoder.step, counter, _rebuild(inputs, iter(in_vars)), state_now, **kwargs)
        done = cast(fin_var, "float32")
        new_len = elementwise_add(len_var, cast(scale(done, -1.0, bias=1.0), "int64"))
        new_states = _leaves(next_states)
        if impute_finished and not beam:
            keep = reshape(done, [-1])
            new_states = [elementwise_add(elementwise_mul(
                elementwise_sub(o, n), cast(keep, n.dtype), axis=0), n)
                for n, o in zip(new_states, st_vars)]
        new_fin = next_finished if beam else logical_or(fin_var, next_finished)
        saved = program.current_block_idx
        program.current_block_idx = parent.idx
        try:
            arrays = [create_array(dtype_name(o.dtype)) for o in _leaves(outputs)]
        finally:
            program.current_block_idx = saved
        for o, a in zip(_leaves(outputs), arrays):
            array_write(o, counter, array=a)
        for new, var in list(zip(_leaves(next_inputs), in_vars)) + list(
                zip(new_states, st_vars)) + [(new_fin, fin_var), (new_len, len_var)]:
            assign(new, var)
        increment(counter, 1.0)
        assign(go_on(fin_var, counter), cond)
    finally:
        program._rollback()
    reads, writes = _outer_reads_writes(body)
    scopes = parent.create_var(name=unique_name.generate(helper.name + ".steps"),
                               type=core.VarType.STEP_SCOPES, stop_gradient=True)
    parent.append_op("while", inputs={"X": reads, "Condition": cond},
                     outputs={"Out": writes, "StepScopes": scopes},
                     attrs={"sub_block": body.idx, "is_test": bool(is_test),
                            "max_iterations": 1000000})
    stacked = _rebuild(outputs, iter(
        [tensor_array_to_tensor(a, axis=0, use_stack=True)[0] for a in arrays]))
    final_states = _rebuild(states, iter(st_vars))
    lengths = final_states.lengths if beam else len_var
    final_outputs, final_states = decoder.finalize(stacked, final_states, lengths)
    if not output_time_major:
        final_outputs = _like(final_outputs, [
            transpose(x, [1, 0] + list(range(2, len(x.shape)))) for x in _flat(final_outputs)])
    if return_length:
        return final_outputs, final_states, lengths
    return final_outputs, final_states


def dynamic_decode(decoder, inits=None, max_step_num=None, output_time_major=False,
                   impute_finished=False, is_test=False, return_length=False, **kwargs):
    """Runs decoder.step max_step_num times (unrolled when built) from
    decoder.initialize(inits); returns (final outputs, final states) and, with
    return_length, each sequence's length (steps until it finished, the end token counted).
    Outputs are [batch, time, ...] unless output_time_major. kwargs reach every step (and
    the cell). With impute_finished, a finished sequence's states stop changing."""
    if max_step_num is None or isinstance(max_step_num, Variable):
        if max_step_num is not None and (
                max_step_num.dtype not in (core.DataType.INT32, core.DataType.INT64)):
            raise TypeError("dynamic_decode: max_step_num '%s' must be an int32 or int64 "
                            "Variable, got %s" % (max_step_num.name,
                                                  dtype_name(max_step_num.dtype)))
        return _decode_while(decoder, inits, max_step_num, output_time_major, impute_finished,
                             is_test, return_length, **kwargs)
    if int(max_step_num) < 1:
        raise ValueError("dynamic_decode: max_step_num must be a positive int, a Variable or "
                         "None, got %r" % (max_step_num,))
    inputs, states, finished = decoder.initialize(inits)
    lengths = cast(zeros_like(cast(finished, "float32")), "int64")
    steps = []
    for t in range(int(max_step_num)):
        time = fill_constant([1], "int64", t)
        outputs, next_states, inputs, next_finished = call_sharing_parameters(
            decoder.step, time, inputs, states, **kwargs)
        done = cast(finished, "float32")
        # A sequence not yet finished before this step grows by one.
        lengths = elementwise_add(lengths, cast(scale(done, -1.0, bias=1.0), "int64"))
        if impute_finished and not isinstance(decoder, BeamSearchDecoder):
            keep = reshape(done, [-1])  # 1 where finished: the old state stays
            mixed = [elementwise_add(elementwise_mul(
                elementwise_sub(o, n), cast(keep, n.dtype), axis=0), n)
                for n, o in zip(_flat(next_states), _flat(states))]
            next_states = _like(next_states, mixed)
        steps.append(outputs)
        states = next_states
        finished = logical_or(finished, next_finished) \
            if not isinstance(decoder, BeamSearchDecoder) else next_finished
    if isinstance(decoder, BeamSearchDecoder):
        lengths = states.lengths
    template = steps[0]
    stacked = _like(template, [stack([_flat(o)[i] for o in steps], axis=0)
                               for i in range(len(_flat(template)))])
    final_outputs, final_states = decoder.finalize(stacked, states, lengths)
    if not output_time_major:
        def batch_major(x):
            perm = [1, 0] + list(range(2, len(x.shape)))
            return transpose(x, perm)
        final_outputs = _like(final_outputs, [batch_major(x) for x in _flat(final_outputs)])
    if return_length:
        return final_outputs, final_states, lengths
    return final_outputs, final_states
