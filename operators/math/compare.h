// The comparison (less_than, ..., not_equal) and logical (logical_and, _or, _xor, _not)
// functors, shared by the CPU kernels (compare.cc) and the CUDA ones (compare_cuda.cu).
#pragma once

#include "base/host_device.h"

namespace loom::ops::cmp {

#define LOOM_BINARY_PREDICATE(NAME, EXPR)      \
  struct NAME {                                \
    template <typename T>                      \
    LOOM_HOST_DEVICE static bool F(T a, T b) { \
      return EXPR;                             \
    }                                          \
  };
LOOM_BINARY_PREDICATE(LessThan, a < b)
LOOM_BINARY_PREDICATE(LessEqual, a <= b)
LOOM_BINARY_PREDICATE(GreaterThan, a > b)
LOOM_BINARY_PREDICATE(GreaterEqual, a >= b)
LOOM_BINARY_PREDICATE(Equal, a == b)
LOOM_BINARY_PREDICATE(NotEqual, a != b)
LOOM_BINARY_PREDICATE(And, static_cast<bool>(a) && static_cast<bool>(b))
LOOM_BINARY_PREDICATE(Or, static_cast<bool>(a) || static_cast<bool>(b))
LOOM_BINARY_PREDICATE(Xor, static_cast<bool>(a) != static_cast<bool>(b))
#undef LOOM_BINARY_PREDICATE

}  // namespace loom::ops::cmp
