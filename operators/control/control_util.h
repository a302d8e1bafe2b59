// Tensor helpers shared by the control-flow kernels (conditional_block, while): gradient
// buffers filled on the kernel's place, CPU or CUDA.
#pragma once

#include "framework/op_registry.h"
#include "loom/config.h"

namespace loom::ops {

// dst = src on the kernel's place, into dst's existing buffer when it is large enough (so a
// gradient that is a view into a fused bucket stays one).
void CopyOnPlace(const KernelContext& ctx, const Tensor& src, Tensor* dst);
// dst = zeros shaped and typed like `like`, on the kernel's place.
void ZerosOnPlace(const KernelContext& ctx, const Tensor& like, Tensor* dst);
// dst += src (same dims and dtype; fp32 or fp64, and fp16 on CUDA), on the kernel's place.
Status AddOnPlace(const KernelContext& ctx, const Tensor& src, Tensor* dst);

#if LOOM_CUDA_ENABLED
// AddOnPlace on a CUDA place (control_cuda.cu).
Status AddOnCuda(const KernelContext& ctx, const Tensor& src, Tensor* dst);
#endif

}  // namespace loom::ops
