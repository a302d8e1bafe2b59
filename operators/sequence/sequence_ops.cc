// Sequence ops over LoD tensors (framework/lod.h): sequence_pool, sequence_softmax,
// sequence_mask, sequence_pad and sequence_unpad, with Fluid 1.x's semantics. The sequences are
// those of the input's last LoD level; an op that pools a level away gives its output the
// levels above.
#include <algorithm>
#include <cmath>
#include <limits>

#include "operators/common.h"
#include "operators/math/blas.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

// ---- sequence_pool ----
Status SequencePoolInferShape(InferShapeContext* ctx) {
  const std::string& type = ctx->Attr<std::string>("pooltype");
  static const char* kTypes[] = {"SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST"};
  if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes))
    return ctx->Error("pooltype '", type, "' is not SUM, AVERAGE, SQRT, MAX, LAST or FIRST");
  DDim x = ctx->InputDim("X");
  if (x.size() < 1) return ctx->Error(ctx->DescribeInput("X"), " must have a row dim");
  DDim out = x;
  out[0] = -1;  // one row per sequence
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  if (ctx->OutputSize("MaxIndex") > 0) {
    ctx->SetOutputDim("MaxIndex", out);
    ctx->SetOutputDtype("MaxIndex", proto::INT64);
  }
  return Status::OK();
}

template <typename T>
Status SequencePoolKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const std::string& type = ctx.Attr<std::string>("pooltype");
  const T pad = static_cast<T>(ctx.Attr<float>("pad_value"));
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1, w = RowWidth(xt);
  DDim d = xt.dims();
  d[0] = seqs;
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  T* o = out->mutable_data<T>(ctx.place());
  int64_t* mi = nullptr;
  if (type == "MAX" && ctx.OutputSize("MaxIndex") > 0) {
    Tensor* m = ctx.Output("MaxIndex");
    m->Resize(d);
    mi = m->mutable_data<int64_t>(ctx.place());
  }
  const T* x = xt.data<T>();
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t b = off[s], e = off[s + 1], n = e - b;
    T* os = o + s * w;
    if (n == 0) {
      std::fill(os, os + w, pad);
      if (mi) std::fill(mi + s * w, mi + (s + 1) * w, -1);
      continue;
    }
    if (type == "LAST" || type == "FIRST") {
      const T* row = x + (type == "LAST" ? e - 1 : b) * w;
      std::copy(row, row + w, os);
      continue;
    }
    if (type == "MAX") {
      for (int64_t j = 0; j < w; ++j) {
        int64_t best = b;
        for (int64_t r = b + 1; r < e; ++r)
          if (x[r * w + j] > x[best * w + j]) best = r;
        os[j] = x[best * w + j];
        if (mi) mi[s * w + j] = best;
      }
      continue;
    }
    std::fill(os, os + w, T(0));
    for (int64_t r = b; r < e; ++r)
      for (int64_t j = 0; j < w; ++j) os[j] += x[r * w + j];
    const T div = type == "AVERAGE" ? static_cast<T>(n)
                  : type == "SQRT"  ? std::sqrt(static_cast<T>(n))
                                    : T(1);
    if (div != T(1))
      for (int64_t j = 0; j < w; ++j) os[j] /= div;
  }
  out->set_lod(UpperLevels(xt.lod()));
  return Status::OK();
}

template <typename T>
Status SequencePoolGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const std::string& type = ctx.Attr<std::string>("pooltype");
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1, w = RowWidth(xt);
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const T* x = xt.data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  std::fill(dx, dx + xt.numel(), T(0));
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t b = off[s], e = off[s + 1], n = e - b;
    if (n == 0) continue;
    const T* gs = g + s * w;
    if (type == "LAST" || type == "FIRST") {
      T* row = dx + (type == "LAST" ? e - 1 : b) * w;
      std::copy(gs, gs + w, row);
    } else if (type == "MAX") {
      for (int64_t j = 0; j < w; ++j) {
        int64_t best = b;  // recomputed: the first maximum, as the forward pass picks
        for (int64_t r = b + 1; r < e; ++r)
          if (x[r * w + j] > x[best * w + j]) best = r;
        dx[best * w + j] = gs[j];
      }
    } else {
      const T div = type == "AVERAGE" ? static_cast<T>(n)
                    : type == "SQRT"  ? std::sqrt(static_cast<T>(n))
                                      : T(1);
      for (int64_t r = b; r < e; ++r)
        for (int64_t j = 0; j < w; ++j) dx[r * w + j] = gs[j] / div;
    }
  }
  dxt->set_lod(xt.lod());
  return Status::OK();
}

// ---- sequence_softmax ----
Status SequenceSoftmaxInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() == 2 && x[1] >= 0 && x[1] != 1)
    return ctx->Error(ctx->DescribeInput("X"), " must be [rows] or [rows, 1]");
  if (x.size() < 1 || x.size() > 2)
    return ctx->Error(ctx->DescribeInput("X"), " must be [rows] or [rows, 1]");
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
Status SequenceSoftmaxKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    const int64_t b = off[s], e = off[s + 1];
    if (b == e) continue;
    const T m = *std::max_element(x + b, x + e);
    T sum = 0;
    for (int64_t i = b; i < e; ++i) sum += (o[i] = std::exp(x[i] - m));
    for (int64_t i = b; i < e; ++i) o[i] /= sum;
  }
  out->set_lod(xt.lod());
  return Status::OK();
}

template <typename T>
Status SequenceSoftmaxGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const T* y = ctx.Input("Out").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    const int64_t b = off[s], e = off[s + 1];
    T dot = 0;
    for (int64_t i = b; i < e; ++i) dot += g[i] * y[i];
    for (int64_t i = b; i < e; ++i) dx[i] = y[i] * (g[i] - dot);
  }
  dxt->set_lod(ctx.Input("X").lod());
  return Status::OK();
}

// ---- sequence_mask ----
// Y[i, j] = j < X[i] for j < maxlen (maxlen < 0: the largest X).
Status SequenceMaskInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  std::vector<int64_t> d = x.vec();
  d.push_back(ctx->Attr<int>("maxlen") >= 0 ? ctx->Attr<int>("maxlen") : -1);
  ctx->SetOutputDim("Y", DDim(d));
  ctx->SetOutputDtype("Y", static_cast<DataType>(ctx->Attr<int>("out_dtype")));
  return Status::OK();
}

template <typename I>
Status SequenceMaskKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const I* len = xt.data<I>();
  int64_t maxlen = ctx.Attr<int>("maxlen");
  if (maxlen < 0) {
    maxlen = 0;
    for (int64_t i = 0; i < xt.numel(); ++i) maxlen = std::max<int64_t>(maxlen, len[i]);
  }
  std::vector<int64_t> d = xt.dims().vec();
  d.push_back(maxlen);
  Tensor* y = ctx.Output("Y");
  y->Resize(DDim(d));
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("out_dtype"));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < xt.numel(); ++i)
      for (int64_t j = 0; j < maxlen; ++j) o[i * maxlen + j] = j < len[i] ? T(1) : T(0);
    return Status::OK();
  };
  switch (dtype) {
    case proto::FP32: return fill(y->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(y->mutable_data<double>(ctx.place()));
    case proto::INT32: return fill(y->mutable_data<int32_t>(ctx.place()));
    case proto::INT64: return fill(y->mutable_data<int64_t>(ctx.place()));
    case proto::BOOL: return fill(y->mutable_data<bool>(ctx.place()));
    default: return ctx.Error("out_dtype ", DataTypeName(dtype), " is not supported");
  }
}

// ---- sequence_pad / sequence_unpad ----
// Out [seqs, padded_length, ...] with rows past a sequence's end = PadValue; Length [seqs]
// the lengths. padded_length < 0: the longest sequence.
Status SequencePadInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 1) return ctx->Error(ctx->DescribeInput("X"), " must have a row dim");
  std::vector<int64_t> d{-1, ctx->Attr<int>("padded_length") >= 0
                                 ? static_cast<int64_t>(ctx->Attr<int>("padded_length"))
                                 : -1};
  for (int i = 1; i < x.size(); ++i) d.push_back(x[i]);
  ctx->SetOutputDim("Out", DDim(d));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("Length", DDim({-1}));
  ctx->SetOutputDtype("Length", proto::INT64);
  return Status::OK();
}

template <typename T>
Status SequencePadKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(PadPlan plan, PlanPad(ctx));
  const std::vector<int64_t>& off = plan.off;
  const int64_t seqs = plan.seqs, w = plan.w, len = plan.len;
  const Tensor& xt = ctx.Input("X");
  const Tensor& pv = ctx.Input("PadValue");
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  Tensor* lt = ctx.Output("Length");
  int64_t* lengths = lt->mutable_data<int64_t>(ctx.place());
  const T* x = xt.data<T>();
  const T* p = pv.data<T>();
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = off[s + 1] - off[s];
    lengths[s] = n;
    std::copy(x + off[s] * w, x + off[s + 1] * w, o + s * len * w);
    for (int64_t r = n; r < len; ++r)
      for (int64_t j = 0; j < w; ++j) o[(s * len + r) * w + j] = p[pv.numel() == 1 ? 0 : j];
  }
  return Status::OK();
}

template <typename T>
Status SequencePadGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& gt = ctx.Input("Out@GRAD");
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1, w = RowWidth(xt);
  const int64_t len = gt.dims()[1];
  const T* g = gt.data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  for (int64_t s = 0; s < seqs; ++s)
    std::copy(g + s * len * w, g + (s * len + off[s + 1] - off[s]) * w, dx + off[s] * w);
  dxt->set_lod(xt.lod());
  return Status::OK();
}

Status SequenceUnpadInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 2) return ctx->Error(ctx->DescribeInput("X"), " must be [seqs, length, ...]");
  std::vector<int64_t> d{-1};
  for (int i = 2; i < x.size(); ++i) d.push_back(x[i]);
  ctx->SetOutputDim("Out", DDim(d));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status SequenceUnpadKernel(const KernelContext& ctx);

// The offsets of sequence_unpad's output rows, from Length (checked against X's padded length).
StatusOr<std::vector<int64_t>> UnpadOffsets(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& lt = ctx.Input("Length");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  if (lt.numel() != seqs)
    return ctx.Error("Length has ", lt.numel(), " entries for ", seqs, " sequences");
  if (lt.dtype() != proto::INT64 && lt.dtype() != proto::INT32)
    return ctx.Error("Length must be int64 or int32, not ", DataTypeName(lt.dtype()));
  std::vector<int64_t> off{0};
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t n = lt.dtype() == proto::INT64 ? lt.data<int64_t>()[s] : lt.data<int32_t>()[s];
    if (n < 0 || n > len) return ctx.Error("Length[", s, "] = ", n, " is not in [0, ", len, "]");
    off.push_back(off.back() + n);
  }
  return off;
}

template <typename T>
Status SequenceUnpadGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, UnpadOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  const int64_t w = len > 0 && seqs > 0 ? xt.numel() / (seqs * len) : 0;
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  std::fill(dx, dx + xt.numel(), T(0));
  for (int64_t s = 0; s < seqs; ++s)
    std::copy(g + off[s] * w, g + off[s + 1] * w, dx + s * len * w);
  return Status::OK();
}

template <typename T>
Status SequenceUnpadKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, UnpadOffsets(ctx));
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  const int64_t w = SizeUnpadded(ctx, off);
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  const T* x = xt.data<T>();
  for (int64_t s = 0; s < seqs; ++s)
    std::copy(x + s * len * w, x + (s * len + off[s + 1] - off[s]) * w, o + off[s] * w);
  out->set_lod({off});
  return Status::OK();
}

// ---- sequence_conv ----
// For every row t of a sequence, the context rows t + contextStart .. t + contextStart +
// contextLength - 1 of the same sequence (zeros outside it), side by side, times Filter
// [contextLength * D, M].
Status SequenceConvInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), f = ctx->InputDim("Filter");
  const int len = ctx->Attr<int>("contextLength");
  if (len < 1) return ctx->Error("contextLength must be >= 1, got ", len);
  if (ctx->Attr<int>("contextStride") != 1)
    return ctx->Error("contextStride must be 1 (as Fluid's), got ",
                      ctx->Attr<int>("contextStride"));
  if (x.size() != 2) return ctx->Error(ctx->DescribeInput("X"), " must be [rows, D]");
  if (f.size() != 2) return ctx->Error(ctx->DescribeInput("Filter"), " must be 2-D");
  if (x[1] >= 0 && f[0] >= 0 && f[0] != len * x[1])
    return ctx->Error(ctx->DescribeInput("Filter"), " must have contextLength * D = ", len, " * ",
                      x[1], " = ", len * x[1], " rows");
  ctx->SetOutputDim("Out", DDim({x[0], f[1]}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// col [rows, len * D]: the context of every row (zeros outside its sequence).
template <typename T>
void ContextCols(const std::vector<int64_t>& off, const T* x, int64_t d, int len, int start,
                 T* col) {
  const int64_t w = len * d;
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t)
      for (int k = 0; k < len; ++k) {
        const int64_t r = t + start + k;
        T* dst = col + t * w + k * d;
        if (r < off[s] || r >= off[s + 1]) {
          std::fill(dst, dst + d, T(0));
        } else {
          std::copy(x + r * d, x + (r + 1) * d, dst);
        }
      }
}

template <typename T>
Status SequenceConvKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  const int len = ctx.Attr<int>("contextLength"), start = ctx.Attr<int>("contextStart");
  const int64_t rows = xt.dims()[0], d = xt.dims()[1], m = ft.dims()[1];
  std::vector<T> col(static_cast<size_t>(rows * len * d));
  ContextCols(off, xt.data<T>(), d, len, start, col.data());
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({rows, m}));
  Gemm(false, false, rows, m, len * d, col.data(), ft.data<T>(), out->mutable_data<T>(ctx.place()));
  out->set_lod(xt.lod());
  return Status::OK();
}

template <typename T>
Status SequenceConvGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& ft = ctx.Input("Filter");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const int len = ctx.Attr<int>("contextLength"), start = ctx.Attr<int>("contextStart");
  const int64_t rows = xt.dims()[0], d = xt.dims()[1], m = ft.dims()[1], w = len * d;
  std::vector<T> col(static_cast<size_t>(rows * w));
  if (Tensor* df = ctx.OutputOrNull("Filter@GRAD")) {
    ContextCols(off, xt.data<T>(), d, len, start, col.data());
    Gemm(true, false, w, m, rows, col.data(), g, df->mutable_data<T>(ctx.place()));
  }
  if (Tensor* dxt = ctx.OutputOrNull("X@GRAD")) {
    // dcol = dOut · Filterᵀ, then every context slot adds back to the row it came from.
    Gemm(false, true, rows, w, m, g, ft.data<T>(), col.data());
    T* dx = dxt->mutable_data<T>(ctx.place());
    std::fill(dx, dx + xt.numel(), T(0));
    for (size_t s = 0; s + 1 < off.size(); ++s)
      for (int64_t t = off[s]; t < off[s + 1]; ++t)
        for (int k = 0; k < len; ++k) {
          const int64_t r = t + start + k;
          if (r < off[s] || r >= off[s + 1]) continue;
          const T* src = col.data() + t * w + k * d;
          for (int64_t j = 0; j < d; ++j) dx[r * d + j] += src[j];
        }
    dxt->set_lod(xt.lod());
  }
  return Status::OK();
}

#define LOOM_SEQ_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(sequence_pool)
    .Doc(
        "Out[s] = the pooling (SUM, AVERAGE, SQRT = sum / sqrt(length), MAX, LAST, FIRST) of "
        "the rows of sequence s of X (its last LoD level); an empty sequence gives pad_value. "
        "Out keeps X's higher LoD levels.")
    .Input("X", "a LoD tensor [rows, ...]")
    .Output("Out", "[sequences, ...]")
    .Output("MaxIndex", "MAX: the row each maximum came from", false, true)
    .Attr<std::string>("pooltype", "AVERAGE", "SUM, AVERAGE, SQRT, MAX, LAST or FIRST")
    .Attr<float>("pad_value", 0.0f, "the value of an empty sequence's row")
    .Attr<bool>("is_test", false, "accepted (no effect)")
    .SetsLoD()
    .InferShape(SequencePoolInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .LOOM_SEQ_KERNELS(SequencePoolKernel);

LOOM_REGISTER_OP(sequence_pool_grad)
    .Doc("X@GRAD of sequence_pool.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sequence_pool")
    .SetsLoD()
    .InferShape(GradInferShape)
    .LOOM_SEQ_KERNELS(SequencePoolGradKernel);

LOOM_REGISTER_OP(sequence_softmax)
    .Doc("Out = softmax of X within each sequence (X is [rows] or [rows, 1]).")
    .Input("X", "a LoD tensor of scores")
    .Output("Out", "per-sequence probabilities, X's LoD")
    .SetsLoD()
    .InferShape(SequenceSoftmaxInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out", "Out@GRAD"}, {"X"})};
    })
    .LOOM_SEQ_KERNELS(SequenceSoftmaxKernel);

LOOM_REGISTER_OP(sequence_softmax_grad)
    .Doc("X@GRAD = Out * (Out@GRAD - sum over the sequence of Out@GRAD * Out).")
    .Input("X", "forward X")
    .Input("Out", "forward Out")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(GradInferShape)
    .LOOM_SEQ_KERNELS(SequenceSoftmaxGradKernel);

LOOM_REGISTER_OP(sequence_mask)
    .Doc("Y[..., j] = 1 if j < X[...] else 0, for j < maxlen (maxlen < 0: max of X).")
    .Input("X", "lengths (int32 or int64)")
    .Output("Y", "the mask, X's dims plus maxlen")
    .Attr<int>("maxlen", -1, "the mask's width; < 0: the largest length")
    .Attr<int>("out_dtype", proto::INT64, "DataType code of Y", ValidDtype())
    .InferShape(SequenceMaskInferShape)
    .Kernel(Place::kCPU, proto::INT64, SequenceMaskKernel<int64_t>)
    .Kernel(Place::kCPU, proto::INT32, SequenceMaskKernel<int32_t>);

LOOM_REGISTER_OP(sequence_pad)
    .Doc(
        "Out[s, r] = row r of sequence s of X for r < its length, else PadValue; Length[s] = "
        "the length. padded_length < 0 pads to the longest sequence.")
    .Input("X", "a LoD tensor [rows, ...]")
    .Input("PadValue", "1 element, or a row's width")
    .Output("Out", "[sequences, padded_length, ...]")
    .Output("Length", "int64 lengths")
    .Attr<int>("padded_length", -1, "the padded length; < 0: the longest sequence")
    .SetsLoD()
    .InferShape(SequencePadInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .LOOM_SEQ_KERNELS(SequencePadKernel);

LOOM_REGISTER_OP(sequence_pad_grad)
    .Doc("X@GRAD = the unpadded rows of Out@GRAD.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sequence_pad")
    .SetsLoD()
    .InferShape(GradInferShape)
    .LOOM_SEQ_KERNELS(SequencePadGradKernel);

LOOM_REGISTER_OP(sequence_unpad)
    .Doc("Out = the first Length[s] rows of each X[s], as one LoD tensor of those sequences.")
    .Input("X", "[sequences, length, ...]")
    .Input("Length", "lengths (int64 or int32)")
    .Output("Out", "a LoD tensor [rows, ...]")
    .SetsLoD()
    .InferShape(SequenceUnpadInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Length", "Out@GRAD"}, {"X"})};
    })
    .LOOM_SEQ_KERNELS(SequenceUnpadKernel);

LOOM_REGISTER_OP(sequence_unpad_grad)
    .Doc("X@GRAD = Out@GRAD's rows back in place, zeros in the padding.")
    .Input("X", "forward X")
    .Input("Length", "forward Length")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(GradInferShape)
    .LOOM_SEQ_KERNELS(SequenceUnpadGradKernel);

LOOM_REGISTER_OP(sequence_conv)
    .Doc(
        "Out[t] = [X[t + contextStart], ..., X[t + contextStart + contextLength - 1]] · Filter "
        "for every row t, the context taken within t's sequence (zeros outside it).")
    .Input("X", "a LoD tensor [rows, D]")
    .Input("Filter", "[contextLength * D, M]")
    .Output("Out", "[rows, M], X's LoD")
    .Attr<int>("contextLength", 3, "rows in a context window")
    .Attr<int>("contextStart", -1, "offset of the window's first row (e.g. -1: centred on 3)")
    .Attr<int>("contextStride", 1, "must be 1")
    .Attr<bool>("paddingTrainable", false, "accepted; must be false (zero padding)")
    .SetsLoD()
    .InferShape(SequenceConvInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Filter", "Out@GRAD"}, {"X", "Filter"})};
    })
    .LOOM_SEQ_KERNELS(SequenceConvKernel);

LOOM_REGISTER_OP(sequence_conv_grad)
    .Doc("X@GRAD and Filter@GRAD of sequence_conv.")
    .Input("X", "forward X")
    .Input("Filter", "forward Filter")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .AttrsFrom("sequence_conv")
    .SetsLoD()
    .InferShape(GradInferShape)
    .LOOM_SEQ_KERNELS(SequenceConvGradKernel);

}  // namespace loom::ops
