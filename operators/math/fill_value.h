// The value fill_constant writes, shared by its CPU and CUDA kernels and its shape inference:
// the `str_value` attribute when set (exact for any int64, as Fluid's str_value), else `value`
// (a float attribute: exact only up to 2^24). A value the dtype cannot hold is an error, never
// a silent change (2^40 into int32, nan into an integer, 1.5 into int64).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "base/status.h"
#include "framework/data_type.h"

namespace loom::ops {

struct FillValue {
  int64_t integer = 0;  // integral dtypes
  double real = 0;      // floating dtypes
};

inline StatusOr<FillValue> ResolveFillValue(const std::string& str_value, float value,
                                            DataType dtype) {
  const bool integral = dtype == proto::INT32 || dtype == proto::INT64 || dtype == proto::BOOL;
  FillValue v;
  if (integral) {
    if (!str_value.empty()) {
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(str_value.c_str(), &end, 10);
      if (*end != '\0' || errno == ERANGE)
        return InvalidArgument("str_value '", str_value, "' is not an integer ",
                               DataTypeName(dtype), " can hold");
      v.integer = x;
    } else {
      if (!std::isfinite(value) || value != std::trunc(value) || std::fabs(value) > 9.2e18f)
        return InvalidArgument("value ", value, " is not an integer ", DataTypeName(dtype),
                               " can hold");
      v.integer = static_cast<int64_t>(value);
    }
    if (dtype == proto::INT32 && (v.integer < std::numeric_limits<int32_t>::min() ||
                                  v.integer > std::numeric_limits<int32_t>::max()))
      return InvalidArgument("value ", v.integer, " does not fit int32");
    if (dtype == proto::BOOL && v.integer != 0 && v.integer != 1)
      return InvalidArgument("value ", v.integer, " is not a bool (0 or 1)");
    return v;
  }
  if (!str_value.empty()) {
    char* end = nullptr;
    v.real = std::strtod(str_value.c_str(), &end);
    if (*end != '\0') return InvalidArgument("str_value '", str_value, "' is not a number");
  } else {
    v.real = value;
  }
  return v;
}

}  // namespace loom::ops
