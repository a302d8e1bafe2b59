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

// A row-sparse array from Python: (data [n, ...], indices int64 [n], height). The data is shared,
// the indices copied.
SelectedRows RowSparseOf(const py::tuple& t, const char* what) {
  if (t.size() != 3) Throw(InvalidArgument(what, " must be (data, indices, height)"));
  SelectedRows s;
  s.value = TensorViewOfArray(t[0].cast<py::array>(), what);
  auto idx = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(t[1]);
  if (!idx || idx.ndim() != 1) Throw(InvalidArgument(what, ": indices must be a 1-d int64 array"));
  s.rows.assign(idx.data(), idx.data() + idx.size());
  s.height = t[2].cast<int64_t>();
  return s;
}

DataType FloatType(const std::string& name) {
  if (name == "float32") return proto::FP32;
  if (name == "float64") return proto::FP64;
  Throw(InvalidArgument("a row-sparse key holds float32 or float64, not ", name));
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
      .def("init_row_sparse",
           [](KVStore& s, py::handle key, const py::tuple& value) {
             auto k = KeyOf(key);
             SelectedRows v = RowSparseOf(value, "a row-sparse init value");
             py::gil_scoped_release release;
             ThrowIfError(s.InitRowSparse(k, v));
           })
      .def(
          "init_sparse_table",
          [](KVStore& s, py::handle key, int64_t height, const std::vector<int64_t>& row_dims,
             const std::string& dtype, const std::string& init, double a, double b, uint64_t seed) {
            auto k = KeyOf(key);
            kvstore::SparseTableSpec spec;
            spec.dtype = FloatType(dtype);
            spec.height = height;
            spec.row_dims = DDim(row_dims);
            spec.init = ValueOrThrow(kvstore::RowInitializer::FromName(init, a, b, seed));
            py::gil_scoped_release release;
            ThrowIfError(s.InitSparseTable(k, spec));
          })
      .def("push_row_sparse",
           [](KVStore& s, py::handle key, const std::vector<py::tuple>& values, int priority) {
             auto k = KeyOf(key);
             std::vector<SelectedRows> in;
             for (const auto& v : values) in.push_back(RowSparseOf(v, "a pushed row-sparse value"));
             py::gil_scoped_release release;
             ThrowIfError(s.PushRowSparse(k, in, priority));
           })
      .def(
          "row_sparse_pull",
          [](KVStore& s, py::handle key, const std::vector<std::vector<int64_t>>& row_ids, int outs,
             int priority) {
            auto k = KeyOf(key);
            if (outs < 1) Throw(InvalidArgument("row_sparse_pull into ", outs, " outputs"));
            std::vector<SelectedRows> got(static_cast<size_t>(outs));
            std::vector<SelectedRows*> ptrs;
            for (auto& g : got) ptrs.push_back(&g);
            {
              py::gil_scoped_release release;
              ThrowIfError(s.RowSparsePull(k, row_ids, ptrs, priority));
            }
            py::list result;
            for (const auto& g : got) {
              py::array_t<int64_t> idx(static_cast<py::ssize_t>(g.rows.size()));
              std::copy(g.rows.begin(), g.rows.end(), idx.mutable_data());
              std::vector<py::ssize_t> shape(g.value.dims().begin(), g.value.dims().end());
              py::array data =
                  g.rows.empty()
                      ? py::array(py::dtype(g.value.dtype() == proto::FP32 ? "float32" : "float64"),
                                  shape)
                      : ArrayFromTensor(g.value);
              result.append(py::make_tuple(data, idx, g.height));
            }
            return result;
          },
          "[(data, indices, height)] per output: the unique ascending rows each row_ids list asks "
          "for")
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
