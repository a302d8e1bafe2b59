// The Python side of the py_func op: a registry of callables (ids are their places in it) and
// the runner operators/nn/py_func.cc calls: it takes the GIL, hands the inputs to the callable
// as numpy arrays (copies) and turns what it returns (an array, a list / tuple of them, or None
// for an output it leaves unset) into tensors.
#include <pybind11/stl.h>

#include "operators/nn/py_func.h"
#include "python/core/common.h"

namespace loom::python {
namespace {

std::vector<py::object>& Callables() {
  static auto* callables = new std::vector<py::object>();
  return *callables;
}

Status RunPyFunc(int id, const std::vector<Tensor>& ins, std::vector<Tensor>* outs) {
  py::gil_scoped_acquire gil;
  if (id < 0 || id >= static_cast<int>(Callables().size()))
    return InvalidArgument("py_func: no callable ", id, " is registered in this process");
  try {
    py::list args;
    for (const Tensor& t : ins)
      args.append(t.initialized() ? ArrayFromTensor(t).attr("copy")() : py::object(py::none()));
    py::object r = Callables()[static_cast<size_t>(id)](*args);
    std::vector<py::object> values;
    if (r.is_none()) {
    } else if (py::isinstance<py::list>(r) || py::isinstance<py::tuple>(r)) {
      for (py::handle h : r) values.push_back(py::reinterpret_borrow<py::object>(h));
    } else {
      values.push_back(r);
    }
    if (values.size() != outs->size())
      return InvalidArgument("py_func: the callable returned ", values.size(), " values for ",
                             outs->size(), " outputs");
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].is_none()) continue;
      py::array a = py::array::ensure(values[i]);
      if (!a) return InvalidArgument("py_func: output ", i, " is not an array");
      (*outs)[i] = TensorFromArray(py::array(a.attr("copy")()), Place::CPU(), "py_func output");
    }
    return Status::OK();
  } catch (py::error_already_set& e) {
    return InvalidArgument("py_func: the callable raised ", e.what());
  } catch (StatusError& e) {
    return e.status();
  }
}

}  // namespace

void RegisterPyFunc(py::module_& m) {
  ops::SetPyFuncRunner(RunPyFunc);
  m.def(
      "register_py_func",
      [](py::object f) {
        Callables().push_back(std::move(f));
        return static_cast<int>(Callables().size()) - 1;
      },
      py::arg("callable"), "Registers a callable for py_func; returns its id.");
  // The callables go before the interpreter does (they may hold numpy objects).
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    ops::SetPyFuncRunner(nullptr);
    Callables().clear();
  }));
}

}  // namespace loom::python
