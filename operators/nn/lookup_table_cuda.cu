// CUDA kernels of lookup_table(+grad), fp32 and fp64, as operators/nn/lookup_table.cc:
// Out[i] = W[Ids[i]] (int64 or int32 ids), zero rows for padding_idx; an id outside [0, V) is
// an error (flagged by the kernel, reported after it). The dense W@GRAD scatter-adds the rows
// of Out@GRAD with atomicAdd (the order of the additions to one row is not fixed), also with
// is_sparse: on CUDA places the table's gradient is dense.
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

__device__ inline int64_t IdAt(const int64_t* i64, const int32_t* i32, int64_t i) {
  return i64 ? i64[i] : static_cast<int64_t>(i32[i]);
}

template <typename T>
__global__ void LookupK(const T* w, const int64_t* i64, const int32_t* i32, T* out, int64_t n,
                        int64_t rows, int64_t d, int64_t pad, int64_t* bad) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, id = IdAt(i64, i32, i);
    if (id < 0 || id >= rows) {
      *bad = id;
      out[e] = T(0);
    } else {
      out[e] = id == pad ? T(0) : w[id * d + e % d];
    }
  }
}

template <typename T>
__global__ void LookupGradK(const T* g, const int64_t* i64, const int32_t* i32, T* dw, int64_t n,
                            int64_t rows, int64_t d, int64_t pad, int64_t* bad) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, id = IdAt(i64, i32, i);
    if (id < 0 || id >= rows)
      *bad = id;
    else if (id != pad)
      atomicAdd(dw + id * d + e % d, g[e]);
  }
}

template <typename T, bool kGrad>
Status Lookup(const KernelContext& ctx) {
  if (kGrad && ctx.Attr<bool>("is_sparse")) {
    // On CUDA places the gradient stays dense (the update kernels there take dense
    // gradients): the variable holds a tensor again, which every later op reads as dense.
    if (Variable* v = ctx.OutputVariable("W@GRAD"); v && v->IsType<SelectedRows>()) {
      v->Clear();
      v->GetMutable<Tensor>()->Resize(ctx.Input("W").dims());
    }
  }
  Tensor* out = kGrad ? ctx.OutputOrNull("W@GRAD") : ctx.Output("Out");
  if (!out) return Status::OK();
  const Tensor& w = ctx.Input("W");
  const Tensor& ids = ctx.Input("Ids");
  const int64_t rows = w.dims()[0], d = w.dims()[1], n = ids.numel();
  const bool is64 = ids.dtype() == proto::INT64;
  const int64_t* i64 = is64 ? ids.data<int64_t>() : nullptr;
  const int32_t* i32 = is64 ? nullptr : ids.data<int32_t>();
  const int64_t pad = ctx.Attr<int>("padding_idx");
  T* o = out->mutable_data<T>(ctx.place());
  cudaStream_t stream = Stream(ctx);
  if (kGrad) cudaMemsetAsync(o, 0, out->nbytes(), stream);
  if (n * d == 0) return LaunchStatus(ctx);
  DeviceFlag bad(ctx);
  if (kGrad) {
    LookupGradK<T><<<Blocks(n * d), kThreads, 0, stream>>>(ctx.Input("Out@GRAD").data<T>(), i64,
                                                           i32, o, n, rows, d, pad, bad.ptr());
  } else {
    LookupK<T><<<Blocks(n * d), kThreads, 0, stream>>>(w.data<T>(), i64, i32, o, n, rows, d, pad,
                                                       bad.ptr());
  }
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  const int64_t id = bad.Read();
  if (id != DeviceFlag::kUnset)
    return ctx.Error("id ", id, " of Ids is out of range [0, ", rows, ") of W (", rows, " rows)");
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_KERNEL(lookup_table, kCUDA, FP32, (Lookup<float, false>));
LOOM_REGISTER_KERNEL(lookup_table, kCUDA, FP64, (Lookup<double, false>));
LOOM_REGISTER_KERNEL(lookup_table_grad, kCUDA, FP32, (Lookup<float, true>));
LOOM_REGISTER_KERNEL(lookup_table_grad, kCUDA, FP64, (Lookup<double, true>));

}  // namespace loom::ops::cuda
