// Tensor: dims, dtype, place and a shared allocation (+ byte offset). Copying a Tensor shares
// its memory; use TensorCopy for a deep copy. Not thread-safe: one writer at a time.
#pragma once

#include <memory>

#include "framework/allocator.h"
#include "framework/data_type.h"
#include "framework/ddim.h"
#include "framework/lod.h"
#include "framework/place.h"

namespace loom {

class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, const DDim& dims) : dims_(dims), dtype_(dtype) {}

  const DDim& dims() const { return dims_; }
  void Resize(const DDim& dims) { dims_ = dims; }
  int64_t numel() const { return dims_.numel(); }
  DataType dtype() const { return dtype_; }
  void set_dtype(DataType dtype) { dtype_ = dtype; }
  const Place& place() const { return place_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  // True once memory has been allocated (or shared) for the current dims.
  bool initialized() const { return holder_ != nullptr; }

  // Allocates (or reuses) memory for dims() elements of dtype on place.
  void* mutable_data(const Place& place, DataType dtype);
  template <typename T>
  T* mutable_data(const Place& place) {
    return static_cast<T*>(mutable_data(place, ToDataType<T>()));
  }
  // Data of an initialized tensor; the dtype must match T (checked).
  template <typename T>
  const T* data() const {
    CheckTypeAndInit(ToDataType<T>());
    return reinterpret_cast<const T*>(static_cast<const char*>(holder_->ptr()) + offset_);
  }
  template <typename T>
  T* data() {
    CheckTypeAndInit(ToDataType<T>());
    return reinterpret_cast<T*>(static_cast<char*>(holder_->ptr()) + offset_);
  }
  const void* raw_data() const {
    return holder_ ? static_cast<const char*>(holder_->ptr()) + offset_ : nullptr;
  }
  void* raw_data() { return holder_ ? static_cast<char*>(holder_->ptr()) + offset_ : nullptr; }

  // Rows [begin, end) along dim 0, sharing memory.
  Tensor Slice(int64_t begin, int64_t end) const;
  void ShareDataWith(const Tensor& other) { *this = other; }
  const std::shared_ptr<Allocation>& holder() const { return holder_; }
  // Uses caller-provided memory (e.g. a fused buffer) at a byte offset.
  void ShareBuffer(std::shared_ptr<Allocation> holder, size_t offset, const Place& place);

  // How the rows group into sequences (framework/lod.h); empty for plain rows. Copies of a
  // tensor carry it; Slice does not (a row range of a LoD tensor has no LoD of its own).
  const LoD& lod() const { return lod_; }
  void set_lod(LoD lod) { lod_ = std::move(lod); }
  bool has_lod() const { return !lod_.empty(); }

 private:
  void CheckTypeAndInit(DataType want) const;

  DDim dims_;
  DataType dtype_ = proto::FP32;
  Place place_;
  std::shared_ptr<Allocation> holder_;
  size_t offset_ = 0;
  LoD lod_;
};

// Deep copy of src onto dst_place (dims, dtype and LoD follow src).
void TensorCopy(const Tensor& src, const Place& dst_place, Tensor* dst);
// "float32[2, 3] {1, 2, ...}": dtype, dims and the first values (copied to host if needed).
std::string TensorSummary(const Tensor& t, int max_elems = 8);

}  // namespace loom
