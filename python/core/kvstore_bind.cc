// Bindings of the KVStore (kvstore/kvstore.h): loom.kvstore drives them with numpy arrays, shared
// with the store's tensors (never copied on the way in or out).
#include <pybind11/stl.h>

#include "kvstore/dist.h"
#include "kvstore/kvstore.h"
#include "python/core/common.h"

namespace loom::python {
namespace {

kvstore::Key KeyOf(const py::handle& key) {
  if (py::isinstance<py::str>(key)) return kvstore::Key::Str(key.cast<std::string>());
  if (py::isinstance<py::int_>(key) && !py::isinstance<py::bool_>(key))
    return kvstore::Key::Int(key.cast<int64_t>());
  Throw(InvalidArgument("a KVStore key is an int or a str, got ",
                        py::str(py::type::of(key)).cast<std::string>()));
}

std::vector<Tensor> Inputs(const std::vector<py::array>& arrays, const char* what) {
  std::vector<Tensor> ts;
  for (const auto& a : arrays) ts.push_back(TensorViewOfArray(a, what));
  return ts;
}

// Outputs are written in place: they must be writable, C-contiguous and aligned numpy arrays.
std::vector<Tensor> Outputs(const std::vector<py::array>& arrays) {
  std::vector<Tensor> ts;
  for (const auto& a : arrays) {
    if (!a.writeable() || !(a.flags() & py::array::c_style) ||
        reinterpret_cast<uintptr_t>(a.data()) % std::max<py::ssize_t>(1, a.itemsize()) != 0)
      Throw(InvalidArgument("a pull output must be a writable, C-contiguous numpy array"));
    ts.push_back(TensorViewOfArray(a, "a pull output"));
  }
  return ts;
}

std::vector<Tensor*> Pointers(std::vector<Tensor>& ts) {
  std::vector<Tensor*> p;
  for (auto& t : ts) p.push_back(&t);
  return p;
}

}  // namespace

void RegisterKVStore(py::module_& m) {
  using kvstore::KVStore;
  py::class_<KVStore>(m, "KVStore")
      .def_static(
          "create", [](const std::string& type) { return ValueOrThrow(KVStore::Create(type)); },
          py::arg("type"))
      .def_property_readonly("type", &KVStore::type)
      .def_property_readonly("rank", &KVStore::rank)
      .def_property_readonly("num_workers", &KVStore::num_workers)
      .def("init",
           [](KVStore& s, py::handle key, const py::array& value) {
             auto k = KeyOf(key);
             Tensor v = TensorViewOfArray(value, "an init value");
             py::gil_scoped_release release;
             ThrowIfError(s.Init(k, v));
           })
      .def("push",
           [](KVStore& s, py::handle key, const std::vector<py::array>& values, int priority) {
             auto k = KeyOf(key);
             auto in = Inputs(values, "a pushed value");
             py::gil_scoped_release release;
             ThrowIfError(s.Push(k, in, priority));
           })
      .def("pull",
           [](KVStore& s, py::handle key, const std::vector<py::array>& outs, int priority) {
             auto k = KeyOf(key);
             auto out = Outputs(outs);
             py::gil_scoped_release release;
             ThrowIfError(s.Pull(k, Pointers(out), priority));
           })
      .def("pushpull",
           [](KVStore& s, py::handle key, const std::vector<py::array>& values,
              const std::vector<py::array>& outs, int priority) {
             auto k = KeyOf(key);
             auto in = Inputs(values, "a pushed value");
             auto out = Outputs(outs);
             py::gil_scoped_release release;
             ThrowIfError(s.PushPull(k, in, Pointers(out), priority));
           })
      .def("set_optimizer",
           [](KVStore& s, const std::string& name, const std::map<std::string, double>& params) {
             py::gil_scoped_release release;
             ThrowIfError(s.SetOptimizer({name, params}));
           })
      .def("barrier",
           [](KVStore& s) {
             py::gil_scoped_release release;
             ThrowIfError(s.Barrier());
           })
      .def_property_readonly("client_rank", &KVStore::client_rank)
      .def_property_readonly("client_size", &KVStore::client_size)
      .def("client_allreduce",
           [](KVStore& s, const py::array& in, const py::array& out) {
             Tensor i = TensorViewOfArray(in, "an allreduce input");
             auto o = Outputs({out});
             py::gil_scoped_release release;
             ThrowIfError(s.ClientAllReduce(i, &o[0]));
           })
      .def("client_broadcast",
           [](KVStore& s, const py::array& arr, int root) {
             auto t = Outputs({arr});
             py::gil_scoped_release release;
             ThrowIfError(s.ClientBroadcast(&t[0], root));
           })
      .def("close", [](KVStore& s) {
        py::gil_scoped_release release;
        ThrowIfError(s.Close());
      });
  m.def(
      "kvstore_launch_role", [] { return ValueOrThrow(kvstore::LaunchRole()); },
      "'server', 'worker' or '' (no parameter-server role in the environment)");
  m.def(
      "kvstore_serve",
      [](const std::string& type) {
        py::gil_scoped_release release;
        ThrowIfError(kvstore::RunKVServer(type));
      },
      py::arg("type"), "Serves a dist_sync / dist_async job until every worker has closed.");
}

}  // namespace loom::python
