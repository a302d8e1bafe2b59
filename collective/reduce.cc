#include "collective/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "collective/reduce_ops.h"

namespace loom::collective {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits;
  if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity or NaN (keep NaN quiet and non-zero)
    if (magnitude == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (magnitude < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    float abs_value;
    std::memcpy(&abs_value, &magnitude, sizeof abs_value);
    // Scaling by 2^24 is exact; nearbyint rounds half to even in the default rounding mode.
    const auto m = static_cast<uint32_t>(std::nearbyint(abs_value * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t half = ((magnitude >> 23) - 112u) << 10 | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // carry may bump the exponent
  return static_cast<uint16_t>(sign | half);
}

namespace {

// The loops take restrict-free pointers because dst may alias a; GCC and Clang still vectorize
// them (they version the loop on aliasing).
template <typename T, typename Fn>
void Apply(void* dst, const void* a, const void* b, size_t count, Fn fn) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < count; ++i) d[i] = fn(x[i], y[i]);
}

using internal::MaxOf;
using internal::MinOf;
using internal::WrappingAdd;
using internal::WrappingMultiply;

template <typename T>
void ReduceTyped(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return Apply<T>(dst, a, b, count, [](T x, T y) { return WrappingAdd(x, y); });
    case ReduceOp::kProd:
      return Apply<T>(dst, a, b, count, [](T x, T y) { return WrappingMultiply(x, y); });
    case ReduceOp::kMax: return Apply<T>(dst, a, b, count, [](T x, T y) { return MaxOf(x, y); });
    case ReduceOp::kMin: return Apply<T>(dst, a, b, count, [](T x, T y) { return MinOf(x, y); });
  }
}

template <typename Fn>
void ApplyHalf(void* dst, const void* a, const void* b, size_t count, Fn fn) {
  // Blocks of floats keep the conversion loops simple enough to vectorize.
  constexpr size_t kBlock = 256;
  float x[kBlock], y[kBlock];
  auto* d = static_cast<uint16_t*>(dst);
  const auto* ha = static_cast<const uint16_t*>(a);
  const auto* hb = static_cast<const uint16_t*>(b);
  for (size_t start = 0; start < count; start += kBlock) {
    const size_t n = std::min(kBlock, count - start);
    for (size_t i = 0; i < n; ++i) x[i] = HalfToFloat(ha[start + i]);
    for (size_t i = 0; i < n; ++i) y[i] = HalfToFloat(hb[start + i]);
    for (size_t i = 0; i < n; ++i) x[i] = fn(x[i], y[i]);
    for (size_t i = 0; i < n; ++i) d[start + i] = FloatToHalf(x[i]);
  }
}

void ReduceHalf(ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return ApplyHalf(dst, a, b, count, [](float x, float y) { return x + y; });
    case ReduceOp::kProd:
      return ApplyHalf(dst, a, b, count, [](float x, float y) { return x * y; });
    case ReduceOp::kMax:
      return ApplyHalf(dst, a, b, count, [](float x, float y) { return MaxOf(x, y); });
    case ReduceOp::kMin:
      return ApplyHalf(dst, a, b, count, [](float x, float y) { return MinOf(x, y); });
  }
}

template <typename T>
void DivideTyped(void* buf, size_t count, int nranks) {
  T* p = static_cast<T*>(buf);
  const T divisor = static_cast<T>(nranks);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

}  // namespace

void Reduce(const Reduction& r, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  switch (r.dtype) {
    case DataType::kFloat32: return ReduceTyped<float>(r.op, dst, a, b, count);
    case DataType::kFloat64: return ReduceTyped<double>(r.op, dst, a, b, count);
    case DataType::kFloat16: return ReduceHalf(r.op, dst, a, b, count);
    case DataType::kInt32: return ReduceTyped<int32_t>(r.op, dst, a, b, count);
    case DataType::kInt64: return ReduceTyped<int64_t>(r.op, dst, a, b, count);
  }
}

void Finalize(const Reduction& r, void* buf, size_t count, int nranks) {
  if (r.op != ReduceOp::kAvg || count == 0) return;
  switch (r.dtype) {
    case DataType::kFloat32: return DivideTyped<float>(buf, count, nranks);
    case DataType::kFloat64: return DivideTyped<double>(buf, count, nranks);
    case DataType::kInt32: return DivideTyped<int32_t>(buf, count, nranks);
    case DataType::kInt64: return DivideTyped<int64_t>(buf, count, nranks);
    case DataType::kFloat16: {
      auto* p = static_cast<uint16_t*>(buf);
      const float divisor = static_cast<float>(nranks);
      for (size_t i = 0; i < count; ++i) p[i] = FloatToHalf(HalfToFloat(p[i]) / divisor);
      return;
    }
  }
}

}  // namespace loom::collective
