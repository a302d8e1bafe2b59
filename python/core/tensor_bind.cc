#include <cstring>

#include <pybind11/stl.h>

#include "framework/device_context.h"
#include "python/core/common.h"

namespace loom::python {

namespace {

DataType DtypeOfArray(const py::array& a, const std::string& what) {
  py::dtype dt = a.dtype();
  char kind = dt.kind();
  size_t size = static_cast<size_t>(dt.itemsize());
  if (kind == 'f' && size == 4) return proto::FP32;
  if (kind == 'f' && size == 8) return proto::FP64;
  if (kind == 'f' && size == 2) return proto::FP16;
  if (kind == 'i' && size == 4) return proto::INT32;
  if (kind == 'i' && size == 8) return proto::INT64;
  if (kind == 'b' && size == 1) return proto::BOOL;
  Throw(InvalidArgument(what, ": unsupported numpy dtype '", std::string(py::str(dt)),
                        "' (supported: float16, float32, float64, int32, int64, bool)"));
}

py::dtype NumpyDtype(DataType dt) {
  switch (dt) {
    case proto::FP32: return py::dtype("float32");
    case proto::FP64: return py::dtype("float64");
    case proto::FP16: return py::dtype("float16");
    case proto::INT32: return py::dtype("int32");
    case proto::INT64: return py::dtype("int64");
    case proto::BOOL: return py::dtype("bool");
  }
  return py::dtype("float32");
}

// The array in this machine's byte order: numpy arrays may hold big-endian data ('>f4', read
// from files or other machines); their bytes are swapped into a native copy, never misread.
py::array NativeByteOrder(const py::array& a) {
  const std::string order = py::str(a.dtype().attr("byteorder"));
  const bool big_host = py::module_::import("sys").attr("byteorder").cast<std::string>() == "big";
  if (order == ">" ? big_host : order != "<" || !big_host) return a;
  return a.attr("astype")(a.dtype().attr("newbyteorder")("="));
}

}  // namespace

void CheckPlaceAvailable(const Place& place, const std::string& what) {
  if (place.is_cpu()) return;
  int visible = CudaDeviceCount();
  if (place.device >= visible)
    Throw(FailedPrecondition(what, ": place ", place.ToString(), " is not available: ", visible,
                             " CUDA device(s) visible"));
}

Tensor TensorFromArray(const py::array& given, const Place& place, const std::string& what) {
  CheckPlaceAvailable(place, what);
  const py::array array = NativeByteOrder(given);
  DataType dt = DtypeOfArray(array, what);
  py::array c = py::array::ensure(array, py::array::c_style);
  if (!c) Throw(InvalidArgument(what, ": cannot make a C-contiguous array"));
  if (c.ndim() > DDim::kMaxRank)
    Throw(InvalidArgument(what, ": rank ", c.ndim(), " above the maximum ", DDim::kMaxRank));
  DDim dims;
  for (py::ssize_t i = 0; i < c.ndim(); ++i) dims.push_back(c.shape(i));
  Tensor t(dt, dims);
  void* dst = t.mutable_data(place, dt);
  if (t.nbytes()) MemCopy(place, dst, Place::CPU(), c.data(), t.nbytes());
  return t;
}

Tensor TensorViewOfArray(const py::array& given, const std::string& what) {
  const py::array array = NativeByteOrder(given);
  DataType dt = DtypeOfArray(array, what);
  bool contiguous = (array.flags() & py::array::c_style) && array.ndim() <= DDim::kMaxRank;
  bool aligned = reinterpret_cast<uintptr_t>(array.data()) % SizeOf(dt) == 0;
  if (!contiguous || !aligned || array.nbytes() == 0)
    return TensorFromArray(array, Place::CPU(), what);
  DDim dims;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) dims.push_back(array.shape(i));
  // The release callback may run on an executor thread without the GIL: take it to drop the
  // reference.
  auto* keep = new py::object(array);
  auto holder = std::make_shared<Allocation>(Place::CPU(), const_cast<void*>(array.data()),
                                             static_cast<size_t>(array.nbytes()), [keep](void*) {
                                               py::gil_scoped_acquire gil;
                                               delete keep;
                                             });
  Tensor t(dt, dims);
  t.ShareBuffer(std::move(holder), 0, Place::CPU());
  return t;
}

py::array ArrayFromTensor(const Tensor& t) {
  if (!t.initialized()) Throw(FailedPrecondition("tensor holds no data"));
  Tensor host = t;
  if (!t.place().is_cpu()) TensorCopy(t, Place::CPU(), &host);
  std::vector<py::ssize_t> shape(host.dims().begin(), host.dims().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(SizeOf(host.dtype()));
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  // The capsule owns a reference to the allocation, so the array stays valid on its own.
  auto* keep = new std::shared_ptr<Allocation>(host.holder());
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<Allocation>*>(p); });
  return py::array(NumpyDtype(host.dtype()), shape, strides, host.raw_data(), owner);
}

void RegisterTensor(py::module_& m) {
  py::class_<Place>(m, "Place")
      .def_static("cpu", &Place::CPU, py::arg("device") = 0)
      .def_static("cuda", &Place::CUDA, py::arg("device") = 0)
      .def_static("parse", [](const std::string& s) { return ValueOrThrow(ParsePlace(s)); })
      .def("is_cpu_place", &Place::is_cpu)
      .def("is_gpu_place", &Place::is_cuda)
      .def_property_readonly("device", [](const Place& p) { return p.device; })
      .def("__eq__", &Place::operator==)
      .def("__hash__", [](const Place& p) { return std::hash<Place>()(p); })
      .def("__repr__", &Place::ToString);

  py::class_<Tensor>(m, "Tensor", "A dense tensor on a place. numpy.array(t) copies it out.")
      .def(py::init<>())
      .def(
          "set",
          [](Tensor& t, const py::array& a, const Place& place) {
            LoD keep = t.lod();
            t = TensorFromArray(a, place, "Tensor.set");
            t.set_lod(std::move(keep));
          },
          py::arg("array"), py::arg("place") = Place::CPU(),
          "Replaces the tensor's contents with a copy of a numpy array on place (its LoD "
          "stays).")
      .def(
          "set_lod", [](Tensor& t, const LoD& lod) { t.set_lod(lod); }, py::arg("lod"),
          "Sets the LoD as offsets per level, e.g. [[0, 2, 5]] (checked when fed).")
      .def(
          "lod", [](const Tensor& t) { return t.lod(); }, "The LoD as offsets per level.")
      .def(
          "set_recursive_sequence_lengths",
          [](Tensor& t, const std::vector<std::vector<int64_t>>& lengths) {
            for (const auto& level : lengths)
              for (int64_t n : level)
                if (n < 0)
                  throw py::value_error("set_recursive_sequence_lengths: a negative length");
            t.set_lod(LengthsToLoD(lengths));
          },
          py::arg("recursive_sequence_lengths"),
          "Sets the LoD as sequence lengths per level, e.g. [[2, 3]].")
      .def(
          "recursive_sequence_lengths", [](const Tensor& t) { return LoDToLengths(t.lod()); },
          "The LoD as sequence lengths per level.")
      .def(
          "has_valid_recursive_sequence_lengths",
          [](const Tensor& t) {
            return CheckLoD(t.lod(), t.dims().size() ? t.dims()[0] : 0, "tensor").ok();
          },
          "Whether the LoD fits the tensor's rows.")
      .def("shape", [](const Tensor& t) { return t.dims().vec(); })
      .def("dtype", [](const Tensor& t) { return std::string(DataTypeName(t.dtype())); })
      .def("place", &Tensor::place)
      .def("_is_initialized", &Tensor::initialized)
      .def("numpy", &ArrayFromTensor)
      .def(
          "__array__", [](const Tensor& t, py::object) { return ArrayFromTensor(t); },
          py::arg("dtype") = py::none())
      .def("__repr__", [](const Tensor& t) {
        return "Tensor(" + TensorSummary(t) + (t.has_lod() ? ", lod " + LoDToString(t.lod()) : "") +
               ")";
      });

  m.def("cuda_device_count", &CudaDeviceCount);
}

}  // namespace loom::python
