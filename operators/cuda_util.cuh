// Helpers for CUDA kernels: the context's stream and cuBLAS handle, launch geometry, fp16
// access (device __half for the framework's float16, arithmetic in float), strided-batched
// row-major GEMM, block reductions and a device flag for reporting bad labels / ids.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

// Device element type T of a tensor: __half stands for the framework's float16.
template <typename T> struct HostTypeOf { using type = T; };
template <> struct HostTypeOf<__half> { using type = float16; };

template <typename T>
const T* DataOf(const Tensor& t) {
  return reinterpret_cast<const T*>(t.data<typename HostTypeOf<T>::type>());
}

template <typename T>
T* MutableDataOf(Tensor* t, const Place& place) {
  return reinterpret_cast<T*>(t->mutable_data<typename HostTypeOf<T>::type>(place));
}

// Arithmetic type of element type T: fp16 loads, computes and accumulates in float.
template <typename T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <typename T> using Acc = typename AccOf<T>::type;

// Row-major C_b = alpha * op(A_b) · op(B_b) + beta * C_b for b < batch, operands `sa`, `sb`,
// `sc` elements apart (0: the same matrix for every b), through column-major cuBLAS as
// C_bᵀ = op(B_b)ᵀ · op(A_b)ᵀ. fp32, fp64, and fp16 storage with fp32 accumulation (alpha and
// beta are then floats, as cuBLAS's compute type asks).
template <typename T>
cublasStatus_t GemmStridedBatched(cublasHandle_t h, bool ta, bool tb, int64_t m, int64_t n,
                                  int64_t k, Acc<T> alpha, const T* a, int64_t sa, const T* b,
                                  int64_t sb, Acc<T> beta, T* c, int64_t sc, int64_t batch) {
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  if constexpr (std::is_same_v<T, float>) {
    return cublasSgemmStridedBatched(h, opb, opa, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &alpha, b, ldb, sb, a, lda, sa, &beta,
                                     c, static_cast<int>(n), sc, static_cast<int>(batch));
  } else if constexpr (std::is_same_v<T, __half>) {
    return cublasGemmStridedBatchedEx(
        h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
        CUDA_R_16F, ldb, sb, a, CUDA_R_16F, lda, sa, &beta, c, CUDA_R_16F, static_cast<int>(n),
        sc, static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else {
    return cublasDgemmStridedBatched(h, opb, opa, static_cast<int>(n), static_cast<int>(m),
                                     static_cast<int>(k), &alpha, b, ldb, sb, a, lda, sa, &beta,
                                     c, static_cast<int>(n), sc, static_cast<int>(batch));
  }
}

// fp16 A and B, fp32 C (alpha, beta, accumulation in fp32): for sums of many products into one
// result, e.g. a weight gradient over the samples of a batch, which fp16 storage of C between
// the products would round at every step. Same layout rules as GemmStridedBatched.
inline cublasStatus_t GemmStridedBatchedHalfToFloat(cublasHandle_t h, bool ta, bool tb,
                                                    int64_t m, int64_t n, int64_t k, float alpha,
                                                    const __half* a, int64_t sa, const __half* b,
                                                    int64_t sb, float beta, float* c, int64_t sc,
                                                    int64_t batch) {
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  return cublasGemmStridedBatchedEx(
      h, opb, opa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
      CUDA_R_16F, ldb, sb, a, CUDA_R_16F, lda, sa, &beta, c, CUDA_R_32F, static_cast<int>(n), sc,
      static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

inline Status CublasStatus(const KernelContext& ctx, cublasStatus_t st) {
  return st == CUBLAS_STATUS_SUCCESS ? Status::OK()
                                     : ctx.Error("cuBLAS call failed with status ", int(st));
}

// Sum of v over the block (blockDim.x == kThreads); every thread gets the total. `buf` is
// shared scratch of kThreads elements, free again when this returns.
template <typename A>
__device__ A BlockSum(A v, A* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  A total = buf[0];
  __syncthreads();
  return total;
}

template <typename A>
__device__ A BlockMax(A v, A* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = max(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  A total = buf[0];
  __syncthreads();
  return total;
}

// Grid size for kernels that give each row its own block (grid-stride over rows beyond it).
inline unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < 1 ? 1 : (rows > 65535 ? 65535 : rows));
}

// A device-side int64 flag that kernels set to report a bad value (an out-of-range label or
// id): starts as kUnset; Read() waits for the stream and returns what was stored.
class DeviceFlag {
 public:
  static constexpr int64_t kUnset = INT64_MIN;
  explicit DeviceFlag(const KernelContext& ctx) : ctx_(ctx), t_(proto::INT64, DDim{1}) {
    ptr_ = t_.mutable_data<int64_t>(ctx.place());
    cudaMemcpyAsync(ptr_, &kUnset, sizeof(int64_t), cudaMemcpyHostToDevice, Stream(ctx));
  }
  int64_t* ptr() const { return ptr_; }
  int64_t Read() const {
    int64_t host = kUnset;
    cudaMemcpyAsync(&host, ptr_, sizeof(host), cudaMemcpyDeviceToHost, Stream(ctx_));
    cudaStreamSynchronize(Stream(ctx_));
    return host;
  }

 private:
  const KernelContext& ctx_;
  Tensor t_;
  int64_t* ptr_;
};

#define LOOM_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// out[i] = static_cast<To>(in[i]), n elements (the cast op; float <-> __half accumulators).
template <typename From, typename To>
__global__ void ConvertK(const From* in, To* out, int64_t n) {
  LOOM_GRID_STRIDE(i, n) out[i] = static_cast<To>(in[i]);
}

}  // namespace loom::ops::cuda
