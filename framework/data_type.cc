#include "framework/data_type.h"

namespace loom {

float16::float16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) {  // inf / nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  } else if (exp >= 31) {
    bits = static_cast<uint16_t>(sign | 0x7c00u);
  } else if (exp <= 0) {
    if (exp < -10) {
      bits = static_cast<uint16_t>(sign);
    } else {
      mant |= 0x800000u;
      uint32_t shift = static_cast<uint32_t>(14 - exp);
      uint32_t half = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1);
      uint32_t mid = 1u << (shift - 1);
      if (rem > mid || (rem == mid && (half & 1))) ++half;
      bits = static_cast<uint16_t>(sign | half);
    }
  } else {
    uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
    bits = static_cast<uint16_t>(half);
  }
}

float16::operator float() const {
  uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1f;
  uint32_t mant = bits & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

size_t SizeOf(DataType dtype) {
  switch (dtype) {
    case proto::BOOL: return 1;
    case proto::INT32: return 4;
    case proto::INT64: return 8;
    case proto::FP16: return 2;
    case proto::FP32: return 4;
    case proto::FP64: return 8;
  }
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case proto::BOOL: return "bool";
    case proto::INT32: return "int32";
    case proto::INT64: return "int64";
    case proto::FP16: return "float16";
    case proto::FP32: return "float32";
    case proto::FP64: return "float64";
  }
  return "unknown";
}

StatusOr<DataType> ParseDataType(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return proto::FP32;
  if (name == "float64" || name == "fp64" || name == "double") return proto::FP64;
  if (name == "float16" || name == "fp16" || name == "half") return proto::FP16;
  if (name == "int32") return proto::INT32;
  if (name == "int64") return proto::INT64;
  if (name == "bool") return proto::BOOL;
  return InvalidArgument("unknown data type '", name,
                         "' (expected float32, float64, float16, int32, int64 or bool)");
}

}  // namespace loom
