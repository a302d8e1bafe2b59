// Shared by the binding files: Status -> Python exception, and numpy <-> Tensor.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "base/status.h"
#include "executor/executor.h"
#include "framework/tensor.h"

namespace loom::python {

namespace py = pybind11;

// Raised from C++ with the Status; translated into loom.core.<Code>Error (a subclass of
// loom.core.LoomError and of the matching builtin: ValueError, LookupError, OSError, ...).
// (base/status.h's StatusError: the one exception type that carries a Status.)
using StatusException = StatusError;

[[noreturn]] inline void Throw(const Status& st) { throw StatusError(st); }
inline void ThrowIfError(const Status& st) {
  if (!st.ok()) Throw(st);
}
template <typename T>
T ValueOrThrow(StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return std::move(v).value();
}

void RegisterErrors(py::module_& m);
void RegisterTensor(py::module_& m);
void RegisterParallel(py::module_& m);
void RegisterDistributed(py::module_& m);
void RegisterPyFunc(py::module_& m);
void RegisterKVStore(py::module_& m);
void RegisterSim(py::module_& m);

// Throws FailedPrecondition (naming `what`) when place is a CUDA place this process cannot use:
// no CUDA in the build, or no such device.
void CheckPlaceAvailable(const Place& place, const std::string& what);
// A host copy of an ndarray as a tensor on place (dtype from the array; C order enforced).
Tensor TensorFromArray(const py::array& array, const Place& place, const std::string& what);
// A CPU tensor sharing the ndarray's memory when it is C-contiguous and aligned (the array is
// kept alive by the tensor); otherwise a copy, as TensorFromArray.
Tensor TensorViewOfArray(const py::array& array, const std::string& what);
// Feeds of Executor.run: names -> ndarrays (or core.Tensor) as tensors on place.
FeedMap FeedsFromPy(const py::dict& feed, const Place& place);
// A numpy view of a CPU tensor (keeps the allocation alive); device tensors are copied.
py::array ArrayFromTensor(const Tensor& t);

}  // namespace loom::python
