#include "framework/tensor.h"

#include <sstream>

namespace loom {

void* Tensor::mutable_data(const Place& place, DataType dtype) {
  int64_t n = dims_.numel();
  LOOM_CHECK(n >= 0, "mutable_data on a tensor with unknown dims ", dims_.ToString());
  if (static_cast<uint64_t>(n) > SIZE_MAX / SizeOf(dtype))
    throw StatusError(ResourceExhausted("a tensor of dims ", dims_.ToString(), " and dtype ",
                                        DataTypeName(dtype), " holds more bytes than memory has"));
  size_t bytes = static_cast<size_t>(n) * SizeOf(dtype);
  if (!holder_ || holder_->place() != place || holder_->size() < offset_ + bytes) {
    holder_ = std::make_shared<Allocation>(place, bytes);
    offset_ = 0;
  }
  dtype_ = dtype;
  place_ = place;
  return static_cast<char*>(holder_->ptr()) + offset_;
}

void Tensor::CheckTypeAndInit(DataType want) const {
  LOOM_CHECK(holder_ != nullptr, "tensor data read before it was allocated");
  LOOM_CHECK(dtype_ == want, "tensor holds ", DataTypeName(dtype_), ", read as ",
             DataTypeName(want));
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  LOOM_CHECK(dims_.size() > 0 && begin >= 0 && begin <= end && end <= dims_[0], "slice [", begin,
             ", ", end, ") of dims ", dims_.ToString());
  Tensor t = *this;
  t.dims_[0] = end - begin;
  t.lod_.clear();
  if (holder_)
    t.offset_ =
        offset_ + static_cast<size_t>(begin * dims_.product(1, dims_.size())) * SizeOf(dtype_);
  return t;
}

void Tensor::ShareBuffer(std::shared_ptr<Allocation> holder, size_t offset, const Place& place) {
  holder_ = std::move(holder);
  offset_ = offset;
  place_ = place;
}

void TensorCopy(const Tensor& src, const Place& dst_place, Tensor* dst) {
  dst->Resize(src.dims());
  void* out = dst->mutable_data(dst_place, src.dtype());
  if (src.nbytes() > 0) MemCopy(dst_place, out, src.place(), src.raw_data(), src.nbytes());
  dst->set_lod(src.lod());
}

std::string TensorSummary(const Tensor& t, int max_elems) {
  std::ostringstream os;
  os << DataTypeName(t.dtype()) << t.dims().ToString();
  if (!t.initialized()) return os.str() + " (uninitialized)";
  Tensor host = t;
  if (!t.place().is_cpu()) TensorCopy(t, Place::CPU(), &host);
  os << " {";
  int64_t n = std::min<int64_t>(t.numel(), max_elems);
  for (int64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    switch (t.dtype()) {
      case proto::FP32: os << host.data<float>()[i]; break;
      case proto::FP64: os << host.data<double>()[i]; break;
      case proto::FP16: os << static_cast<float>(host.data<float16>()[i]); break;
      case proto::INT32: os << host.data<int32_t>()[i]; break;
      case proto::INT64: os << host.data<int64_t>()[i]; break;
      case proto::BOOL: os << (host.data<bool>()[i] ? "true" : "false"); break;
    }
  }
  if (t.numel() > n) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace loom
