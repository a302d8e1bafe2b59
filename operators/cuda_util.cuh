// Helpers for CUDA kernels: the context's stream and cuBLAS handle, launch geometry.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "framework/device_context.h"
#include "framework/op_registry.h"

namespace loom::ops::cuda {

inline cudaStream_t Stream(const KernelContext& ctx) {
  return static_cast<cudaStream_t>(static_cast<const CUDADeviceContext&>(ctx.device()).stream());
}

inline cublasHandle_t Cublas(const KernelContext& ctx) {
  return static_cast<cublasHandle_t>(
      static_cast<const CUDADeviceContext&>(ctx.device()).cublas_handle());
}

constexpr int kThreads = 256;

inline unsigned Blocks(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

inline Status LaunchStatus(const KernelContext& ctx) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? Status::OK() : ctx.Error("CUDA launch failed: ", cudaGetErrorString(e));
}

#define LOOM_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace loom::ops::cuda
