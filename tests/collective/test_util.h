// Helpers for the collective tests: run one function per rank on its own thread, fill buffers with
// small integers (so every reduction order gives the exact same result) and build references.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collective/reduce.h"
#include "collective/world.h"

namespace loom::collective::testing {

inline void RunRanks(InProcessWorld& world, const std::function<void(int, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size(); ++r) threads.emplace_back([&, r] { fn(r, world.comm(r)); });
  for (auto& t : threads) t.join();
}

// The integer each rank contributes at index i.
inline int64_t Value(ReduceOp op, int rank, size_t i, int salt) {
  const int64_t k = static_cast<int64_t>((rank * 7 + i * 13 + salt * 5) % 7);
  if (op == ReduceOp::kProd) return (k % 3 == 0) ? -1 : (k % 3 == 1 ? 1 : 2);
  return k - 3;
}

inline void Store(DataType dtype, void* buf, size_t i, int64_t v) {
  switch (dtype) {
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = static_cast<double>(v); break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = v; break;
  }
}

inline double Load(DataType dtype, const void* buf, size_t i) {
  switch (dtype) {
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
  }
  return 0;
}

// Rank `rank`'s input of `count` elements.
inline std::vector<unsigned char> Input(DataType dtype, ReduceOp op, int rank, size_t count,
                                        int salt, size_t first_index = 0) {
  std::vector<unsigned char> buf(count * DataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i)
    Store(dtype, buf.data(), i, Value(op, rank, first_index + i, salt));
  return buf;
}

// The reduction over nranks inputs, computed independently of the library's kernels (exact on
// small integers), then scaled for avg the same way the library scales.
inline std::vector<unsigned char> Expected(DataType dtype, ReduceOp op, int nranks, size_t count,
                                           int salt, size_t first_index = 0) {
  std::vector<unsigned char> buf(count * DataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    int64_t acc = Value(op, 0, first_index + i, salt);
    for (int r = 1; r < nranks; ++r) {
      const int64_t v = Value(op, r, first_index + i, salt);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += v; break;
        case ReduceOp::kProd: acc *= v; break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
      }
    }
    if (op != ReduceOp::kAvg) {
      Store(dtype, buf.data(), i, acc);
      continue;
    }
    switch (dtype) {
      case DataType::kFloat32:
        static_cast<float*>(static_cast<void*>(buf.data()))[i] =
            static_cast<float>(acc) / static_cast<float>(nranks);
        break;
      case DataType::kFloat64:
        static_cast<double*>(static_cast<void*>(buf.data()))[i] =
            static_cast<double>(acc) / static_cast<double>(nranks);
        break;
      case DataType::kFloat16:
        static_cast<uint16_t*>(static_cast<void*>(buf.data()))[i] =
            FloatToHalf(static_cast<float>(acc) / static_cast<float>(nranks));
        break;
      default: Store(dtype, buf.data(), i, acc / nranks); break;
    }
  }
  return buf;
}

// "" when equal, else a description of the first difference.
inline std::string Compare(DataType dtype, const std::vector<unsigned char>& want, const void* got,
                           size_t count) {
  const size_t elem = DataTypeSize(dtype);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(want.data() + i * elem, static_cast<const unsigned char*>(got) + i * elem,
                    elem)) {
      return "element " + std::to_string(i) + " of " + std::to_string(count) + ": want " +
             std::to_string(Load(dtype, want.data(), i)) + ", got " +
             std::to_string(Load(dtype, got, i));
    }
  }
  return "";
}

}  // namespace loom::collective::testing
