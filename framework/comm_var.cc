#include "framework/comm_var.h"

namespace loom {

StatusOr<collective::DataType> CollectiveDtype(DataType dtype, const std::string& where) {
  switch (dtype) {
    case proto::FP32: return collective::DataType::kFloat32;
    case proto::FP64: return collective::DataType::kFloat64;
    case proto::FP16: return collective::DataType::kFloat16;
    case proto::INT32: return collective::DataType::kInt32;
    case proto::INT64: return collective::DataType::kInt64;
    default:
      return Unimplemented(where, ": collectives do not support dtype ", DataTypeName(dtype));
  }
}

}  // namespace loom
