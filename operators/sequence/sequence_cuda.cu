// CUDA kernels of sequence_pool and sequence_softmax and their gradients (fp32, fp64), as
// operators/sequence/sequence_ops.cc: the sequences are the input's last LoD level, whose offsets
// (on the host) are copied to the device once per call. sequence_pool gives each (sequence,
// column) a thread that walks the sequence's rows (consecutive threads read consecutive
// columns); its gradient writes every row of the sequence (zeros where the pooling did not
// read), so it needs no separate clearing. sequence_softmax gives each sequence a block
// (block-wide max and sum).
#include <string>
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/sequence/sequence_util.h"

namespace loom::ops::cuda {
namespace {

enum PoolType { kSum, kAverage, kSqrt, kMax, kLast, kFirst };

StatusOr<PoolType> ParsePool(const KernelContext& ctx) {
  const std::string& t = ctx.Attr<std::string>("pooltype");
  if (t == "SUM") return kSum;
  if (t == "AVERAGE") return kAverage;
  if (t == "SQRT") return kSqrt;
  if (t == "MAX") return kMax;
  if (t == "LAST") return kLast;
  if (t == "FIRST") return kFirst;
  return ctx.Error("pooltype '", t, "' is not SUM, AVERAGE, SQRT, MAX, LAST or FIRST");
}

// The last LoD level of input `slot` (checked as the CPU kernels check it), and a device copy.
struct Offsets {
  std::vector<int64_t> host;
  Tensor device;
  const int64_t* ptr = nullptr;
  int64_t seqs() const { return static_cast<int64_t>(host.size()) - 1; }
};

// The offsets (checked as on the CPU, sequence_util.h) and their device copy.
StatusOr<Offsets> DeviceOffsets(const KernelContext& ctx, const char* slot) {
  Offsets o;
  LOOM_ASSIGN_OR_RETURN(o.host, SequenceOffsets(ctx, slot));
  o.device = Tensor(proto::INT64, DDim{static_cast<int64_t>(o.host.size())});
  int64_t* p = o.device.mutable_data<int64_t>(ctx.place());
  cudaMemcpyAsync(p, o.host.data(), sizeof(int64_t) * o.host.size(), cudaMemcpyHostToDevice,
                  Stream(ctx));
  o.ptr = p;
  return o;
}

template <typename T>
__global__ void PoolK(const T* x, const int64_t* off, int64_t seqs, int64_t w, PoolType type, T pad,
                      T* o, int64_t* mi) {
  LOOM_GRID_STRIDE(idx, seqs * w) {
    const int64_t s = idx / w, j = idx % w, b = off[s], e = off[s + 1], n = e - b;
    if (n == 0) {
      o[idx] = pad;
      if (mi) mi[idx] = -1;
      continue;
    }
    if (type == kLast || type == kFirst) {
      o[idx] = x[(type == kLast ? e - 1 : b) * w + j];
    } else if (type == kMax) {
      int64_t best = b;
      for (int64_t r = b + 1; r < e; ++r)
        if (x[r * w + j] > x[best * w + j]) best = r;
      o[idx] = x[best * w + j];
      if (mi) mi[idx] = best;
    } else {
      T acc = 0;
      for (int64_t r = b; r < e; ++r) acc += x[r * w + j];
      o[idx] = type == kAverage ? acc / static_cast<T>(n)
               : type == kSqrt  ? acc / sqrt(static_cast<T>(n))
                                : acc;
    }
  }
}

template <typename T>
__global__ void PoolGradK(const T* x, const T* g, const int64_t* off, int64_t seqs, int64_t w,
                          PoolType type, T* dx) {
  LOOM_GRID_STRIDE(idx, seqs * w) {
    const int64_t s = idx / w, j = idx % w, b = off[s], e = off[s + 1], n = e - b;
    if (n == 0) continue;
    const T gs = g[idx];
    int64_t pick = -1;  // the one row that gets the gradient (LAST, FIRST, MAX)
    if (type == kLast) pick = e - 1;
    if (type == kFirst) pick = b;
    if (type == kMax) {
      pick = b;  // the first maximum, as the forward pass picks
      for (int64_t r = b + 1; r < e; ++r)
        if (x[r * w + j] > x[pick * w + j]) pick = r;
    }
    const T div = type == kAverage ? static_cast<T>(n)
                  : type == kSqrt  ? sqrt(static_cast<T>(n))
                                   : T(1);
    for (int64_t r = b; r < e; ++r) dx[r * w + j] = pick < 0 ? gs / div : (r == pick ? gs : T(0));
  }
}

template <typename T>
Status SequencePool(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(PoolType type, ParsePool(ctx));
  LOOM_ASSIGN_OR_RETURN(Offsets off, DeviceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = off.seqs(), w = RowWidth(xt);
  DDim d = xt.dims();
  d[0] = seqs;
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  T* o = MutableDataOf<T>(out, ctx.place());
  int64_t* mi = nullptr;
  if (type == kMax && ctx.OutputSize("MaxIndex") > 0) {
    Tensor* m = ctx.Output("MaxIndex");
    m->Resize(d);
    mi = m->mutable_data<int64_t>(ctx.place());
  }
  const T pad = static_cast<T>(ctx.Attr<float>("pad_value"));
  PoolK<T><<<Blocks(seqs * w), kThreads, 0, Stream(ctx)>>>(DataOf<T>(xt), off.ptr, seqs, w, type,
                                                           pad, o, mi);
  out->set_lod(UpperLevels(xt.lod()));
  cudaStreamSynchronize(Stream(ctx));  // the device offsets are freed on return
  return LaunchStatus(ctx);
}

template <typename T>
Status SequencePoolGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(PoolType type, ParsePool(ctx));
  LOOM_ASSIGN_OR_RETURN(Offsets off, DeviceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = off.seqs(), w = RowWidth(xt);
  dxt->Resize(xt.dims());
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  PoolGradK<T><<<Blocks(seqs * w), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(xt), DataOf<T>(ctx.Input("Out@GRAD")), off.ptr, seqs, w, type, dx);
  dxt->set_lod(xt.lod());
  cudaStreamSynchronize(Stream(ctx));
  return LaunchStatus(ctx);
}

// Block s: softmax over the rows of sequence s (one value per row).
template <typename T>
__global__ void SeqSoftmaxK(const T* x, const int64_t* off, int64_t seqs, T* o) {
  __shared__ T buf[kThreads];
  for (int64_t s = blockIdx.x; s < seqs; s += gridDim.x) {
    const int64_t b = off[s], e = off[s + 1];
    if (b == e) continue;
    T m = x[b];
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) m = max(m, x[i]);
    m = BlockMax(m, buf);
    T sum = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) sum += exp(x[i] - m);
    sum = BlockSum(sum, buf);
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) o[i] = exp(x[i] - m) / sum;
  }
}

template <typename T>
__global__ void SeqSoftmaxGradK(const T* y, const T* g, const int64_t* off, int64_t seqs, T* dx) {
  __shared__ T buf[kThreads];
  for (int64_t s = blockIdx.x; s < seqs; s += gridDim.x) {
    const int64_t b = off[s], e = off[s + 1];
    if (b == e) continue;
    T dot = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) dot += g[i] * y[i];
    dot = BlockSum(dot, buf);
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) dx[i] = y[i] * (g[i] - dot);
  }
}

template <typename T>
Status SequenceSoftmax(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Offsets off, DeviceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  out->Resize(xt.dims());
  SeqSoftmaxK<T><<<RowBlocks(off.seqs()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(xt), off.ptr, off.seqs(), MutableDataOf<T>(out, ctx.place()));
  out->set_lod(xt.lod());
  cudaStreamSynchronize(Stream(ctx));
  return LaunchStatus(ctx);
}

template <typename T>
Status SequenceSoftmaxGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(Offsets off, DeviceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  dxt->Resize(xt.dims());
  SeqSoftmaxGradK<T><<<RowBlocks(off.seqs()), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(ctx.Input("Out")), DataOf<T>(ctx.Input("Out@GRAD")), off.ptr, off.seqs(),
      MutableDataOf<T>(dxt, ctx.place()));
  dxt->set_lod(xt.lod());
  cudaStreamSynchronize(Stream(ctx));
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(sequence_pool, kCUDA, FP32, SequencePool<float>);
LOOM_REGISTER_KERNEL(sequence_pool, kCUDA, FP64, SequencePool<double>);
LOOM_REGISTER_KERNEL(sequence_pool_grad, kCUDA, FP32, SequencePoolGrad<float>);
LOOM_REGISTER_KERNEL(sequence_pool_grad, kCUDA, FP64, SequencePoolGrad<double>);
LOOM_REGISTER_KERNEL(sequence_softmax, kCUDA, FP32, SequenceSoftmax<float>);
LOOM_REGISTER_KERNEL(sequence_softmax, kCUDA, FP64, SequenceSoftmax<double>);
LOOM_REGISTER_KERNEL(sequence_softmax_grad, kCUDA, FP32, SequenceSoftmaxGrad<float>);
LOOM_REGISTER_KERNEL(sequence_softmax_grad, kCUDA, FP64, SequenceSoftmaxGrad<double>);

}  // namespace loom::ops::cuda
