// CUDA kernels of matmul(+grad) (transpose_X / transpose_Y, alpha, batched over leading dims,
// 1-D operands as in operators/math/matmul.cc) through cuBLAS strided-batched GEMM, fp32, fp64
// and fp16 (fp32 accumulation); and of reduce_sum / reduce_mean / reduce_max (+grad) over any
// set of dims (operators/math/reduce.cc), fp32 and fp64 with forward also in int32 / int64.
#include <limits>

#include "operators/cuda_util.cuh"
#include "operators/math/matmul_geom.h"
#include "operators/math/reduce_geom.h"

namespace loom::ops::cuda {
namespace {

// ---- matmul ----

// C_b = alpha * op(A_b) · op(B_b) (+ C_b when accumulate) for b < batch; handles empty extents.
template <typename T>
Status Gemms(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
             Acc<T> alpha, const T* a, int64_t sa, const T* b, int64_t sb, bool accumulate, T* c,
             int64_t sc, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return Status::OK();
  if (k == 0) {
    if (!accumulate) cudaMemsetAsync(c, 0, sizeof(T) * m * n * (sc ? batch : 1), Stream(ctx));
    return LaunchStatus(ctx);
  }
  if (sc == 0 && batch > 1) {  // every product lands on the same C: one call per product
    if constexpr (std::is_same_v<T, __half>) {
      // fp16: the sum over the batch runs in an fp32 buffer, converted once at the end.
      Tensor acc(proto::FP32, DDim{m * n});
      float* cf = acc.mutable_data<float>(ctx.place());
      if (accumulate) {
        ConvertK<__half, float><<<Blocks(m * n), kThreads, 0, Stream(ctx)>>>(c, cf, m * n);
      } else {
        cudaMemsetAsync(cf, 0, acc.nbytes(), Stream(ctx));
      }
      for (int64_t i = 0; i < batch; ++i)
        LOOM_RETURN_IF_ERROR(CublasStatus(
            ctx, GemmStridedBatchedHalfToFloat(Cublas(ctx), ta, tb, m, n, k, alpha, a + i * sa, 0,
                                               b + i * sb, 0, 1.0f, cf, 0, 1)));
      ConvertK<float, __half><<<Blocks(m * n), kThreads, 0, Stream(ctx)>>>(cf, c, m * n);
      return LaunchStatus(ctx);
    } else {
      for (int64_t i = 0; i < batch; ++i)
        LOOM_RETURN_IF_ERROR(CublasStatus(
            ctx,
            GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, alpha, a + i * sa, 0, b + i * sb, 0,
                                  accumulate || i > 0 ? Acc<T>(1) : Acc<T>(0), c, 0, 1)));
      return Status::OK();
    }
  }
  return CublasStatus(ctx, GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, alpha, a, sa, b, sb,
                                                 accumulate ? Acc<T>(1) : Acc<T>(0), c, sc, batch));
}

template <typename T>
Status Matmul(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  auto g = PlanMatmul(x.dims(), y.dims(), tx, ty);
  if (!g.ok()) return ctx.Error(g.status().message());
  const MatmulGeom& p = g.value();
  T* o = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  return Gemms<T>(ctx, tx, ty, p.m, p.n, p.k, static_cast<Acc<T>>(ctx.Attr<float>("alpha")),
                  DataOf<T>(x), p.x_batched ? p.m * p.k : 0, DataOf<T>(y),
                  p.y_batched ? p.k * p.n : 0, false, o, p.m * p.n, p.batch);
}

// With C = alpha A B (A = op(X), B = op(Y)): dA = alpha dC Bᵀ, dB = alpha Aᵀ dC, mapped back
// through the transposes; a side without batch dims sums over the batch.
template <typename T>
Status MatmulGrad(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const T* dc = DataOf<T>(ctx.Input("Out@GRAD"));
  const T* xd = DataOf<T>(x);
  const T* yd = DataOf<T>(y);
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  auto g = PlanMatmul(x.dims(), y.dims(), tx, ty);
  if (!g.ok()) return ctx.Error(g.status().message());
  const MatmulGeom& p = g.value();
  const Acc<T> alpha = static_cast<Acc<T>>(ctx.Attr<float>("alpha"));
  const int64_t sx = p.x_batched ? p.m * p.k : 0, sy = p.y_batched ? p.k * p.n : 0;
  const int64_t sdc = p.m * p.n;
  if (Tensor* dx = ctx.OutputOrNull("X@GRAD")) {
    T* o = MutableDataOf<T>(dx, ctx.place());
    if (!p.x_batched || p.batch == 0 || p.n == 0) cudaMemsetAsync(o, 0, dx->nbytes(), Stream(ctx));
    if (p.n > 0) {
      // X not transposed: dX[m,k] = dC · op(Y)ᵀ; transposed: dX[k,m] = op(Y) · dCᵀ.
      if (!tx)
        LOOM_RETURN_IF_ERROR(Gemms<T>(ctx, false, !ty, p.m, p.k, p.n, alpha, dc, sdc, yd, sy,
                                      !p.x_batched, o, sx, p.batch));
      else
        LOOM_RETURN_IF_ERROR(Gemms<T>(ctx, ty, true, p.k, p.m, p.n, alpha, yd, sy, dc, sdc,
                                      !p.x_batched, o, sx, p.batch));
    }
  }
  if (Tensor* dy = ctx.OutputOrNull("Y@GRAD")) {
    T* o = MutableDataOf<T>(dy, ctx.place());
    if (!p.y_batched || p.batch == 0 || p.m == 0) cudaMemsetAsync(o, 0, dy->nbytes(), Stream(ctx));
    if (p.m > 0) {
      // Y not transposed: dY[k,n] = op(X)ᵀ · dC; transposed: dY[n,k] = dCᵀ · op(X).
      if (!ty)
        LOOM_RETURN_IF_ERROR(Gemms<T>(ctx, !tx, false, p.k, p.n, p.m, alpha, xd, sx, dc, sdc,
                                      !p.y_batched, o, sy, p.batch));
      else
        LOOM_RETURN_IF_ERROR(Gemms<T>(ctx, true, tx, p.n, p.k, p.m, alpha, dc, sdc, xd, sx,
                                      !p.y_batched, o, sy, p.batch));
    }
  }
  return LaunchStatus(ctx);
}

// ---- reduce_sum / reduce_mean / reduce_max ----

enum class Kind { kSum, kMean, kMax };

// X's dims with size-1 dims dropped and neighbours of the same kind (kept / reduced) merged.
// Outputs enumerate the kept dims row-major, the reduced elements of one output the reduced
// dims row-major.
struct ReducePlan {
  static constexpr int kMax = DDim::kMaxRank;
  int rank = 0;
  int64_t dims[kMax] = {}, in_stride[kMax] = {}, out_stride[kMax] = {};
  bool reduced[kMax] = {};
  int64_t outputs = 1, groups = 1;
};

StatusOr<ReducePlan> MakeReducePlan(const DDim& x, const std::vector<int>& dims, bool all) {
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> mask, ReducedMask(x, dims, all));
  ReducePlan p;
  for (int i = 0; i < x.size(); ++i) {
    if (x[i] == 1) continue;
    if (p.rank > 0 && p.reduced[p.rank - 1] == mask[i]) {
      p.dims[p.rank - 1] *= x[i];
    } else {
      p.dims[p.rank] = x[i];
      p.reduced[p.rank] = mask[i];
      ++p.rank;
    }
  }
  int64_t in = 1, out = 1;
  for (int k = p.rank - 1; k >= 0; --k) {
    p.in_stride[k] = in;
    in *= p.dims[k];
    if (p.reduced[k]) {
      p.groups *= p.dims[k];
    } else {
      p.out_stride[k] = out;
      out *= p.dims[k];
    }
  }
  p.outputs = out;
  return p;
}

// Input offset of element r of output j's group.
__device__ inline int64_t ReduceOffset(const ReducePlan& p, int64_t j, int64_t r) {
  int64_t off = 0;
  for (int k = p.rank - 1; k >= 0; --k) {
    if (p.reduced[k]) {
      off += (r % p.dims[k]) * p.in_stride[k];
      r /= p.dims[k];
    } else {
      off += (j % p.dims[k]) * p.in_stride[k];
      j /= p.dims[k];
    }
  }
  return off;
}

template <typename T, Kind K>
__device__ inline T Combine(T a, T b) {
  if constexpr (K == Kind::kMax)
    return a > b ? a : b;
  else
    return a + b;
}

template <typename T, Kind K>
__device__ inline T Finish(T acc, int64_t groups) {
  if constexpr (K == Kind::kMean)
    return groups > 0 ? acc / static_cast<T>(groups) : acc;
  else
    return acc;
}

// One thread per output (groups small or many outputs).
template <typename T, Kind K>
__global__ void ReduceThreadK(ReducePlan p, const T* x, T* o, T init) {
  LOOM_GRID_STRIDE(j, p.outputs) {
    T acc = init;
    for (int64_t r = 0; r < p.groups; ++r) acc = Combine<T, K>(acc, x[ReduceOffset(p, j, r)]);
    o[j] = Finish<T, K>(acc, p.groups);
  }
}

// One block per output (large groups).
template <typename T, Kind K>
__global__ void ReduceBlockK(ReducePlan p, const T* x, T* o, T init) {
  __shared__ T buf[kThreads];
  for (int64_t j = blockIdx.x; j < p.outputs; j += gridDim.x) {
    T acc = init;
    for (int64_t r = threadIdx.x; r < p.groups; r += blockDim.x)
      acc = Combine<T, K>(acc, x[ReduceOffset(p, j, r)]);
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) buf[threadIdx.x] = Combine<T, K>(buf[threadIdx.x], buf[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) o[j] = Finish<T, K>(buf[0], p.groups);
    __syncthreads();
  }
}

template <typename T, Kind K>
Status Reduce(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  auto plan =
      MakeReducePlan(x.dims(), ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const ReducePlan& p = plan.value();
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  if (out->numel() == 0) return Status::OK();
  const T init = K == Kind::kMax ? std::numeric_limits<T>::lowest() : T(0);
  if (p.groups >= 512 && p.outputs <= 65535 * 4) {
    ReduceBlockK<T, K><<<RowBlocks(p.outputs), kThreads, 0, Stream(ctx)>>>(p, x.data<T>(), o, init);
  } else {
    ReduceThreadK<T, K><<<Blocks(p.outputs), kThreads, 0, Stream(ctx)>>>(p, x.data<T>(), o, init);
  }
  return LaunchStatus(ctx);
}

// Output index of input element i.
__device__ inline int64_t OutputIndex(const ReducePlan& p, int64_t i) {
  int64_t j = 0;
  for (int k = p.rank - 1; k >= 0; --k) {
    j += (i % p.dims[k]) * p.out_stride[k];
    i /= p.dims[k];
  }
  return j;
}

// sum: dx = g[j]; mean: g[j] / groups; max: g[j] where x == out[j] (every tie).
template <typename T, Kind K>
__global__ void ReduceGradK(ReducePlan p, const T* x, const T* out, const T* g, T* dx, int64_t n) {
  LOOM_GRID_STRIDE(i, n) {
    int64_t j = OutputIndex(p, i);
    if constexpr (K == Kind::kMax)
      dx[i] = x[i] == out[j] ? g[j] : T(0);
    else if constexpr (K == Kind::kMean)
      dx[i] = g[j] / static_cast<T>(p.groups ? p.groups : 1);
    else
      dx[i] = g[j];
  }
}

template <typename T, Kind K>
Status ReduceGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  auto plan =
      MakeReducePlan(x.dims(), ctx.Attr<std::vector<int>>("dim"), ctx.Attr<bool>("reduce_all"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  T* o = dx->mutable_data<T>(ctx.place());
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  ReduceGradK<T, K><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
      plan.value(), x.data<T>(), K == Kind::kMax ? ctx.Input("Out").data<T>() : nullptr,
      ctx.Input("Out@GRAD").data<T>(), o, n);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(matmul, kCUDA, FP32, Matmul<float>);
LOOM_REGISTER_KERNEL(matmul, kCUDA, FP64, Matmul<double>);
LOOM_REGISTER_KERNEL(matmul_grad, kCUDA, FP32, MatmulGrad<float>);
LOOM_REGISTER_KERNEL(matmul_grad, kCUDA, FP64, MatmulGrad<double>);
LOOM_REGISTER_KERNEL(matmul, kCUDA, FP16, Matmul<__half>);
LOOM_REGISTER_KERNEL(matmul_grad, kCUDA, FP16, MatmulGrad<__half>);

#define LOOM_REDUCE_CUDA(NAME, KIND)                                         \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP32, (Reduce<float, KIND>));            \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP64, (Reduce<double, KIND>));           \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT32, (Reduce<int32_t, KIND>));         \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT64, (Reduce<int64_t, KIND>));         \
  LOOM_REGISTER_KERNEL(NAME##_grad, kCUDA, FP32, (ReduceGrad<float, KIND>)); \
  LOOM_REGISTER_KERNEL(NAME##_grad, kCUDA, FP64, (ReduceGrad<double, KIND>))

LOOM_REDUCE_CUDA(reduce_sum, Kind::kSum);
LOOM_REDUCE_CUDA(reduce_mean, Kind::kMean);
LOOM_REDUCE_CUDA(reduce_max, Kind::kMax);

}  // namespace loom::ops::cuda
