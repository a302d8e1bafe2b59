"""Loom: a dataflow-graph training framework with a PaddlePaddle Fluid 1.x compatible API.

    import loom as fluid
    x = fluid.layers.data(name="x", shape=[784], dtype="float32")
    ...
"""
from . import core

_refused = core.take_op_registration_errors()
if _refused:  # two ops of libloom under one type: a build error, reported on import
    raise ImportError("loom: " + "; ".join(_refused))
from .framework import (Program, Block, Variable, Parameter, program_guard, name_scope,
                        default_main_program, default_startup_program, CPUPlace, CUDAPlace,
                        cpu_places, cuda_places, is_compiled_with_cuda)
from .executor import Executor
from .scope import Scope, global_scope, scope_guard
from .param_attr import ParamAttr, WeightNormParamAttr
from .backward import append_backward, gradients
from .data_feeder import DataFeeder
from .compiler import CompiledProgram, BuildStrategy, ExecutionStrategy, ParallelExecutor
from . import clip, initializer, layers, optimizer, io, reader, regularizer, unique_name
from . import nets, metrics, average, dataset
from .dataset import DatasetFactory
from .average import WeightedAverage
from . import install_check, profiler, sysconfig
from .sysconfig import load_op_library
from ._flags import get_flags, set_flags
from . import transpiler
from .transpiler import DistributeTranspiler, DistributeTranspilerConfig
from .layers.io import _data as data
from .layers.nn import _embedding_v2 as embedding
from .lod_tensor import LoDTensor, LoDTensorArray, create_lod_tensor, create_random_int_lodtensor
from .io import save, load

Tensor = core.Tensor
# Fluid spells places as classes of its core module too (fluid.core.CPUPlace()).
core.CPUPlace = CPUPlace
core.CUDAPlace = CUDAPlace
# Helpers Fluid's own tests call on core.
core.get_cuda_device_count = core.cuda_device_count


def _is_float16_supported(place):
    """Whether float16 kernels run on place: CUDA places of a GPU this process sees (Loom's
    float16 kernels are CUDA kernels); never a CPU place."""
    if not isinstance(place, core.Place):
        raise TypeError("is_float16_supported: expected a place (CPUPlace() or CUDAPlace(i)), "
                        "got %r" % (place,))
    return place.is_gpu_place() and core.is_compiled_with_cuda() and \
        place.device < core.cuda_device_count()


core.is_float16_supported = _is_float16_supported
__version__ = core.__version__
# The Fluid API Loom implements: the version require_version compares against.
FLUID_API_VERSION = "1.8.0"


def _version_tuple(v, what):
    if not isinstance(v, str):
        raise TypeError("require_version: %s must be a string, got %r" % (what, v))
    parts = v.split(".")
    if not 1 <= len(parts) <= 4 or not all(p.isdigit() for p in parts):
        raise ValueError("require_version: %s %r is not a version like '1.6' or '1.6.0'"
                         % (what, v))
    return tuple(int(p) for p in parts) + (0,) * (4 - len(parts))


def require_version(min_version, max_version=None):
    """Fails unless the Fluid API Loom implements (FLUID_API_VERSION, 1.8.0) lies in
    [min_version, max_version]: scripts written for Fluid state the version they need, and
    Loom answers for the Fluid API it provides. Versions are strings of up to four dot
    separated numbers; a bad one is a TypeError or ValueError naming it."""
    lo = _version_tuple(min_version, "min_version")
    hi = None if max_version is None else _version_tuple(max_version, "max_version")
    if hi is not None and hi < lo:
        raise ValueError("require_version: max_version %s is below min_version %s"
                         % (max_version, min_version))
    have = _version_tuple(FLUID_API_VERSION, "FLUID_API_VERSION")
    if have < lo or (hi is not None and have > hi):
        raise Exception("require_version: this program needs the Fluid API %s%s, and Loom "
                        "implements Fluid %s" % (
                            min_version, "" if hi is None else " to %s" % max_version,
                            FLUID_API_VERSION))


def one_hot(input, depth, allow_out_of_range=False):
    """fluid.one_hot (Fluid 1.6+): Out has input's dims plus one of depth (ids [N, 1] give
    [N, 1, depth]; fluid.layers.one_hot replaces a last dim of 1)."""
    shape = list(input.shape)
    out = layers.one_hot(layers.unsqueeze(input, [len(shape)]), depth, allow_out_of_range)
    return out


__all__ = [
    "core", "Program", "Block", "Variable", "Parameter", "program_guard", "name_scope",
    "default_main_program", "default_startup_program", "CPUPlace", "CUDAPlace", "cpu_places",
    "cuda_places", "is_compiled_with_cuda", "Executor", "global_scope", "scope_guard", "Scope",
    "ParamAttr", "append_backward", "gradients", "DataFeeder", "initializer", "layers",
    "optimizer", "io", "reader", "regularizer", "unique_name", "clip", "CompiledProgram",
    "BuildStrategy", "ExecutionStrategy", "ParallelExecutor", "transpiler", "DistributeTranspiler",
    "DistributeTranspilerConfig", "data", "embedding", "nets", "metrics", "one_hot", "Tensor",
    "save", "load", "LoDTensor", "LoDTensorArray", "create_lod_tensor",
    "create_random_int_lodtensor",
    "memory_optimize", "release_memory", "install_check", "profiler", "get_flags", "set_flags",
    "WeightNormParamAttr", "WeightedAverage", "DatasetFactory", "dataset", "average",
    "require_version", "load_op_library", "sysconfig", "in_dygraph_mode", "disable_dygraph",
    "disable_imperative"
]


def in_dygraph_mode():
    """False: Loom builds static programs only (Fluid scripts branch on this)."""
    return False


def disable_dygraph():
    """Fluid's switch to static-graph mode: Loom is always in it, so there is nothing to do.
    (enable_dygraph does not exist: Loom has no dynamic graph mode.)"""


disable_imperative = disable_dygraph


def memory_optimize(input_program, skip_opt_set=None, print_log=False, level=0,
                    skip_grads=True):
    """Fluid's memory_optimize: accepted and a no-op. Loom does not rewrite programs so that
    variables share memory; its CPU allocator keeps freed blocks for reuse instead
    (docs/ARCHITECTURE.md, allocator.h)."""
    return None


def release_memory(input_program, skip_opt_set=None):
    """Fluid's release_memory: accepted and a no-op (see memory_optimize)."""
    return None
