"""Control flow and the layers that feed it (Fluid's ``layers.control_flow``): comparisons and
logical ops, ``cond``, ``case``, ``switch_case``, ``while_loop``, ``While``, ``Switch``,
``increment`` and step counters, and ``Print``.

``cond`` builds each branch in a sub-block of the program run by a ``conditional_block`` op;
``append_backward`` differentiates through it (the gradient of a branch is a gradient block run
in the scope the branch ran in), and the data-parallel transpiler synchronizes the gradients of
parameters used inside branches like any other.
"""
import contextlib

from .. import core, unique_name
from ..framework import Variable, default_main_program, dtype_name
from ..layer_helper import LayerHelper
from .common import _check_var
from .tensor import (argsort, assign, concat, create_global_var, fill_constant, gather, reshape,
                     where)
from .tensor import slice as slice_

__all__ = ["less_than", "less_equal", "greater_than", "greater_equal", "equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "cond", "case", "switch_case",
           "while_loop", "While", "Switch", "IfElse", "increment", "autoincreased_step_counter",
           "Print"]


def _binary_bool(op_type, x, y, cond, axis=-1):
    _check_var(x, "x", op_type)
    _check_var(y, "y", op_type)
    helper = LayerHelper(op_type)
    out = cond if cond is not None else helper.create_variable_for_type_inference(
        "bool", stop_gradient=True)
    helper.append_op(op_type, inputs={"X": x, "Y": y}, outputs={"Out": out},
                     attrs={"axis": axis})
    return out


def less_than(x, y, force_cpu=None, cond=None):
    """Element-wise ``x < y`` as a bool Variable (y broadcast onto x); written into ``cond``
    when given."""
    return _binary_bool("less_than", x, y, cond)


def less_equal(x, y, cond=None):
    """Element-wise ``x <= y`` as a bool Variable."""
    return _binary_bool("less_equal", x, y, cond)


def greater_than(x, y, cond=None):
    """Element-wise ``x > y`` as a bool Variable."""
    return _binary_bool("greater_than", x, y, cond)


def greater_equal(x, y, cond=None):
    """Element-wise ``x >= y`` as a bool Variable."""
    return _binary_bool("greater_equal", x, y, cond)


def equal(x, y, cond=None):
    """Element-wise ``x == y`` as a bool Variable."""
    return _binary_bool("equal", x, y, cond)


def not_equal(x, y, cond=None):
    """Element-wise ``x != y`` as a bool Variable."""
    return _binary_bool("not_equal", x, y, cond)


def logical_and(x, y, out=None, name=None):
    """Element-wise and of two bool Variables."""
    return _binary_bool("logical_and", x, y, out)


def logical_or(x, y, out=None, name=None):
    """Element-wise or of two bool Variables."""
    return _binary_bool("logical_or", x, y, out)


def logical_xor(x, y, out=None, name=None):
    """Element-wise xor of two bool Variables."""
    return _binary_bool("logical_xor", x, y, out)


def logical_not(x, out=None, name=None):
    """Element-wise not of a bool Variable."""
    _check_var(x, "x", "logical_not")
    helper = LayerHelper("logical_not", name=name)
    out = out if out is not None else helper.create_variable_for_type_inference(
        "bool", stop_gradient=True)
    helper.append_op("logical_not", inputs={"X": x}, outputs={"Out": out})
    return out


def _as_list(outs, what):
    if outs is None:
        return []
    if isinstance(outs, Variable):
        return [outs]
    if isinstance(outs, (list, tuple)) and all(isinstance(o, Variable) for o in outs):
        return list(outs)
    raise TypeError("cond: %s must return None, a Variable or a list/tuple of Variables, got %r"
                    % (what, outs))


def _outer_reads_writes(block):
    """Variables of enclosing blocks that the ops of block read / write, in first-use order."""
    local = {v.name() for v in block.desc.all_vars()}
    reads, writes = [], []
    for op in block.ops:
        for n in op.input_arg_names:
            if n not in local and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            if n not in local and n not in writes:
                writes.append(n)
    return reads, writes


@contextlib.contextmanager
def _sub_block():
    """Builds the ops of the with-body into a new sub-block of the current block; yields
    (the enclosing block, the sub-block)."""
    program = default_main_program()
    parent = program.current_block()
    body = program._create_block()
    try:
        yield parent, body
    finally:
        program._rollback()


def _build_branch(program, fn, what):
    block = program._create_block()
    try:
        outs = _as_list(fn(), what) if fn is not None else []
    finally:
        program._rollback()
    return block, outs


def _append_conditional_block(parent, pred, block, helper):
    reads, writes = _outer_reads_writes(block)
    scope = parent.create_var(name=unique_name.generate(helper.name + ".scope"),
                              type=core.VarType.STEP_SCOPES, stop_gradient=True)
    parent.append_op("conditional_block",
                     inputs={"Cond": pred, "Input": reads},
                     outputs={"Out": writes, "Scope": scope},
                     attrs={"sub_block": block.idx})


def cond(pred, true_fn=None, false_fn=None, name=None):
    """Runs the ops ``true_fn`` builds when ``pred`` holds, else those ``false_fn`` builds
    (Fluid's ``layers.cond``).

    pred: a bool Variable with one element (e.g. ``layers.reduce_mean(x) > 0``).
    true_fn, false_fn: callables that build ops and return None, a Variable, or a list/tuple
    of Variables; when both return values, they must return as many, with the same dtypes.
    Each runs in a sub-block of the program: variables it creates stay local to the branch;
    it may read any variable of the enclosing blocks (parameters included).

    Returns the outputs of the branch taken, as Variables of the enclosing block (a Variable,
    a list, or None). Gradients flow through the branch taken; a parameter used only in the
    other branch gets a zero gradient, so every rank of a data-parallel run has one to
    synchronize even when ranks take different branches.
    """
    _check_var(pred, "pred", "cond")
    if pred.dtype != core.DataType.BOOL:
        raise TypeError("cond: pred '%s' must be bool, got %s (compare with layers.less_than, "
                        "greater_than, ...)" % (pred.name, dtype_name(pred.dtype)))
    numel = 1
    for d in pred.shape:
        numel = -1 if d < 0 or numel < 0 else numel * d
    if numel not in (1, -1):
        raise ValueError("cond: pred '%s' must hold one element, its shape is %s"
                         % (pred.name, list(pred.shape)))
    if true_fn is None and false_fn is None:
        raise ValueError("cond: give true_fn, false_fn or both")
    for fn, what in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if fn is not None and not callable(fn):
            raise TypeError("cond: %s must be callable, got %r" % (what, fn))
    program = default_main_program()
    parent = program.current_block()
    helper = LayerHelper("cond", name=name)
    true_block, true_outs = _build_branch(program, true_fn, "true_fn")
    false_block, false_outs = _build_branch(program, false_fn, "false_fn")
    if (true_outs or false_outs) and (true_fn is None or false_fn is None):
        raise ValueError("cond: %s returns %d variable(s) but %s is None; give both branches "
                         "when they return values" % (
                             "true_fn" if true_outs else "false_fn",
                             len(true_outs or false_outs),
                             "false_fn" if true_outs else "true_fn"))
    if len(true_outs) != len(false_outs):
        raise ValueError("cond: true_fn returns %d variable(s), false_fn %d"
                         % (len(true_outs), len(false_outs)))
    outs = []
    for i, (a, b) in enumerate(zip(true_outs, false_outs)):
        if a.dtype != b.dtype:
            raise TypeError("cond: output %d is %s in true_fn ('%s') but %s in false_fn ('%s')"
                            % (i, dtype_name(a.dtype), a.name, dtype_name(b.dtype), b.name))
        shape = None
        if len(a.shape) == len(b.shape):
            shape = [x if x == y else -1 for x, y in zip(a.shape, b.shape)]
        outs.append(parent.create_var(name=unique_name.generate(helper.name + ".out"),
                                      dtype=a.dtype, shape=shape))
    for block, values in ((true_block, true_outs), (false_block, false_outs)):
        for v, o in zip(values, outs):
            block.append_op("assign", inputs={"X": v}, outputs={"Out": o})
    if true_fn is not None:
        _append_conditional_block(parent, pred, true_block, helper)
    if false_fn is not None:
        _append_conditional_block(parent, logical_not(pred), false_block, helper)
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else outs


def case(pred_fn_pairs, default=None, name=None):
    """Runs the function of the first pair whose predicate holds (Fluid's ``layers.case``).

    pred_fn_pairs: a list or tuple of (pred, fn): pred a one-element bool Variable, fn a
    callable as for ``cond``. default: the function run when no predicate holds; None: the
    last pair's function. All functions must return as many variables with the same dtypes.
    Built as nested ``cond``s, so gradients flow through the function that ran.
    """
    if not isinstance(pred_fn_pairs, (list, tuple)) or not pred_fn_pairs:
        raise TypeError("case: pred_fn_pairs must be a non-empty list or tuple of (pred, fn), "
                        "got %r" % (pred_fn_pairs,))
    for i, pair in enumerate(pred_fn_pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not callable(pair[1]):
            raise TypeError("case: pred_fn_pairs[%d] must be a (pred, fn) pair with a callable "
                            "fn, got %r" % (i, pair))
        _check_var(pair[0], "pred_fn_pairs[%d][0]" % i, "case")
    if default is None:
        default = pred_fn_pairs[-1][1]
    elif not callable(default):
        raise TypeError("case: default must be callable, got %r" % (default,))

    def chain(i):
        if i == len(pred_fn_pairs):
            return default()
        pred, fn = pred_fn_pairs[i]
        return cond(pred, fn, lambda: chain(i + 1), name=name)

    return chain(0)


def switch_case(branch_index, branch_fns, default=None, name=None):
    """Runs ``branch_fns[branch_index]`` (Fluid's ``layers.switch_case``).

    branch_index: a one-element int32 or int64 Variable. branch_fns: a list of callables
    (indices 0, 1, ...), or a dict or list of (index, fn) pairs. default: run when the index
    matches none; None: the function with the largest index.
    """
    _check_var(branch_index, "branch_index", "switch_case")
    if branch_index.dtype not in (core.DataType.INT32, core.DataType.INT64):
        raise TypeError("switch_case: branch_index '%s' must be int32 or int64, got %s"
                        % (branch_index.name, dtype_name(branch_index.dtype)))
    if isinstance(branch_fns, dict):
        items = list(branch_fns.items())
    elif isinstance(branch_fns, (list, tuple)) and branch_fns and all(
            callable(f) for f in branch_fns):
        items = list(enumerate(branch_fns))
    elif isinstance(branch_fns, (list, tuple)) and branch_fns:
        items = list(branch_fns)
    else:
        raise TypeError("switch_case: branch_fns must be a non-empty list of callables or of "
                        "(index, fn) pairs, or a dict, got %r" % (branch_fns,))
    seen = set()
    for pair in items:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or \
                not isinstance(pair[0], int) or not callable(pair[1]):
            raise TypeError("switch_case: each branch must be (int index, callable), got %r"
                            % (pair,))
        if pair[0] in seen:
            raise ValueError("switch_case: index %d appears twice" % pair[0])
        seen.add(pair[0])
    items.sort(key=lambda kv: kv[0])
    if default is None:
        default = items[-1][1]
    pairs = [(equal(branch_index, fill_constant([1], dtype_name(branch_index.dtype), k)),
              fn) for k, fn in items]
    return case(pairs, default, name=name)


def while_loop(cond, body, loop_vars, is_test=False, max_iterations=1000000, name=None):
    """Repeats ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` holds (Fluid's
    ``layers.while_loop``).

    cond: a callable returning a one-element bool Variable. body: a callable returning as many
    Variables as loop_vars (the next values; returning a loop variable itself keeps it).
    loop_vars: a list or tuple of Variables of the enclosing block (the loop state). The body
    runs in a sub-block of the program; it may read any variable of the enclosing blocks
    (parameters included: their gradients are summed over the iterations).

    Returns the final values of the loop variables, as new Variables (the ones passed in keep
    their values). is_test: keep nothing for a
    gradient (``Program.clone(for_test=True)`` sets it). A loop still running after
    max_iterations iterations ends in an error instead of hanging.
    """
    if not callable(cond) or not callable(body):
        raise TypeError("while_loop: cond and body must be callable, got %r and %r"
                        % (cond, body))
    if not isinstance(loop_vars, (list, tuple)) or not loop_vars:
        raise TypeError("while_loop: loop_vars must be a non-empty list or tuple of Variables, "
                        "got %r" % (loop_vars,))
    for i, v in enumerate(loop_vars):
        _check_var(v, "loop_vars[%d]" % i, "while_loop")
    # The loop overwrites its state: start from copies, so the values the caller passed in
    # (which ops before the loop may need for their gradients) stay as they were.
    loop_vars = [assign(v) for v in loop_vars]
    pre_cond = cond(*loop_vars)
    _check_var(pre_cond, "cond(*loop_vars)", "while_loop")
    if pre_cond.dtype != core.DataType.BOOL:
        raise TypeError("while_loop: cond must return a bool Variable, got %s"
                        % dtype_name(pre_cond.dtype))
    program = default_main_program()
    parent = program.current_block()
    helper = LayerHelper("while_loop", name=name)
    block = program._create_block()
    try:
        outs = body(*loop_vars)
        outs = _as_list(outs, "body")
        if len(outs) != len(loop_vars):
            raise ValueError("while_loop: body returns %d variable(s) for %d loop_vars"
                             % (len(outs), len(loop_vars)))
        for i, (o, v) in enumerate(zip(outs, loop_vars)):
            if o.dtype != v.dtype:
                raise TypeError("while_loop: body's output %d is %s, loop_vars[%d] ('%s') is %s"
                                % (i, dtype_name(o.dtype), i, v.name, dtype_name(v.dtype)))
            if o.name != v.name:
                block.append_op("assign", inputs={"X": o}, outputs={"Out": v})
        now = cond(*loop_vars)
        block.append_op("assign", inputs={"X": now}, outputs={"Out": pre_cond})
    finally:
        program._rollback()
    reads, writes = _outer_reads_writes(block)
    steps = parent.create_var(name=unique_name.generate(helper.name + ".steps"),
                              type=core.VarType.STEP_SCOPES, stop_gradient=True)
    parent.append_op("while", inputs={"X": reads, "Condition": pre_cond},
                     outputs={"Out": writes, "StepScopes": steps},
                     attrs={"sub_block": block.idx, "is_test": bool(is_test),
                            "max_iterations": int(max_iterations)})
    return loop_vars


class While:
    """Fluid 1.x's loop: the ops built inside ``with loop.block():`` run while ``cond`` holds.

        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 10)
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            ...                               # read and write variables of the program
            layers.increment(i)               # in place
            layers.less_than(i, n, cond=cond)

    The body updates ``cond`` itself (write it with ``cond=``). Variables of enclosing blocks
    that the body writes are overwritten in place, iteration after iteration; a gradient op
    that needs their earlier values would read the last ones, so for training prefer
    ``while_loop``, which starts from copies.
    """

    def __init__(self, cond, is_test=False, name=None, max_iterations=1000000):
        _check_var(cond, "cond", "While")
        if cond.dtype != core.DataType.BOOL:
            raise TypeError("While: cond '%s' must be bool, got %s"
                            % (cond.name, dtype_name(cond.dtype)))
        self.cond = cond
        self.is_test = bool(is_test)
        self.max_iterations = int(max_iterations)
        self.helper = LayerHelper("while", name=name)
        self._used = False

    @contextlib.contextmanager
    def block(self):
        if self._used:
            raise RuntimeError("While: block() may be entered once per While")
        self._used = True
        with _sub_block() as (parent, body):
            yield
        reads, writes = _outer_reads_writes(body)
        if self.cond.name not in writes:
            raise ValueError("While: the body never writes the condition '%s' (update it, e.g. "
                             "layers.less_than(i, n, cond=cond)); the loop would not end"
                             % self.cond.name)
        steps = parent.create_var(name=unique_name.generate(self.helper.name + ".steps"),
                                  type=core.VarType.STEP_SCOPES, stop_gradient=True)
        parent.append_op("while", inputs={"X": reads, "Condition": self.cond},
                         outputs={"Out": writes, "StepScopes": steps},
                         attrs={"sub_block": body.idx, "is_test": self.is_test,
                                "max_iterations": self.max_iterations})


class Switch:
    """Fluid 1.x's Switch: the body of the first case whose condition holds runs, else the
    default's.

        with fluid.layers.Switch() as switch:
            with switch.case(step < 100):
                fluid.layers.assign(warm, lr)
            with switch.default():
                fluid.layers.assign(base, lr)

    Each body is a sub-block run by a conditional_block op (as cond's branches); bodies write
    variables of the enclosing block (assign to them).
    """

    def __init__(self, name=None):
        self.helper = LayerHelper("switch", name=name)
        self._taken = None  # bool: an earlier case held
        self._inside = False
        self._default_seen = False

    def __enter__(self):
        self._inside = True
        return self

    def __exit__(self, *exc):
        self._inside = False
        return False

    def _branch(self, pred):
        with _sub_block() as (parent, body):
            yield
        _append_conditional_block(parent, pred, body, self.helper)

    @contextlib.contextmanager
    def case(self, condition):
        if not self._inside:
            raise RuntimeError("Switch.case must be used inside `with Switch() as switch:`")
        if self._default_seen:
            raise RuntimeError("Switch.case after Switch.default")
        _check_var(condition, "condition", "Switch.case")
        if condition.dtype != core.DataType.BOOL:
            raise TypeError("Switch.case: condition '%s' must be bool" % condition.name)
        if self._taken is None:
            pred, taken = condition, condition
        else:
            pred = logical_and(logical_not(self._taken), condition)
            taken = logical_or(self._taken, condition)
        yield from self._branch(pred)
        self._taken = taken

    @contextlib.contextmanager
    def default(self):
        if not self._inside:
            raise RuntimeError("Switch.default must be used inside `with Switch() as switch:`")
        self._default_seen = True
        if self._taken is None:
            pred = fill_constant([1], "bool", 1)
        else:
            pred = logical_not(self._taken)
        yield from self._branch(pred)


class IfElse:
    """Fluid 1.x's IfElse: the rows of a batch where `cond` ([N, 1] or [N] bool) holds go
    through the true block, the others through the false block, and ie() merges the blocks'
    outputs back into one batch in the original row order.

        ie = fluid.layers.IfElse(fluid.layers.less_than(label, limit))
        with ie.true_block():
            x = ie.input(image)          # the rows where cond holds
            ie.output(fluid.layers.fc(x, 10))
        with ie.false_block():
            x = ie.input(image)          # the other rows
            ie.output(fluid.layers.fc(x, 10, act="relu"))
        out, = ie()

    Both blocks are built in the enclosing block over the selected rows (gather by the
    indices of cond; the merge gathers the concatenated outputs back by the inverse
    permutation), so their gradients flow like any layer's; a block that selects no row runs
    its ops on zero rows. Each block must output as many variables as the other, with the
    same trailing dims."""

    OUT, IN_TRUE, IN_FALSE = 0, 1, 2

    def __init__(self, cond, name=None):
        _check_var(cond, "cond", "IfElse")
        if cond.dtype != core.DataType.BOOL:
            raise TypeError("IfElse: cond '%s' must be bool, got %s"
                            % (cond.name, dtype_name(cond.dtype)))
        shape = list(cond.shape)
        if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
            raise ValueError("IfElse: cond '%s' must be [N, 1] or [N], got %s"
                             % (cond.name, shape))
        self.helper = LayerHelper("ifelse", name=name)
        self._index = {}
        for branch, c in ((True, cond), (False, logical_not(cond))):
            coords = where(c)  # [K, rank]: the row is the first coordinate
            if len(shape) == 2:
                coords = slice_(coords, [1], [0], [1])
            self._index[branch] = reshape(coords, [-1])
        self._status = self.OUT
        self._outputs = {True: None, False: None}
        self._inputs = {True: {}, False: {}}

    @contextlib.contextmanager
    def _block(self, branch):
        if self._status != self.OUT:
            raise RuntimeError("IfElse: a block cannot be opened inside another")
        if self._outputs[branch] is not None:
            raise RuntimeError("IfElse: the %s block was already built"
                               % ("true" if branch else "false"))
        self._status = self.IN_TRUE if branch else self.IN_FALSE
        self._outputs[branch] = []
        try:
            yield
        finally:
            self._status = self.OUT

    def true_block(self):
        """The block of the rows where cond holds."""
        return self._block(True)

    def false_block(self):
        """The block of the other rows."""
        return self._block(False)

    def _branch(self, what):
        if self._status == self.OUT:
            raise RuntimeError("IfElse.%s must be called inside true_block() or false_block()"
                               % what)
        return self._status == self.IN_TRUE

    def input(self, x):
        """x's rows of the current block (x has the batch's N rows)."""
        branch = self._branch("input")
        _check_var(x, "x", "IfElse.input")
        cache = self._inputs[branch]
        if x.name not in cache:
            cache[x.name] = gather(x, self._index[branch])
        return cache[x.name]

    def output(self, *outs):
        """The current block's outputs (one row per row of its inputs)."""
        branch = self._branch("output")
        for o in outs:
            _check_var(o, "output", "IfElse.output")
        self._outputs[branch].extend(outs)

    def __call__(self):
        if self._status != self.OUT:
            raise RuntimeError("IfElse() must be called after both blocks are closed")
        t, f = self._outputs[True], self._outputs[False]
        if t is None or f is None:
            raise RuntimeError("IfElse(): build both true_block() and false_block() first")
        if len(t) != len(f):
            raise ValueError("IfElse: the true block has %d outputs, the false block %d"
                             % (len(t), len(f)))
        _, inverse = argsort(concat([self._index[True], self._index[False]]))
        merged = []
        for i, (a, b) in enumerate(zip(t, f)):
            if list(a.shape)[1:] != list(b.shape)[1:] or a.dtype != b.dtype:
                raise ValueError("IfElse: output %d is %s %s in the true block and %s %s in "
                                 "the false block" % (i, dtype_name(a.dtype), list(a.shape),
                                                      dtype_name(b.dtype), list(b.shape)))
            merged.append(gather(concat([a, b]), inverse))
        return merged


def increment(x, value=1.0, in_place=True):
    """x + value; with in_place (the default) written back into x (Fluid's increment)."""
    _check_var(x, "x", "increment")
    helper = LayerHelper("increment")
    out = x if in_place else helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("scale", inputs={"X": x}, outputs={"Out": out},
                     attrs={"scale": 1.0, "bias": float(value)})
    return out


def autoincreased_step_counter(counter_name=None, begin=1, step=1):
    """A persistable int64 counter that is `begin` on the first run and grows by step each run
    (created once per program and name)."""
    name = counter_name or "@STEP_COUNTER@"
    block = default_main_program().global_block()
    if block.has_var(name):
        return block.var(name)
    counter = create_global_var([1], int(begin) - int(step), "int64", persistable=True,
                                name=name)
    increment(counter, float(step))
    counter.stop_gradient = True
    return counter


def Print(input, first_n=-1, message=None, summarize=20, print_tensor_name=True,
          print_tensor_type=True, print_tensor_shape=True, print_tensor_lod=True,
          print_phase="both"):
    """Writes input (and, in the backward phase, its gradient) to stderr when the program
    runs; returns input unchanged (use the result so the op is not dropped)."""
    if print_phase not in ("forward", "backward", "both"):
        raise ValueError("Print: print_phase %r is not forward, backward or both"
                         % (print_phase,))
    helper = LayerHelper("print")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("print", inputs={"In": input}, outputs={"Out": out},
                     attrs={"first_n": int(first_n), "message": message or "",
                            "summarize": int(summarize),
                            "print_tensor_name": bool(print_tensor_name),
                            "print_tensor_type": bool(print_tensor_type),
                            "print_tensor_shape": bool(print_tensor_shape),
                            "print_tensor_lod": bool(print_tensor_lod),
                            "print_phase": print_phase})
    return out
