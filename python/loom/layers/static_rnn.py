"""Fluid's StaticRNN: a recurrence over the time dimension (dim 0) of its step inputs, written
as one step:

    rnn = fluid.layers.StaticRNN()
    with rnn.step():
        word = rnn.step_input(x)                         # x: [time, batch, ...]
        prev = rnn.memory(shape=[-1, 32], batch_ref=word)  # or init=h0
        hidden = fluid.layers.fc(input=[word, prev], size=32, act="relu")
        rnn.update_memory(prev, hidden)
        rnn.step_output(hidden)
    out = rnn()                                          # [time, batch, 32]

Loom unrolls the step when the `with` block ends: the ops built in it are emitted once per
time step (the time length must be static), each step's variables renamed, the memories
threaded from one step to the next, and the parameters shared. Backward then differentiates
the unrolled ops like any others.
"""
import contextlib

from .. import unique_name
from ..framework import default_main_program
from .tensor import fill_constant_batch_size_like, slice, squeeze, stack

__all__ = ["StaticRNN"]


class StaticRNN:
    def __init__(self, name=None):
        self._name = name or unique_name.generate("static_rnn")
        self._inputs = []    # (placeholder, source)
        self._memories = []  # dicts: placeholder, init, shape, batch_ref, value, dims, updated
        self._outputs = []   # placeholder names
        self._steps = None
        self._state = "new"
        self._results = None

    # ---- building the step
    @contextlib.contextmanager
    def step(self):
        if self._state != "new":
            raise RuntimeError("StaticRNN.step() can be entered once")
        self._block = default_main_program().global_block()
        start = self._block.desc.op_size()
        self._state = "step"
        yield
        self._state = "done"
        self._unroll(start, self._block.desc.op_size())

    def _check_in_step(self, what):
        if self._state != "step":
            raise RuntimeError("StaticRNN.%s must be called inside `with rnn.step():`" % what)

    def _placeholder(self, kind, shape, dtype):
        return self._block.create_var(name=unique_name.generate("%s.%s" % (self._name, kind)),
                                      shape=shape, dtype=dtype)

    def step_input(self, x):
        """The slice of x ([time, ...]) at the current step."""
        self._check_in_step("step_input")
        steps = x.shape[0]
        if steps is None or steps <= 0:
            raise ValueError("StaticRNN.step_input: the time dim (0) of '%s' must be static, "
                             "got %r" % (x.name, list(x.shape)))
        if self._steps is not None and steps != self._steps:
            raise ValueError("StaticRNN.step_input: '%s' has %d steps, an earlier input %d"
                             % (x.name, steps, self._steps))
        self._steps = steps
        ph = self._placeholder("in", list(x.shape[1:]), x.dtype)
        self._inputs.append((ph, x))
        return ph

    def memory(self, init=None, shape=None, batch_ref=None, init_value=0.0,
               init_batch_dim_idx=0, ref_batch_dim_idx=1):
        """A state carried from step to step: init at the first step (or init_value in shape,
        its batch dim taken from batch_ref's), then what update_memory set."""
        self._check_in_step("memory")
        if init is None and (shape is None or batch_ref is None):
            raise ValueError("StaticRNN.memory: give init, or shape and batch_ref")
        dtype = init.dtype if init is not None else batch_ref.dtype
        ph = self._placeholder("mem", list(init.shape if init is not None else shape), dtype)
        self._memories.append({"ph": ph, "init": init, "shape": shape, "batch_ref": batch_ref,
                               "value": float(init_value), "dim": init_batch_dim_idx,
                               "updated": None})
        return ph

    def update_memory(self, mem, var):
        self._check_in_step("update_memory")
        for m in self._memories:
            if m["ph"].name == mem.name:
                m["updated"] = var.name
                return
        raise ValueError("StaticRNN.update_memory: '%s' is not a memory of this RNN" % mem.name)

    def step_output(self, o):
        self._check_in_step("step_output")
        self._outputs.append(o.name)

    def output(self, *outputs):
        for o in outputs:
            self.step_output(o)

    def __call__(self, *args, **kwargs):
        if self._state != "done":
            raise RuntimeError("StaticRNN(): build the step first (`with rnn.step():`)")
        return self._results[0] if len(self._results) == 1 else self._results

    # ---- unrolling
    def _unroll(self, start, end):
        if not self._inputs:
            raise ValueError("StaticRNN: the step has no step_input")
        for m in self._memories:
            if m["updated"] is None:
                raise ValueError("StaticRNN: memory '%s' is never updated (update_memory)"
                                 % m["ph"].name)
        block = self._block
        recorded = []
        for i in range(start, end):
            op = block.desc.op(i)
            for a in op.attr_names():
                if "block" in op.attr_type(a):
                    raise NotImplementedError("StaticRNN: control flow inside the step "
                                              "(op '%s') is not supported" % op.type())
            recorded.append((op.type(),
                             {s: list(op.input(s)) for s in op.input_names()},
                             {s: list(op.output(s)) for s in op.output_names()},
                             {a: op.attr(a) for a in op.attr_names()}))
        for i in reversed(range(start, end)):
            block._remove_op(i)
        per_step_outputs = {name: [] for name in self._outputs}
        state = {}
        for t in range(self._steps):
            rename = {}
            for ph, x in self._inputs:
                s = slice(x, axes=[0], starts=[t], ends=[t + 1])
                rename[ph.name] = squeeze(s, [0]).name
            for m in self._memories:
                if t == 0:
                    if m["init"] is not None:
                        boot = m["init"]
                    else:
                        ref = m["batch_ref"]
                        ref = block.var(rename.get(ref.name, ref.name))
                        boot = fill_constant_batch_size_like(
                            ref, list(m["shape"]), ref.dtype, m["value"],
                            input_dim_idx=m["dim"], output_dim_idx=0)
                    rename[m["ph"].name] = boot.name
                else:
                    rename[m["ph"].name] = state[m["ph"].name]
            for type_, ins, outs, attrs in recorded:
                new_outs = {}
                for slot, names in outs.items():
                    mapped = []
                    for n in names:
                        v = block.desc.find_var_recursive(n) if \
                            block.desc.has_var_recursive(n) else None
                        if v is not None and v.persistable():
                            mapped.append(n)
                            continue
                        new = "%s@step%d" % (n, t)
                        if not block.has_var(new):
                            src = block.var(n)
                            block.create_var(name=new, shape=list(src.shape), dtype=src.dtype)
                        rename[n] = new
                        mapped.append(new)
                    new_outs[slot] = mapped
                new_ins = {slot: [rename.get(n, n) for n in names] for slot, names in ins.items()}
                block.append_op(type_, inputs=new_ins, outputs=new_outs, attrs=attrs)
            for m in self._memories:
                state[m["ph"].name] = rename.get(m["updated"], m["updated"])
            for name in self._outputs:
                per_step_outputs[name].append(block.var(rename.get(name, name)))
        self._results = [stack(per_step_outputs[n], axis=0) for n in self._outputs]
