"""Programs, blocks and variables: thin Python views over the C++ descs in ``loom.core``."""
import contextlib
import math
import os

import numpy as np

from . import core, unique_name
from ._per_thread import PerThread

_DTYPES = {
    "float32": core.DataType.FP32, "float64": core.DataType.FP64, "float16": core.DataType.FP16,
    "int32": core.DataType.INT32, "int64": core.DataType.INT64, "bool": core.DataType.BOOL,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def convert_dtype(dtype):
    """Accepts 'float32', numpy dtypes or core.DataType; returns core.DataType."""
    if isinstance(dtype, core.DataType):
        return dtype
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in _DTYPES:
        raise ValueError("unsupported dtype %r (supported: %s)" % (dtype, ", ".join(_DTYPES)))
    return _DTYPES[name]


def dtype_name(dtype):
    return _NAMES[convert_dtype(dtype)]


def _fill_value_attrs(value, dtype):
    """fill_constant's value attributes: integers go through str_value (exact for any int64,
    as Fluid's str_value; the float `value` is exact only up to 2**24), float64 values too; a
    value the dtype cannot hold is refused here, where the user gave it."""
    dt = convert_dtype(dtype)
    if dt in (core.DataType.INT32, core.DataType.INT64, core.DataType.BOOL):
        if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
            raise ValueError("fill value %r is not an integer %s can hold" % (value, dtype_name(dt)))
        iv = int(value)
        lo, hi = {core.DataType.INT32: (-2 ** 31, 2 ** 31 - 1),
                  core.DataType.INT64: (-2 ** 63, 2 ** 63 - 1),
                  core.DataType.BOOL: (0, 1)}[dt]
        if not lo <= iv <= hi:
            raise ValueError("fill value %d does not fit %s" % (iv, dtype_name(dt)))
        return {"value": float(iv), "str_value": str(iv), "dtype": int(dt)}
    attrs = {"value": float(value), "dtype": int(dt)}
    if dt == core.DataType.FP64:
        attrs["str_value"] = repr(float(value))
    return attrs


class Variable:
    """A variable of a block (Fluid's ``framework.Variable``). Its arithmetic and comparison
    operators build ops; loom.layers adds them (layers/math_op_patch.py)."""

    def __init__(self, block, name):
        self.block = block
        self.name = name

    @property
    def desc(self):
        return self.block.desc.find_var_recursive(self.name)

    @property
    def shape(self):
        return tuple(self.desc.shape())

    @property
    def dtype(self):
        return self.desc.dtype()

    @property
    def type(self):
        """What the variable holds: a core.VarType (DENSE_TENSOR; SELECTED_ROWS for an
        embedding's sparse gradient; LOD_TENSOR_ARRAY; ...)."""
        return self.desc.type()

    @property
    def lod_level(self):
        """Levels of LoD the variable carries (0: plain rows; docs/FORMATS.md)."""
        return self.desc.lod_level()

    @property
    def persistable(self):
        return self.desc.persistable()

    @persistable.setter
    def persistable(self, value):
        self.desc.set_persistable(bool(value))

    @property
    def stop_gradient(self):
        return self.desc.stop_gradient()

    @stop_gradient.setter
    def stop_gradient(self, value):
        self.desc.set_stop_gradient(bool(value))

    def __repr__(self):
        return "Variable(%s, shape=%s, dtype=%s%s)" % (
            self.name, list(self.shape), dtype_name(self.dtype),
            ", persistable" if self.persistable else "")


class Parameter(Variable):
    """A trainable persistable variable."""

    def __init__(self, block, name, trainable=True, optimize_attr=None, regularizer=None):
        super().__init__(block, name)
        self.trainable = trainable
        self.optimize_attr = optimize_attr or {"learning_rate": 1.0}
        self.regularizer = regularizer
        self.do_model_average = True  # ModelAverage / ExponentialMovingAverage average it


class Operator:
    """View of one op of a block."""

    def __init__(self, block, desc):
        self.block = block
        self.desc = desc

    @property
    def type(self):
        return self.desc.type()

    def input(self, slot):
        return self.desc.input(slot)

    def output(self, slot):
        return self.desc.output(slot)

    @property
    def input_names(self):
        return self.desc.input_names()

    @property
    def output_names(self):
        return self.desc.output_names()

    @property
    def input_arg_names(self):
        return self.desc.input_arg_names()

    @property
    def output_arg_names(self):
        return self.desc.output_arg_names()

    def attr(self, name):
        return self.desc.attr(name)

    def has_attr(self, name):
        return self.desc.has_attr(name)

    def _set_attr(self, name, value):
        self.desc.set_attr(name, value)
        self.block.program._version += 1

    def __repr__(self):
        ins = ", ".join("%s=%s" % (s, self.input(s)) for s in self.input_names)
        outs = ", ".join("%s=%s" % (s, self.output(s)) for s in self.output_names)
        return "%s(%s) -> (%s)" % (self.type, ins, outs)


def _names(v):
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return [x.name if isinstance(x, Variable) else x for x in v]
    return [v.name if isinstance(v, Variable) else v]


class Block:
    """A block of a program (Fluid's ``framework.Block``)."""

    def __init__(self, program, idx):
        self.program = program
        self.idx = idx
        self._params = {}

    @property
    def desc(self):
        return self.program.desc.block(self.idx)

    @property
    def parent_idx(self):
        return self.desc.parent_idx

    @property
    def ops(self):
        return [Operator(self, self.desc.op(i)) for i in range(self.desc.op_size())]

    @property
    def vars(self):
        return {v.name(): self.var(v.name()) for v in self.desc.all_vars()}

    def has_var(self, name):
        return self.desc.has_var(name)

    def var(self, name):
        """The variable called name in this block or an ancestor (KeyError-like LookupError if absent)."""
        if not self.desc.has_var_recursive(name):
            raise core.NotFoundError("var '%s' is not in block %d" % (name, self.idx))
        if name in self._params:
            return self._params[name]
        return Variable(self, name)

    def create_var(self, name=None, shape=None, dtype="float32", persistable=False,
                   stop_gradient=False, type=None, lod_level=0):
        self.program._version += 1
        name = name or unique_name.generate("tmp")
        d = self.desc.var(name)
        if type is not None:
            d.set_type(type)
        d.set_dtype(convert_dtype(dtype))
        if shape is not None:
            d.set_shape([int(s) for s in shape])
        d.set_persistable(persistable)
        d.set_stop_gradient(stop_gradient)
        if lod_level:
            d.set_lod_level(int(lod_level))
        return Variable(self, name)

    def create_parameter(self, name, shape, dtype="float32", trainable=True, regularizer=None,
                         optimize_attr=None):
        self.program._version += 1
        d = self.desc.var(name)
        d.set_dtype(convert_dtype(dtype))
        d.set_shape([int(s) for s in shape])
        d.set_persistable(True)
        d.set_is_parameter(True)
        d.set_stop_gradient(not trainable)
        p = Parameter(self, name, trainable, optimize_attr, regularizer)
        self._params[name] = p
        return p

    def all_parameters(self):
        out = []
        for v in self.desc.all_vars():
            if v.is_parameter():
                out.append(self._params.get(v.name()) or Parameter(self, v.name()))
        return out

    def append_op(self, type, inputs=None, outputs=None, attrs=None, infer_shape=True):
        """Appends an op; inputs/outputs map slot -> Variable/name or a list of them."""
        return self._add_op(self.desc.append_op(), self.desc.op_size() - 1, type, inputs,
                            outputs, attrs, infer_shape)

    def _insert_op(self, index, type, inputs=None, outputs=None, attrs=None, infer_shape=True):
        return self._add_op(self.desc.insert_op(index), index, type, inputs, outputs, attrs,
                            infer_shape)

    def _add_op(self, desc, index, type, inputs, outputs, attrs, infer_shape):
        self.program._version += 1
        desc.set_type(type)
        try:
            for slot, v in (inputs or {}).items():
                desc.set_input(slot, _names(v))
            for slot, v in (outputs or {}).items():
                desc.set_output(slot, _names(v))
            attrs = dict(attrs or {})
            attrs.setdefault("op_role", self.program._op_role)
            if self.program._name_scope:
                attrs.setdefault("op_namescope", self.program._name_scope)
            for k, v in attrs.items():
                if v is not None:
                    desc.set_attr(k, v)
            if infer_shape:
                self.desc.infer_shape(index)
        except Exception:
            self.desc.remove_op(index)
            raise
        return Operator(self, desc)

    def _remove_op(self, index):
        self.program._version += 1
        self.desc.remove_op(index)

    def __repr__(self):
        return "Block(%d, %d ops)" % (self.idx, self.desc.op_size())


class _CallableInt(int):
    """An int that also answers a call with itself: keeps num_blocks() working beside Fluid's
    num_blocks property."""

    def __call__(self):
        return int(self)


class Program:
    """A program: blocks of ops and vars (Fluid's ``framework.Program``)."""

    def __init__(self, desc=None):
        self.desc = desc if desc is not None else core.ProgramDesc()
        self.blocks = [Block(self, i) for i in range(self.desc.num_blocks())]
        self.current_block_idx = 0
        self._op_role = core.kOpRoleForward
        self._version = 0  # bumped by every edit made through this API (executor cache key)
        self._name_scope = ""
        self.random_seed = 0

    def global_block(self):
        return self.blocks[0]

    def block(self, i):
        return self.blocks[i]

    def current_block(self):
        return self.blocks[self.current_block_idx]

    @property
    def num_blocks(self):
        """The number of blocks (a property, as in Fluid; calling it, num_blocks(), works
        too)."""
        return _CallableInt(len(self.blocks))

    def _create_block(self, parent_idx=None):
        parent = self.current_block_idx if parent_idx is None else parent_idx
        b = self.desc.append_block(parent)
        self.blocks.append(Block(self, b.idx))
        self.current_block_idx = b.idx
        return self.blocks[-1]

    def _rollback(self):
        self.current_block_idx = self.current_block().parent_idx

    def _replace_desc(self, desc):
        """Makes this program the given ProgramDesc (a transpiler rewriting it in place)."""
        self.desc = desc
        self.blocks = [Block(self, i) for i in range(desc.num_blocks())]
        self.current_block_idx = 0
        self._version += 1

    def _sync_with_desc(self):
        """Adds Block views for blocks the C++ side appended (gradient blocks of backward)."""
        for i in range(len(self.blocks), self.desc.num_blocks()):
            self.blocks.append(Block(self, i))

    def all_parameters(self):
        return self.global_block().all_parameters()

    def list_vars(self):
        for b in self.blocks:
            for v in b.vars.values():
                yield v

    def clone(self, for_test=False):
        """A deep copy. With for_test=True, ops after the forward pass (backward, optimizer, and
        a transpiled trainer's sends, barriers and receives) are dropped and ops with an
        `is_test` attribute are switched to test mode. A test clone of a parameter-server
        trainer program evaluates with the parameters of its last step (distributed lookup
        tables still prefetch their rows)."""
        p = Program(self.desc.clone())
        for b_old, b_new in zip(self.blocks, p.blocks):
            b_new._params = {k: Parameter(b_new, k, v.trainable, v.optimize_attr, v.regularizer)
                             for k, v in b_old._params.items()}
            for k, v in b_old._params.items():
                b_new._params[k].do_model_average = v.do_model_average
        p.random_seed = self.random_seed
        if for_test:
            gb = p.global_block()
            for i in reversed(range(gb.desc.op_size())):
                op = gb.desc.op(i)
                role = op.attr("op_role") if op.has_attr("op_role") else 0
                if role & (core.kOpRoleBackward | core.kOpRoleOptimize | core.kOpRoleLRSched |
                           core.kOpRoleRPC):
                    gb.desc.remove_op(i)
            # Test mode everywhere, sub-blocks (branches, loop bodies) included. Gradient
            # blocks stay, unreferenced.
            for b in p.blocks:
                for i in range(b.desc.op_size()):
                    op = b.desc.op(i)
                    if op.has_attr("is_test"):
                        op.set_attr("is_test", True)
        return p

    def verify(self):
        """Runs the C++ verifier (registry checks + compile-time shape inference)."""
        self.desc.verify()

    def to_string(self, throw_on_error=False, with_details=False):
        lines = []
        for b in self.blocks:
            lines.append("block %d (parent %d) {" % (b.idx, b.parent_idx))
            for v in b.desc.all_vars():
                flags = " persistable" if v.persistable() else ""
                lines.append("  var %s : %s%s%s" % (v.name(), dtype_name(v.dtype()),
                                                    list(v.shape()), flags))
            for i, op in enumerate(b.ops):
                lines.append("  #%d %r" % (i, op))
            lines.append("}")
        return "\n".join(lines)

    __str__ = to_string

    def serialize_to_string(self):
        return self.desc.serialize_to_string()

    @staticmethod
    def parse_from_string(binary):
        return Program(core.ProgramDesc.parse_from_string(binary))


# The default programs: per thread where a worker thread switched them (_per_thread.py).
_main_program = PerThread(Program())
_startup_program = PerThread(Program())


def default_main_program():
    return _main_program.get()


def default_startup_program():
    return _startup_program.get()


def switch_main_program(program):
    """Makes program the default main program (of this thread, or in the main thread of the
    process); returns the one it replaces."""
    prev = _main_program.get()
    _main_program.set(program)
    return prev


def switch_startup_program(program):
    """As switch_main_program, for the startup program."""
    prev = _startup_program.get()
    _startup_program.set(program)
    return prev


@contextlib.contextmanager
def program_guard(main_program, startup_program=None):
    """Builds into main_program (and startup_program) inside the with-block. In a thread other
    than the main one the guard holds for that thread alone."""
    if not isinstance(main_program, Program):
        raise TypeError("program_guard: main_program must be a loom.Program")
    main_token = _main_program.set(main_program)
    startup_token = _startup_program.set(startup_program) if startup_program is not None else None
    try:
        yield
    finally:
        _main_program.restore(main_token)
        if startup_token is not None:
            _startup_program.restore(startup_token)


@contextlib.contextmanager
def name_scope(prefix):
    p = default_main_program()
    saved = p._name_scope
    p._name_scope = saved + "/" + prefix if saved else prefix
    try:
        yield
    finally:
        p._name_scope = saved


@contextlib.contextmanager
def _op_role_guard(program, role):
    saved = program._op_role
    program._op_role = role
    try:
        yield
    finally:
        program._op_role = saved


def CPUPlace(device=0):
    """A CPU place. Several CPU places (cpu_places(n)) are independent devices."""
    return core.Place.cpu(device)


def CUDAPlace(device):
    return core.Place.cuda(device)


def _check_place_count(n, what):
    if not isinstance(n, int) or n < 1 or n > core.max_world_size:
        raise ValueError("%s: %r places; a group has 1..%d places"
                         % (what, n, core.max_world_size))
    return n


def cpu_places(device_count=None):
    """device_count CPU places (default: the CPU_NUM environment variable, else 1)."""
    if device_count is None:
        env = os.environ.get("CPU_NUM", "1")
        try:
            device_count = int(env)
        except ValueError:
            raise ValueError("CPU_NUM=%r is not a number of places" % env) from None
    _check_place_count(device_count, "cpu_places")
    return [core.Place.cpu(i) for i in range(device_count)]


def cuda_places(device_ids=None):
    if device_ids is None:
        device_ids = range(core.cuda_device_count())
    return [core.Place.cuda(i) for i in device_ids]


def is_compiled_with_cuda():
    return core.is_compiled_with_cuda()
