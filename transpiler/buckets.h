// Gradient buckets: the gradients one collective call synchronizes. Small gradients are fused
// (Fluid's fuse_all_reduce_ops, Horovod's tensor fusion) in the order backward produces them, so
// that each bucket's collective can start as soon as its last gradient exists.
#pragma once

#include <string>
#include <vector>

#include "framework/data_type.h"
#include "framework/program_desc.h"
#include "transpiler/gradients.h"

namespace loom::transpiler {

struct GradBucket {
  std::vector<std::string> params;
  std::vector<std::string> grads;
  int64_t bytes = 0;
  DataType dtype = proto::FP32;
  bool fused = false;     // more than one gradient: coalesced into one buffer
  std::string algorithm;  // resolved when its collective is inserted
};

// Buckets of the parameters' gradients in the order main's block 0 produces them (the last
// backward op writing each): consecutive gradients of one dtype up to limit_bytes together, a
// gradient of limit_bytes or more alone, a sparse one (SelectedRows) alone; limit_bytes <= 0:
// every gradient alone.
std::vector<GradBucket> PlanBuckets(const ProgramDesc& main,
                                    const std::vector<OptimizedParam>& params, int64_t limit_bytes);

}  // namespace loom::transpiler
