// Internal: the element operations of the reductions, shared by the host kernels (reduce.cc) and
// the CUDA P2P transport's device kernels (transport/cuda_reduce.cu), so both give the same bits:
// integer sums and products wrap around (two's complement) instead of overflowing into undefined
// behaviour, and max/min are written as std::max/std::min are (NaNs come out alike).
#pragma once

#include <type_traits>

#include "base/host_device.h"

namespace loom::collective::internal {

template <typename T>
LOOM_HOST_DEVICE T WrappingAdd(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
  } else {
    return x + y;
  }
}

template <typename T>
LOOM_HOST_DEVICE T WrappingMultiply(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
  } else {
    return x * y;
  }
}

template <typename T>
LOOM_HOST_DEVICE T MaxOf(T x, T y) {
  return (x < y) ? y : x;
}

template <typename T>
LOOM_HOST_DEVICE T MinOf(T x, T y) {
  return (y < x) ? y : x;
}

}  // namespace loom::collective::internal
