// CUDA kernels (fp32, fp64) of sequence_conv, sequence_expand, sequence_expand_as,
// sequence_pad and sequence_unpad and their gradients, with the semantics of the CPU kernels
// in operators/sequence/sequence_ops.cc and sequence_lod.cc: the same output dims,
// values and LoD, and the same errors. sequence_expand and sequence_expand_as also run on
// int64 X, as on the CPU.
//
// The LoD is on the host, so the host turns it into an index plan and copies the plan to the
// device once per call (one int64 tensor, stream-ordered; the call synchronizes the stream
// before it returns, so the host vectors and the device scratch can be freed). Most of these
// ops only move rows, and their plans are row maps: "output row i is input row rows[i]" (-1:
// a row of zeros), applied by one gather kernel with a thread per element:
//   sequence_expand(_as)   out row -> the x row it repeats
//   sequence_pad_grad      x row   -> its row of the padded Out@GRAD
//   sequence_unpad         out row -> its row of the padded X
//   sequence_unpad_grad    padded row -> its Out@GRAD row, -1 in the padding
// sequence_pad writes every padded element from the sequence offsets and PadValue.
//   sequence_expand(_as)_grad sums the Out@GRAD rows that copied each x row. Instead of atomic
// adds (whose order, and so whose rounding, varies from run to run) the host inverts the row
// map into a CSR index (for x row r, the out rows that copy it, ascending) and a thread per
// (x row, column) sums them in that order: deterministic, and in the CPU kernel's order.
//   sequence_conv is an im2col + GEMM: a kernel builds the context matrix col [rows,
// contextLength * D] (row t: the rows t + contextStart + k of t's sequence side by side, zeros
// where the window leaves the sequence; the plan holds the offsets and each row's sequence),
// then one cuBLAS GEMM Out = col · Filter. Its gradient rebuilds col for Filter@GRAD = colᵀ ·
// Out@GRAD, and for X@GRAD takes dcol = Out@GRAD · Filterᵀ and a col2im kernel in which a
// thread owns one element of X@GRAD and sums the contextLength entries of dcol that read it
// (no atomics; in the order the CPU kernel adds them). As on the CPU, padding is zeros
// (paddingTrainable is accepted and has no effect; there is no PaddingData input).
//
// Where the CPU kernels rely on shape inference for shapes that, wrong, would make these
// kernels read or write device memory out of bounds (Filter's rows, Out@GRAD's size, an X LoD
// that reaches past X's rows), they check them too.
#include <algorithm>
#include <string>
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/sequence/sequence_util.h"

namespace loom::ops::cuda {
namespace {

// ---- helpers ----

int64_t Rows(const Tensor& t) { return t.dims().size() ? t.dims()[0] : 0; }

// An int64 index plan copied to the device on the context's stream. The host vector must stay
// alive until the stream is synchronized (every kernel here does so before returning).
struct DevicePlan {
  Tensor t;
  const int64_t* ptr = nullptr;
};

StatusOr<DevicePlan> Upload(const KernelContext& ctx, const std::vector<int64_t>& host) {
  DevicePlan d;
  d.t = Tensor(proto::INT64, DDim{std::max<int64_t>(1, static_cast<int64_t>(host.size()))});
  int64_t* p = d.t.mutable_data<int64_t>(ctx.place());
  if (!host.empty()) {
    const cudaError_t e = cudaMemcpyAsync(p, host.data(), sizeof(int64_t) * host.size(),
                                          cudaMemcpyHostToDevice, Stream(ctx));
    if (e != cudaSuccess)
      return ctx.Error("copying an index plan to the device failed: ", cudaGetErrorString(e));
  }
  d.ptr = p;
  return d;
}

// Waits for the call's work on the stream (the plans and scratch are freed on return) and
// reports a failed launch or kernel.
Status Finish(const KernelContext& ctx) {
  const cudaError_t e = cudaStreamSynchronize(Stream(ctx));
  if (e != cudaSuccess) return ctx.Error("CUDA kernel failed: ", cudaGetErrorString(e));
  return LaunchStatus(ctx);
}

template <typename T>
Tensor Scratch(const KernelContext& ctx, int64_t n, T** ptr) {
  Tensor t(ToDataType<T>(), DDim{std::max<int64_t>(1, n)});
  *ptr = t.mutable_data<T>(ctx.place());
  return t;
}

// Row-major C[m, n] = op(A) · op(B); zeros when the inner extent is empty (as the CPU's Gemm).
template <typename T>
Status Gemm(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
            const T* b, T* c) {
  if (m == 0 || n == 0) return Status::OK();
  if (k == 0) {
    cudaMemsetAsync(c, 0, sizeof(T) * static_cast<size_t>(m * n), Stream(ctx));
    return Status::OK();
  }
  return CublasStatus(
      ctx, GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, T(1), a, 0, b, 0, T(0), c, 0, 1));
}

// out row i = src row rows[i] (a row of zeros where rows[i] < 0); n rows of w elements.
template <typename T>
__global__ void GatherRowsK(const T* src, const int64_t* rows, int64_t n, int64_t w, T* out) {
  LOOM_GRID_STRIDE(idx, n * w) {
    const int64_t r = rows[idx / w];
    out[idx] = r < 0 ? T(0) : src[r * w + idx % w];
  }
}

template <typename T>
Status GatherRows(const KernelContext& ctx, const T* src, const int64_t* rows, int64_t n, int64_t w,
                  T* out) {
  GatherRowsK<T><<<Blocks(n * w), kThreads, 0, Stream(ctx)>>>(src, rows, n, w, out);
  return LaunchStatus(ctx);
}

// out row r = the sum of src rows list[start[r]], ..., list[start[r + 1] - 1], in that order
// (zeros for none); n rows of w elements.
template <typename T>
__global__ void SumRowsK(const T* src, const int64_t* start, const int64_t* list, int64_t n,
                         int64_t w, T* out) {
  LOOM_GRID_STRIDE(idx, n * w) {
    const int64_t r = idx / w, j = idx % w;
    T acc = 0;
    for (int64_t p = start[r]; p < start[r + 1]; ++p) acc += src[list[p] * w + j];
    out[idx] = acc;
  }
}

// ---- sequence_expand / sequence_expand_as ----
template <typename T, bool kAs>
Status SequenceExpand(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Expansion e, PlanExpand(ctx, kAs));
  const Tensor& x = ctx.Input("X");
  const int64_t n = static_cast<int64_t>(e.rows.size()), w = RowWidth(x);
  DDim d = x.dims();
  d[0] = n;
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  T* o = MutableDataOf<T>(out, ctx.place());
  LOOM_ASSIGN_OR_RETURN(DevicePlan plan, Upload(ctx, e.rows));
  LOOM_RETURN_IF_ERROR(GatherRows<T>(ctx, DataOf<T>(x), plan.ptr, n, w, o));
  out->set_lod(e.lod);
  return Finish(ctx);
}

template <typename T, bool kAs>
Status SequenceExpandGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(Expansion e, PlanExpand(ctx, kAs));
  const Tensor& x = ctx.Input("X");
  const Tensor& g = ctx.Input("Out@GRAD");
  const int64_t n = static_cast<int64_t>(e.rows.size()), xrows = Rows(x), w = RowWidth(x);
  if (g.numel() != n * w)
    return ctx.Error("Out@GRAD ", g.dims().ToString(), " does not hold the ", n,
                     " expanded rows of width ", w);
  // CSR of the inverted row map: [start (xrows + 1) | out rows by x row, ascending].
  std::vector<int64_t> plan(static_cast<size_t>(xrows + 1 + n), 0);
  for (int64_t r : e.rows) ++plan[r + 1];
  for (int64_t r = 0; r < xrows; ++r) plan[r + 1] += plan[r];
  std::vector<int64_t> fill(plan.begin(), plan.begin() + xrows);
  for (int64_t i = 0; i < n; ++i) plan[xrows + 1 + fill[e.rows[i]]++] = i;
  dx->Resize(x.dims());
  T* o = MutableDataOf<T>(dx, ctx.place());
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, plan));
  SumRowsK<T><<<Blocks(xrows * w), kThreads, 0, Stream(ctx)>>>(DataOf<T>(g), dp.ptr,
                                                               dp.ptr + xrows + 1, xrows, w, o);
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  dx->set_lod(x.lod());
  return Finish(ctx);
}

// ---- sequence_pad / sequence_unpad ----

// o[s, r, j] = x[off[s] + r, j] for r < the length of sequence s, else the pad value (one, or
// one per column).
template <typename T>
__global__ void PadK(const T* x, const int64_t* off, const T* pad, bool pad_row, int64_t seqs,
                     int64_t len, int64_t w, T* o) {
  LOOM_GRID_STRIDE(idx, seqs * len * w) {
    const int64_t j = idx % w, r = idx / w % len, s = idx / (w * len), row = off[s] + r;
    o[idx] = row < off[s + 1] ? x[row * w + j] : pad[pad_row ? j : 0];
  }
}

template <typename T>
Status SequencePad(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(PadPlan pad, PlanPad(ctx));
  const std::vector<int64_t>& off = pad.off;
  const int64_t seqs = pad.seqs, w = pad.w, len = pad.len;
  const Tensor& xt = ctx.Input("X");
  const Tensor& pv = ctx.Input("PadValue");
  Tensor* out = ctx.Output("Out");
  T* o = MutableDataOf<T>(out, ctx.place());
  Tensor* lt = ctx.Output("Length");
  int64_t* lengths = lt->mutable_data<int64_t>(ctx.place());
  // One upload: [offsets (seqs + 1) | lengths (seqs)]; Length is copied from the second part.
  std::vector<int64_t> plan = off;
  for (int64_t s = 0; s < seqs; ++s) plan.push_back(off[s + 1] - off[s]);
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, plan));
  if (seqs > 0)
    cudaMemcpyAsync(lengths, dp.ptr + seqs + 1, sizeof(int64_t) * static_cast<size_t>(seqs),
                    cudaMemcpyDeviceToDevice, Stream(ctx));
  PadK<T><<<Blocks(seqs * len * w), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(xt), dp.ptr, DataOf<T>(pv), pv.numel() != 1, seqs, len, w, o);
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  return Finish(ctx);
}

template <typename T>
Status SequencePadGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& gt = ctx.Input("Out@GRAD");
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1, rows = Rows(xt), w = RowWidth(xt);
  int64_t longest = 0;
  for (int64_t s = 0; s < seqs; ++s) longest = std::max(longest, off[s + 1] - off[s]);
  // The CPU kernel takes Out@GRAD's shape on trust (shape inference made it Out's).
  const int64_t len = gt.dims().size() >= 2 ? gt.dims()[1] : -1;
  if (gt.dims().size() < 2 || gt.dims()[0] != seqs || len < longest || gt.numel() != seqs * len * w)
    return ctx.Error("Out@GRAD ", gt.dims().ToString(), " is not [", seqs,
                     " sequences, padded length >= ", longest, ", ...] with rows of width ", w);
  std::vector<int64_t> src(static_cast<size_t>(rows));  // x row -> its padded row
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t) src[t] = s * len + (t - off[s]);
  dxt->Resize(xt.dims());
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, src));
  LOOM_RETURN_IF_ERROR(GatherRows<T>(ctx, DataOf<T>(gt), dp.ptr, rows, w, dx));
  dxt->set_lod(xt.lod());
  return Finish(ctx);
}

// As sequence_ops.cc's UnpadOffsets: the offsets of sequence_unpad's output rows, from Length
// (checked against X's padded length). Length lives on the device: it is read back first.
StatusOr<std::vector<int64_t>> UnpadOffsets(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& lt = ctx.Input("Length");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  if (lt.numel() != seqs)
    return ctx.Error("Length has ", lt.numel(), " entries for ", seqs, " sequences");
  if (lt.dtype() != proto::INT64 && lt.dtype() != proto::INT32)
    return ctx.Error("Length must be int64 or int32, not ", DataTypeName(lt.dtype()));
  std::vector<int64_t> l64(lt.dtype() == proto::INT64 ? seqs : 0);
  std::vector<int32_t> l32(lt.dtype() == proto::INT32 ? seqs : 0);
  if (seqs > 0) {
    void* host = lt.dtype() == proto::INT64 ? static_cast<void*>(l64.data()) : l32.data();
    // cudaMemcpyDefault: Length may be on the device or (from a host op) in host memory.
    cudaError_t e =
        cudaMemcpyAsync(host, lt.raw_data(), lt.nbytes(), cudaMemcpyDefault, Stream(ctx));
    if (e == cudaSuccess) e = cudaStreamSynchronize(Stream(ctx));
    if (e != cudaSuccess)
      return ctx.Error("reading Length from the device failed: ", cudaGetErrorString(e));
  }
  std::vector<int64_t> off{0};
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = lt.dtype() == proto::INT64 ? l64[s] : l32[s];
    if (n < 0 || n > len) return ctx.Error("Length[", s, "] = ", n, " is not in [0, ", len, "]");
    off.push_back(off.back() + n);
  }
  return off;
}

template <typename T>
Status SequenceUnpad(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, UnpadOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  const int64_t w = SizeUnpadded(ctx, off);
  Tensor* out = ctx.Output("Out");
  T* o = MutableDataOf<T>(out, ctx.place());
  std::vector<int64_t> src(static_cast<size_t>(off.back()));  // out row -> its padded row
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t) src[t] = s * len + (t - off[s]);
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, src));
  LOOM_RETURN_IF_ERROR(GatherRows<T>(ctx, DataOf<T>(xt), dp.ptr, off.back(), w, o));
  out->set_lod({off});
  return Finish(ctx);
}

template <typename T>
Status SequenceUnpadGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, UnpadOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const Tensor& gt = ctx.Input("Out@GRAD");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  const int64_t w = len > 0 && seqs > 0 ? xt.numel() / (seqs * len) : 0;
  if (gt.numel() != off.back() * w)
    return ctx.Error("Out@GRAD ", gt.dims().ToString(), " does not hold the ", off.back(),
                     " unpadded rows of width ", w);
  std::vector<int64_t> src(static_cast<size_t>(seqs * len), -1);  // padded row -> Out row
  for (int64_t s = 0; s < seqs; ++s)
    for (int64_t r = 0; r < off[s + 1] - off[s]; ++r) src[s * len + r] = off[s] + r;
  dxt->Resize(xt.dims());
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, src));
  LOOM_RETURN_IF_ERROR(GatherRows<T>(ctx, DataOf<T>(gt), dp.ptr, seqs * len, w, dx));
  return Finish(ctx);
}

// ---- sequence_conv ----
// The geometry of a call, and its plan: [offsets (seqs + 1) | each row's sequence (rows)].
struct ConvGeom {
  int64_t rows = 0, d = 0, m = 0, cw = 0;  // cw: a context row's width, contextLength * D
  int len = 0, start = 0;
  std::vector<int64_t> plan;
  int64_t seqs = 0;
};

StatusOr<ConvGeom> ReadConvGeom(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  ConvGeom g;
  g.len = ctx.Attr<int>("contextLength");
  g.start = ctx.Attr<int>("contextStart");
  // Shape inference checks these before the kernel runs; here they bound the device accesses.
  if (xt.dims().size() != 2 || ft.dims().size() != 2)
    return ctx.Error("X ", xt.dims().ToString(), " and Filter ", ft.dims().ToString(),
                     " must be [rows, D] and [contextLength * D, M]");
  g.rows = xt.dims()[0];
  g.d = xt.dims()[1];
  g.m = ft.dims()[1];
  g.cw = g.len * g.d;
  if (g.len < 1 || ft.dims()[0] != g.cw)
    return ctx.Error("Filter ", ft.dims().ToString(), " must have contextLength * D = ", g.len,
                     " * ", g.d, " = ", g.cw, " rows");
  g.seqs = static_cast<int64_t>(off.size()) - 1;
  g.plan = off;
  g.plan.resize(static_cast<size_t>(g.seqs + 1 + g.rows));
  for (int64_t s = 0; s < g.seqs; ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t) g.plan[g.seqs + 1 + t] = s;
  return g;
}

// col[t, k * d + j] = x[t + start + k, j] when that row is in t's sequence, else 0.
template <typename T>
__global__ void ContextColsK(const T* x, const int64_t* off, const int64_t* seq, int64_t rows,
                             int64_t d, int len, int start, T* col) {
  const int64_t cw = len * d;
  LOOM_GRID_STRIDE(idx, rows * cw) {
    const int64_t t = idx / cw, k = idx % cw / d, j = idx % d, s = seq[t], r = t + start + k;
    col[idx] = r >= off[s] && r < off[s + 1] ? x[r * d + j] : T(0);
  }
}

// dx[r, j] = the sum over k of dcol[t, k * d + j] for t = r - start - k in r's sequence: the
// context entries that read x[r, j]. k descends, so t ascends, the order the CPU adds them in.
template <typename T>
__global__ void ContextColsGradK(const T* dcol, const int64_t* off, const int64_t* seq,
                                 int64_t rows, int64_t d, int len, int start, T* dx) {
  const int64_t cw = len * d;
  LOOM_GRID_STRIDE(idx, rows * d) {
    const int64_t r = idx / d, j = idx % d, s = seq[r];
    T acc = 0;
    for (int k = len - 1; k >= 0; --k) {
      const int64_t t = r - start - k;
      if (t >= off[s] && t < off[s + 1]) acc += dcol[t * cw + k * d + j];
    }
    dx[idx] = acc;
  }
}

template <typename T>
Status ContextCols(const KernelContext& ctx, const ConvGeom& g, const int64_t* plan, T* col) {
  ContextColsK<T><<<Blocks(g.rows * g.cw), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(ctx.Input("X")), plan, plan + g.seqs + 1, g.rows, g.d, g.len, g.start, col);
  return LaunchStatus(ctx);
}

template <typename T>
Status SequenceConv(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(ConvGeom g, ReadConvGeom(ctx));
  const Tensor& xt = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({g.rows, g.m}));
  T* o = MutableDataOf<T>(out, ctx.place());
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, g.plan));
  T* col;
  Tensor col_t = Scratch<T>(ctx, g.rows * g.cw, &col);
  LOOM_RETURN_IF_ERROR(ContextCols<T>(ctx, g, dp.ptr, col));
  LOOM_RETURN_IF_ERROR(
      Gemm<T>(ctx, false, false, g.rows, g.m, g.cw, col, DataOf<T>(ctx.Input("Filter")), o));
  out->set_lod(xt.lod());
  return Finish(ctx);
}

template <typename T>
Status SequenceConvGrad(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(ConvGeom g, ReadConvGeom(ctx));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  const Tensor& gt = ctx.Input("Out@GRAD");
  if (gt.numel() != g.rows * g.m)
    return ctx.Error("Out@GRAD ", gt.dims().ToString(), " is not [", g.rows, ", ", g.m, "]");
  Tensor* df = ctx.OutputOrNull("Filter@GRAD");
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!df && !dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(DevicePlan dp, Upload(ctx, g.plan));
  T* col;  // the context matrix, then (for X@GRAD) its gradient
  Tensor col_t = Scratch<T>(ctx, g.rows * g.cw, &col);
  const T* dout = DataOf<T>(gt);
  if (df) {
    df->Resize(ft.dims());
    LOOM_RETURN_IF_ERROR(ContextCols<T>(ctx, g, dp.ptr, col));
    LOOM_RETURN_IF_ERROR(
        Gemm<T>(ctx, true, false, g.cw, g.m, g.rows, col, dout, MutableDataOf<T>(df, ctx.place())));
  }
  if (dxt) {
    // dcol = Out@GRAD · Filterᵀ, then every context entry adds back to the x row it read.
    LOOM_RETURN_IF_ERROR(Gemm<T>(ctx, false, true, g.rows, g.cw, g.m, dout, DataOf<T>(ft), col));
    dxt->Resize(xt.dims());
    T* dx = MutableDataOf<T>(dxt, ctx.place());
    ContextColsGradK<T><<<Blocks(g.rows * g.d), kThreads, 0, Stream(ctx)>>>(
        col, dp.ptr, dp.ptr + g.seqs + 1, g.rows, g.d, g.len, g.start, dx);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    dxt->set_lod(xt.lod());
  }
  return Finish(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(sequence_conv, kCUDA, FP32, SequenceConv<float>);
LOOM_REGISTER_KERNEL(sequence_conv, kCUDA, FP64, SequenceConv<double>);
LOOM_REGISTER_KERNEL(sequence_conv_grad, kCUDA, FP32, SequenceConvGrad<float>);
LOOM_REGISTER_KERNEL(sequence_conv_grad, kCUDA, FP64, SequenceConvGrad<double>);
LOOM_REGISTER_KERNEL(sequence_expand, kCUDA, FP32, (SequenceExpand<float, false>));
LOOM_REGISTER_KERNEL(sequence_expand, kCUDA, FP64, (SequenceExpand<double, false>));
LOOM_REGISTER_KERNEL(sequence_expand, kCUDA, INT64, (SequenceExpand<int64_t, false>));
LOOM_REGISTER_KERNEL(sequence_expand_grad, kCUDA, FP32, (SequenceExpandGrad<float, false>));
LOOM_REGISTER_KERNEL(sequence_expand_grad, kCUDA, FP64, (SequenceExpandGrad<double, false>));
LOOM_REGISTER_KERNEL(sequence_expand_as, kCUDA, FP32, (SequenceExpand<float, true>));
LOOM_REGISTER_KERNEL(sequence_expand_as, kCUDA, FP64, (SequenceExpand<double, true>));
LOOM_REGISTER_KERNEL(sequence_expand_as, kCUDA, INT64, (SequenceExpand<int64_t, true>));
LOOM_REGISTER_KERNEL(sequence_expand_as_grad, kCUDA, FP32, (SequenceExpandGrad<float, true>));
LOOM_REGISTER_KERNEL(sequence_expand_as_grad, kCUDA, FP64, (SequenceExpandGrad<double, true>));
LOOM_REGISTER_KERNEL(sequence_pad, kCUDA, FP32, SequencePad<float>);
LOOM_REGISTER_KERNEL(sequence_pad, kCUDA, FP64, SequencePad<double>);
LOOM_REGISTER_KERNEL(sequence_pad_grad, kCUDA, FP32, SequencePadGrad<float>);
LOOM_REGISTER_KERNEL(sequence_pad_grad, kCUDA, FP64, SequencePadGrad<double>);
LOOM_REGISTER_KERNEL(sequence_unpad, kCUDA, FP32, SequenceUnpad<float>);
LOOM_REGISTER_KERNEL(sequence_unpad, kCUDA, FP64, SequenceUnpad<double>);
LOOM_REGISTER_KERNEL(sequence_unpad_grad, kCUDA, FP32, SequenceUnpadGrad<float>);
LOOM_REGISTER_KERNEL(sequence_unpad_grad, kCUDA, FP64, SequenceUnpadGrad<double>);

}  // namespace loom::ops::cuda
