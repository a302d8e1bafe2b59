"""fluid.load_op_library: a library of custom ops compiled against Loom's headers
(loom.sysconfig) registers ops every program can use; bad libraries are errors naming them."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import loom as fluid

SCALE_OP = r"""
#include "operators/common.h"
namespace {
loom::Status InferShape(loom::InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "Out");
  return loom::Status::OK();
}
template <typename T>
loom::Status Kernel(const loom::KernelContext& ctx) {
  const loom::Tensor& x = ctx.Input("X");
  loom::Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  T* o = out->mutable_data<T>(ctx.place());
  const T k = static_cast<T>(ctx.Attr<float>("factor")) * T(MULTIPLIER);
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = k * x.data<T>()[i];
  return loom::Status::OK();
}
}  // namespace
#define REGISTER(type) LOOM_REGISTER_OP(type)  // expands OP_TYPE first
REGISTER(OP_TYPE)
    .Doc("Out = factor * X")
    .Input("X", "x")
    .Output("Out", "out")
    .Attr<float>("factor", 2.f, "the factor")
    .InferShape(InferShape)
    .Kernel(loom::Place::kCPU, loom::proto::FP32, Kernel<float>)
    .Kernel(loom::Place::kCPU, loom::proto::FP64, Kernel<double>);
"""

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")


def _compile(tmp_path, name, source, defines=()):
    src = tmp_path / (name + ".cc")
    src.write_text(source)
    lib = tmp_path / ("lib%s.so" % name)
    cmd = ["g++", "-std=c++17", "-O1", "-fPIC", "-shared", str(src), "-o", str(lib)]
    cmd += ["-D%s" % d for d in defines]
    cmd += fluid.sysconfig.compile_flags().split() + fluid.sysconfig.link_flags().split()
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return str(lib)


def _run_scale(op_type, factor):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.layers.data("x", [3], dtype="float64")
        helper = fluid.layers.LayerHelper(op_type)
        out = helper.create_variable_for_type_inference("float64")
        helper.append_op(op_type, inputs={"X": x}, outputs={"Out": out},
                         attrs={"factor": factor})
    x = np.arange(6, dtype="float64").reshape(2, 3)
    return x, fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": x}, fetch_list=[out])[0]


def test_a_custom_op_library_registers_ops_programs_use(tmp_path):
    lib = _compile(tmp_path, "scale_a", SCALE_OP, ["OP_TYPE=custom_scale_a", "MULTIPLIER=1"])
    assert fluid.load_op_library(lib) == ["custom_scale_a"]
    x, out = _run_scale("custom_scale_a", 3.0)
    np.testing.assert_array_equal(out, 3 * x)
    # Another library registering the same type is refused; the first op stays.
    again = _compile(tmp_path, "scale_b", SCALE_OP, ["OP_TYPE=custom_scale_a", "MULTIPLIER=10"])
    with pytest.raises(RuntimeError, match="libscale_b.so: op 'custom_scale_a' registered twice"):
        fluid.load_op_library(again)
    x, out = _run_scale("custom_scale_a", 3.0)
    np.testing.assert_array_equal(out, 3 * x)


def test_bad_libraries_are_errors_naming_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="no library .*missing.so"):
        fluid.load_op_library(str(tmp_path / "missing.so"))
    empty = _compile(tmp_path, "empty", "int loom_custom_nothing() { return 0; }\n")
    with pytest.raises(RuntimeError, match="libempty.so registered no op"):
        fluid.load_op_library(empty)
    undefined = _compile(tmp_path, "undefined",
                         "int missing_function();\nint f() { return missing_function(); }\n")
    with pytest.raises(OSError, match="cannot load .*libundefined.so.*missing_function"):
        fluid.load_op_library(undefined)


def test_sysconfig_points_at_this_build():
    lib = fluid.sysconfig.get_lib()
    assert os.path.isfile(os.path.join(lib, "libloom.so"))
    assert any(os.path.isfile(os.path.join(d, "operators", "common.h"))
               for d in fluid.sysconfig.get_include())
