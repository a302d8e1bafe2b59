// The hook through which the py_func op calls Python: the Python module installs a runner at
// import (python/core/py_func_bind.cc); without one (a program run by the C++ CLI) py_func is
// an error saying so.
#pragma once

#include <functional>
#include <vector>

#include "base/status.h"
#include "framework/tensor.h"

namespace loom::ops {

// Calls callable `id` with the inputs; fills `outs` (one tensor per output variable).
using PyFuncRunner =
    std::function<Status(int id, const std::vector<Tensor>& ins, std::vector<Tensor>* outs)>;

void SetPyFuncRunner(PyFuncRunner runner);

}  // namespace loom::ops
