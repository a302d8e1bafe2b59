// Counters of the collective ops, process-wide: how many allreduce calls were issued and whether
// multi-tensor buckets went out as one call (their tensors lay back to back) or fell back to one
// call per tensor. Tests and benchmarks read them to check that fusion needs no copies.
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::ops {

struct CollectiveOpStats {
  std::atomic<int64_t> allreduce_calls{0};
  std::atomic<int64_t> fused_calls{0};      // buckets of >1 tensor sent as one call
  std::atomic<int64_t> unfused_buckets{0};  // buckets of >1 tensor sent tensor by tensor
  // sparse_allreduce: calls, those that went dense, and the bytes a rank contributed to each
  // kind of exchange (padded ids and values; the dense buffer).
  std::atomic<int64_t> compressed_calls{0};  // allreduce calls of float32 sent as float16
  std::atomic<int64_t> sparse_calls{0};
  std::atomic<int64_t> sparse_dense_calls{0};
  std::atomic<int64_t> sparse_row_bytes{0};
  std::atomic<int64_t> sparse_dense_bytes{0};

  // The process-wide instance (defined in libloom, so every module sees the same one).
  static CollectiveOpStats& Get();
  void Reset() {
    allreduce_calls = 0;
    fused_calls = 0;
    unfused_buckets = 0;
    compressed_calls = 0;
    sparse_calls = 0;
    sparse_dense_calls = 0;
    sparse_row_bytes = 0;
    sparse_dense_bytes = 0;
  }
};

}  // namespace loom::ops
