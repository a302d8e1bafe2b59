// Element types, reduction operators and algorithm names shared by every part of the collectives
// library. Plain value types; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace loom::collective {

// fp16 buffers hold IEEE binary16 bit patterns (uint16_t); reductions go through float.
enum class DataType { kFloat32, kFloat64, kFloat16, kInt32, kInt64 };

// kAvg sums and then divides by the number of ranks (integer types: truncating division).
enum class ReduceOp { kSum, kProd, kMax, kMin, kAvg };

// kAuto lets the communicator choose; kNative asks for the transport's own implementation.
enum class Algorithm { kAuto, kRing, kTree, kMultiTree, kStar, kNative };

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* AlgorithmName(Algorithm algorithm);
// Accepts the names AlgorithmName prints ("ring", "multi_tree", ...).
StatusOr<Algorithm> ParseAlgorithm(const std::string& name);

}  // namespace loom::collective
