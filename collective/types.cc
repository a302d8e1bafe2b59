#include "collective/types.h"

namespace loom::collective {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  LOOM_CHECK(false, "unknown DataType ", static_cast<int>(dtype));
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "fp32";
    case DataType::kFloat64: return "fp64";
    case DataType::kFloat16: return "fp16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kMultiTree: return "multi_tree";
    case Algorithm::kStar: return "star";
    case Algorithm::kNative: return "native";
  }
  return "unknown";
}

StatusOr<Algorithm> ParseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                      Algorithm::kStar, Algorithm::kNative}) {
    if (name == AlgorithmName(a)) return a;
  }
  return InvalidArgument("unknown collective algorithm '", name,
                         "' (expected auto, ring, tree, multi_tree, star or native)");
}

}  // namespace loom::collective
