// Element types of tensors and their C++ counterparts.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "base/status.h"
#include "framework/framework.pb.h"

namespace loom {

using DataType = proto::DataType;

// IEEE half precision stored as bits; host-side conversions only (CUDA kernels use __half).
struct float16 {
  uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
};

size_t SizeOf(DataType dtype);
const char* DataTypeName(DataType dtype);
// Parses "float32"/"fp32", "float64", "float16", "int32", "int64", "bool".
StatusOr<DataType> ParseDataType(const std::string& name);

template <typename T>
struct DataTypeTrait;
template <>
struct DataTypeTrait<float> {
  static constexpr DataType value = proto::FP32;
};
template <>
struct DataTypeTrait<double> {
  static constexpr DataType value = proto::FP64;
};
template <>
struct DataTypeTrait<float16> {
  static constexpr DataType value = proto::FP16;
};
template <>
struct DataTypeTrait<int32_t> {
  static constexpr DataType value = proto::INT32;
};
template <>
struct DataTypeTrait<int64_t> {
  static constexpr DataType value = proto::INT64;
};
template <>
struct DataTypeTrait<bool> {
  static constexpr DataType value = proto::BOOL;
};

template <typename T>
constexpr DataType ToDataType() {
  return DataTypeTrait<T>::value;
}

inline bool IsFloatingPoint(DataType t) {
  return t == proto::FP32 || t == proto::FP64 || t == proto::FP16;
}

}  // namespace loom
