"""Loom: a dataflow-graph training framework with a PaddlePaddle Fluid 1.x compatible API.

    import loom as fluid
    x = fluid.layers.data(name="x", shape=[784], dtype="float32")
    ...
"""
from . import core
from .framework import (Program, Block, Variable, Parameter, program_guard, name_scope,
                        default_main_program, default_startup_program, CPUPlace, CUDAPlace,
                        cpu_places, cuda_places, is_compiled_with_cuda)
from .executor import Executor, global_scope, scope_guard, Scope
from .param_attr import ParamAttr
from .backward import append_backward, gradients
from .data_feeder import DataFeeder
from .compiler import CompiledProgram, BuildStrategy, ExecutionStrategy, ParallelExecutor
from . import clip, initializer, layers, optimizer, io, reader, regularizer, unique_name
from . import nets
from . import transpiler
from .transpiler import DistributeTranspiler, DistributeTranspilerConfig
from .layers import _data as data

__version__ = core.__version__

__all__ = [
    "core", "Program", "Block", "Variable", "Parameter", "program_guard", "name_scope",
    "default_main_program", "default_startup_program", "CPUPlace", "CUDAPlace", "cpu_places",
    "cuda_places", "is_compiled_with_cuda", "Executor", "global_scope", "scope_guard", "Scope",
    "ParamAttr", "append_backward", "gradients", "DataFeeder", "initializer", "layers",
    "optimizer", "io", "reader", "regularizer", "unique_name", "clip", "CompiledProgram",
    "BuildStrategy", "ExecutionStrategy", "ParallelExecutor", "transpiler",
    "DistributeTranspiler", "DistributeTranspilerConfig", "data", "nets",
]
