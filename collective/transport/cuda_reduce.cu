#include "collective/transport/cuda_reduce.h"

#include <cuda_fp16.h>

#include <cstdint>

#include "collective/reduce_ops.h"

namespace loom::collective::internal {
namespace {

// Storage type -> arithmetic: fp16 is reduced in float; integers wrap around like the host kernels.
template <typename T>
struct Arith {
  using Compute = T;
  __device__ static Compute Load(T v) { return v; }
  __device__ static T Store(Compute v) { return v; }
};
template <>
struct Arith<__half> {
  using Compute = float;
  __device__ static float Load(__half v) { return __half2float(v); }
  __device__ static __half Store(float v) { return __float2half_rn(v); }
};

struct SumOp {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    return WrappingAdd(x, y);
  }
};
struct ProdOp {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    return WrappingMultiply(x, y);
  }
};
struct MaxOp {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    return MaxOf(x, y);
  }
};
struct MinOp {
  template <typename C>
  __device__ C operator()(C x, C y) const {
    return MinOf(x, y);
  }
};

template <typename T, typename Op>
__global__ void ReduceKernel(T* dst, const T* a, const T* b, size_t count, Op op) {
  using A = Arith<T>;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = A::Store(op(A::Load(a[i]), A::Load(b[i])));
  }
}

template <typename T>
__global__ void DivideKernel(T* buf, size_t count, int nranks) {
  using A = Arith<T>;
  using C = typename A::Compute;
  const C divisor = static_cast<C>(nranks);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    buf[i] = A::Store(static_cast<C>(A::Load(buf[i]) / divisor));
  }
}

constexpr int kThreads = 256;
int Blocks(size_t count) {
  const size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? blocks : 4096);
}

template <typename T>
cudaError_t ReduceTyped(ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                        cudaStream_t stream) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const int blocks = Blocks(count);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      ReduceKernel<<<blocks, kThreads, 0, stream>>>(d, x, y, count, SumOp{});
      break;
    case ReduceOp::kProd:
      ReduceKernel<<<blocks, kThreads, 0, stream>>>(d, x, y, count, ProdOp{});
      break;
    case ReduceOp::kMax:
      ReduceKernel<<<blocks, kThreads, 0, stream>>>(d, x, y, count, MaxOp{});
      break;
    case ReduceOp::kMin:
      ReduceKernel<<<blocks, kThreads, 0, stream>>>(d, x, y, count, MinOp{});
      break;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t DivideTyped(void* buf, size_t count, int nranks, cudaStream_t stream) {
  DivideKernel<<<Blocks(count), kThreads, 0, stream>>>(static_cast<T*>(buf), count, nranks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchReduce(const Reduction& r, void* dst, const void* a, const void* b, size_t count,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (r.dtype) {
    case DataType::kFloat32: return ReduceTyped<float>(r.op, dst, a, b, count, stream);
    case DataType::kFloat64: return ReduceTyped<double>(r.op, dst, a, b, count, stream);
    case DataType::kFloat16: return ReduceTyped<__half>(r.op, dst, a, b, count, stream);
    case DataType::kInt32: return ReduceTyped<int32_t>(r.op, dst, a, b, count, stream);
    case DataType::kInt64: return ReduceTyped<int64_t>(r.op, dst, a, b, count, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchFinalize(const Reduction& r, void* buf, size_t count, int nranks,
                           cudaStream_t stream) {
  if (r.op != ReduceOp::kAvg || count == 0) return cudaSuccess;
  switch (r.dtype) {
    case DataType::kFloat32: return DivideTyped<float>(buf, count, nranks, stream);
    case DataType::kFloat64: return DivideTyped<double>(buf, count, nranks, stream);
    case DataType::kFloat16: return DivideTyped<__half>(buf, count, nranks, stream);
    case DataType::kInt32: return DivideTyped<int32_t>(buf, count, nranks, stream);
    case DataType::kInt64: return DivideTyped<int64_t>(buf, count, nranks, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace loom::collective::internal
