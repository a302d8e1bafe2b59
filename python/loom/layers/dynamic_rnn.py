"""Fluid 1.x's DynamicRNN: a recurrence over the sequences of LoD tensors, one step per time
step, as long as the longest sequence, on the `while` op.

    drnn = fluid.layers.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(sentence)          # [batch, ...]: word t of every sequence
        prev = drnn.memory(shape=[200])           # or memory(init=boot)
        hidden = fluid.layers.fc(input=[word, prev], size=200, act="relu")
        drnn.update_memory(prev, hidden)
        drnn.output(hidden)
    out = drnn()                                  # LoD tensor: one row per input row

Loom pads the step inputs (sequence_pad) instead of sorting the batch by length and shrinking
it as sequences end (Fluid's lod_rank_table): every step runs the body on the whole batch, a
sequence past its end keeps its memories unchanged, and its outputs there are dropped when
the output is unpadded (sequence_unpad), so the results and the gradients are Fluid's. The
batch keeps its order: memory(init=...) rows belong to the sequences in input order
(need_reorder is accepted and has nothing to do). The loop runs max(length) steps at run time;
the body is built once (a sub-block), so its layers make one set of parameters.
"""
import contextlib

from .. import core, unique_name
from ..framework import default_main_program
from ..layer_helper import LayerHelper
from .control_flow import _outer_reads_writes, greater_than, increment, less_than
from .math import elementwise_add, elementwise_mul, elementwise_sub, reduce_max, reduce_sum, scale
from .sequence import sequence_pad, sequence_unpad
from .tensor import (assign, cast, expand, fill_constant, fill_constant_batch_size_like, gather,
                     scatter, squeeze, transpose, unsqueeze)

__all__ = ["DynamicRNN"]


class DynamicRNN:
    BEFORE_RNN, IN_RNN, AFTER_RNN = 0, 1, 2

    def __init__(self, name=None):
        self.helper = LayerHelper("dynamic_rnn", name=name)
        self.status = DynamicRNN.BEFORE_RNN
        self._program = self._parent = self._body = None
        self._step = None      # int64 [1]: the time step (carried by the loop)
        self._length = None    # int64 [batch]: the first step input's sequence lengths
        self._longest = None   # int64 [1]: max(length): the number of steps
        self._padded = None    # the first step input, padded [batch, time, ...]
        self._memories = []    # [memory var, its update or None]
        self._outputs = []     # [time-major accumulator, the step's value]
        self._results = None

    # ---- building in the enclosing block while the body is being built

    @contextlib.contextmanager
    def _in_parent(self):
        saved = self._program.current_block_idx
        self._program.current_block_idx = self._parent.idx
        try:
            yield
        finally:
            self._program.current_block_idx = saved

    def _check_in(self, method):
        if self.status != DynamicRNN.IN_RNN:
            raise ValueError("DynamicRNN.%s must be called inside `with drnn.block():`" % method)

    @contextlib.contextmanager
    def block(self):
        """The step's body: the ops built inside run once per time step."""
        if self.status != DynamicRNN.BEFORE_RNN:
            raise ValueError("DynamicRNN.block() may be entered once")
        self._program = default_main_program()
        self._parent = self._program.current_block()
        self._step = fill_constant([1], "int64", 0)
        self._body = self._program._create_block()
        self.status = DynamicRNN.IN_RNN
        ok = False
        try:
            yield
            ok = True
        finally:
            self._program._rollback()
            if not ok:
                self.status = DynamicRNN.AFTER_RNN
        self._finish()

    def step_input(self, x, level=0):
        """x (a LoD tensor): inside the block, row t of each of its sequences, [batch, ...]
        (zeros for a sequence already ended). The first step input sets the batch and the
        number of steps; later ones must have the same sequence lengths."""
        self._check_in("step_input")
        if level != 0:
            raise ValueError("DynamicRNN.step_input: only level 0 (the top-level sequences) is "
                             "supported, got level %r" % (level,))
        with self._in_parent():
            pad = fill_constant([1], x.dtype, 0.0)
            padded, length = sequence_pad(x, pad)
            rank = len(padded.shape)
            time_major = transpose(padded, [1, 0] + list(range(2, rank)))
            if self._length is None:
                self._length, self._padded = length, padded
                self._longest = reduce_max(length)
        row = gather(time_major, self._step)  # [1, batch, ...]
        return squeeze(row, [0])

    def static_input(self, x):
        """x [batch, ...], read as it is at every step (rows in input order)."""
        self._check_in("static_input")
        return x

    def memory(self, init=None, shape=None, value=0.0, need_reorder=False, dtype="float32"):
        """A state carried from step to step: init's value ([batch, ...]) or, without init,
        `value` in a [batch] + shape tensor (after a step_input, which gives the batch)."""
        self._check_in("memory")
        with self._in_parent():
            if init is not None:
                mem = assign(init)  # a copy: the loop overwrites it
            else:
                if shape is None:
                    raise ValueError("DynamicRNN.memory: give init or shape")
                if self._padded is None:
                    raise ValueError("DynamicRNN.memory(shape=...) must come after a "
                                     "step_input (which sets the batch size)")
                # assigned: a variable of its own that takes gradients (the fill's does not)
                mem = assign(fill_constant_batch_size_like(
                    self._padded, [-1] + [int(s) for s in shape], dtype, value))
        self._memories.append([mem, None])
        return mem

    def update_memory(self, ex_mem, new_mem):
        """The memory's value for the next step (kept as it was for sequences that ended)."""
        self._check_in("update_memory")
        for entry in self._memories:
            if entry[0].name == ex_mem.name:
                if entry[1] is not None:
                    raise ValueError("DynamicRNN.update_memory: memory '%s' is updated twice"
                                     % ex_mem.name)
                entry[1] = new_mem
                return
        raise ValueError("DynamicRNN.update_memory: '%s' is not a memory of this DynamicRNN"
                         % ex_mem.name)

    def output(self, *outputs):
        """Values of the step ([batch, ...]) gathered into the LoD results drnn() returns."""
        self._check_in("output")
        for o in outputs:
            rest = [int(d) for d in o.shape[1:]]
            if any(d < 0 for d in rest):
                raise ValueError("DynamicRNN.output: only the batch dim of '%s' may be unknown, "
                                 "got shape %r" % (o.name, list(o.shape)))
            if self._padded is None:
                raise ValueError("DynamicRNN.output must come after a step_input")
            with self._in_parent():
                # zeros [time, batch] + rest: the padded input's [batch, time] summed away
                padded = self._padded
                tb = transpose(scale(reduce_sum(
                    padded, dim=list(range(2, len(padded.shape)))) if len(padded.shape) > 2
                    else padded, 0.0), [1, 0])
                tb = cast(tb, o.dtype)
                zeros = expand(unsqueeze(tb, list(range(2, 2 + len(rest)))),
                               [1, 1] + rest) if rest else tb
            self._outputs.append([zeros, o])

    def _finish(self):
        if self._padded is None:
            self.status = DynamicRNN.AFTER_RNN
            raise ValueError("DynamicRNN: the block has no step_input")
        for mem, upd in self._memories:
            if upd is None:
                self.status = DynamicRNN.AFTER_RNN
                raise ValueError("DynamicRNN: memory '%s' is never updated (update_memory)"
                                 % mem.name)
        if not self._outputs:
            self.status = DynamicRNN.AFTER_RNN
            raise ValueError("DynamicRNN: the block has no output")
        program, body = self._program, self._body
        # The end of the step, in the body: masked memory updates, outputs, the next step.
        program.current_block_idx = body.idx
        try:
            alive = greater_than(self._length, self._step)  # [batch] bool
            for mem, upd in self._memories:
                keep = cast(alive, upd.dtype)
                moved = elementwise_add(
                    elementwise_mul(elementwise_sub(upd, mem), keep, axis=0), mem)
                assign(moved, mem)
            for entry in self._outputs:
                acc, value = entry
                assign(scatter(acc, self._step, unsqueeze(value, [0])), acc)
            increment(self._step, 1.0)
            cond_now = less_than(self._step, self._longest)
        finally:
            program._rollback()
        cond = less_than(self._step, self._longest)
        body.append_op("assign", inputs={"X": cond_now}, outputs={"Out": cond})
        reads, writes = _outer_reads_writes(body)
        steps = self._parent.create_var(name=unique_name.generate(self.helper.name + ".steps"),
                                        type=core.VarType.STEP_SCOPES, stop_gradient=True)
        self._parent.append_op("while", inputs={"X": reads, "Condition": cond},
                               outputs={"Out": writes, "StepScopes": steps},
                               attrs={"sub_block": body.idx, "is_test": False,
                                      "max_iterations": 1 << 40})
        results = []
        for acc, _ in self._outputs:
            rank = len(acc.shape)
            batch_major = transpose(acc, [1, 0] + list(range(2, rank)))
            results.append(sequence_unpad(batch_major, self._length))
        self._results = results
        self.status = DynamicRNN.AFTER_RNN

    def __call__(self, *args, **kwargs):
        if self.status != DynamicRNN.AFTER_RNN or self._results is None:
            raise ValueError("DynamicRNN: call it after its `with drnn.block():`")
        return self._results[0] if len(self._results) == 1 else self._results
