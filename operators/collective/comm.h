// What the collective ops share: `comm_init` joins the rank's group (collective/groups.h) and
// puts its communicator into a scope variable of type COMMUNICATOR (framework/comm_var.h);
// `allreduce`, `reduce`, `broadcast`, ... take that variable as their "Comm" input.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "collective/types.h"
#include "framework/comm_var.h"
#include "framework/op_registry.h"
#include "loom/config.h"

namespace loom::ops {

#if LOOM_CUDA_ENABLED
// x[0, n) *= w on the kernel's CUDA stream (fp32, fp64 or fp16 data).
Status ScaleOnDevice(const KernelContext& ctx, void* x, int64_t n, DataType dtype, double w);
#endif

// The communicator held by the kernel's "Comm" input.
StatusOr<collective::Communicator*> CommOf(const KernelContext& ctx);

// The kernel's "reduce_type" attribute.
StatusOr<collective::ReduceOp> ReduceTypeAttr(const KernelContext& ctx);

// Attribute checks shared by the collective ops.
std::function<Status(const std::string&)> ValidReduceType();
std::function<Status(const std::string&)> ValidAlgorithm();

}  // namespace loom::ops
