// Sequence ops that rebuild their input's sequences (Fluid 1.x semantics): sequence_expand,
// sequence_expand_as, sequence_reshape, sequence_concat, sequence_slice, sequence_enumerate
// and lod_reset. Sequences are a tensor's last LoD level; a tensor without LoD counts each row
// as a sequence where an op allows it.
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

// The last LoD level, or one sequence per row when `rows_if_none` and there is no LoD.
StatusOr<std::vector<int64_t>> SeqOffsets(const KernelContext& ctx, const char* slot,
                                          bool rows_if_none) {
  const Tensor& t = ctx.Input(slot);
  if (t.has_lod()) return t.lod().back();
  if (!rows_if_none) return ctx.Error("input ", slot, " has no LoD: feed it as a LoD tensor");
  std::vector<int64_t> off;
  for (int64_t r = 0; r <= (t.dims().size() ? t.dims()[0] : 0); ++r) off.push_back(r);
  return off;
}

// Rows of `src` copied into `dst`, in the order of `rows`.
template <typename T>
void GatherRows(const T* src, int64_t w, const std::vector<int64_t>& rows, T* dst) {
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(src + rows[i] * w, src + (rows[i] + 1) * w, dst + static_cast<int64_t>(i) * w);
}

// ---- sequence_expand / sequence_expand_as: out rows are x rows repeated (PlanExpand:
// sequence_util.h) ----
Status ExpandInferShape(InferShapeContext* ctx) {
  DDim d = ctx->InputDim("X");
  if (d.size() < 1) return ctx->Error(ctx->DescribeInput("X"), " must have a row dim");
  d[0] = -1;
  ctx->SetOutputDim("Out", d);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T, bool kAs>
Status ExpandKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Expansion e, PlanExpand(ctx, kAs));
  const Tensor& x = ctx.Input("X");
  DDim d = x.dims();
  d[0] = static_cast<int64_t>(e.rows.size());
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  GatherRows(x.data<T>(), RowWidth(x), e.rows, out->mutable_data<T>(ctx.place()));
  out->set_lod(e.lod);
  return Status::OK();
}

template <typename T, bool kAs>
Status ExpandGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(Expansion e, PlanExpand(ctx, kAs));
  const Tensor& x = ctx.Input("X");
  const int64_t w = RowWidth(x);
  const T* g = ctx.Input("Out@GRAD").data<T>();
  dx->Resize(x.dims());
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  for (size_t i = 0; i < e.rows.size(); ++i)
    for (int64_t j = 0; j < w; ++j) o[e.rows[i] * w + j] += g[static_cast<int64_t>(i) * w + j];
  dx->set_lod(x.lod());
  return Status::OK();
}

// ---- sequence_reshape ----
Status ReshapeInferShape(InferShapeContext* ctx) {
  const int nd = ctx->Attr<int>("new_dim");
  if (nd < 1) return ctx->Error("new_dim must be >= 1, got ", nd);
  ctx->SetOutputDim("Out", DDim({-1, nd}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

StatusOr<LoD> ReshapedLoD(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SeqOffsets(ctx, "X", false));
  const int64_t w = RowWidth(ctx.Input("X")), nd = ctx.Attr<int>("new_dim");
  std::vector<int64_t> out{0};
  for (size_t i = 0; i + 1 < off.size(); ++i) {
    const int64_t n = (off[i + 1] - off[i]) * w;
    if (n % nd)
      return ctx.Error("sequence ", i, " holds ", n, " values, not a multiple of new_dim ", nd);
    out.push_back(out.back() + n / nd);
  }
  return LoD{out};
}

template <typename T>
Status ReshapeKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(LoD lod, ReshapedLoD(ctx));
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  *out = x;
  out->Resize(DDim({lod[0].back(), ctx.Attr<int>("new_dim")}));
  out->set_lod(lod);
  return Status::OK();
}

template <typename T>
Status ReshapeGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  Tensor g = ctx.Input("Out@GRAD");
  TensorCopy(g, ctx.place(), dx);
  dx->Resize(x.dims());
  dx->set_lod(x.lod());
  return Status::OK();
}

// ---- sequence_concat: sequence i of Out = sequence i of X[0], then of X[1], ... ----
StatusOr<std::vector<std::vector<int64_t>>> AllOffsets(const KernelContext& ctx) {
  std::vector<std::vector<int64_t>> offs;
  for (int k = 0; k < ctx.InputSize("X"); ++k) {
    const Tensor& t = ctx.Input("X", k);
    if (!t.has_lod()) return ctx.Error("input X[", k, "] has no LoD");
    offs.push_back(t.lod().back());
    if (offs.back().size() != offs[0].size())
      return ctx.Error("X[", k, "] has ", offs.back().size() - 1, " sequences, X[0] ",
                       offs[0].size() - 1);
    if (RowWidth(t) != RowWidth(ctx.Input("X", 0)))
      return ctx.Error("X[", k, "] rows are ", RowWidth(t), " wide, X[0] rows ",
                       RowWidth(ctx.Input("X", 0)));
  }
  return offs;
}

Status ConcatInferShape(InferShapeContext* ctx) {
  DDim d = ctx->InputDim("X", 0);
  d[0] = -1;
  ctx->SetOutputDim("Out", d);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X", 0));
  return Status::OK();
}

template <typename T>
Status ConcatKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto offs, AllOffsets(ctx));
  const Tensor& x0 = ctx.Input("X", 0);
  const int64_t w = RowWidth(x0);
  int64_t rows = 0;
  for (const auto& o : offs) rows += o.back();
  DDim d = x0.dims();
  d[0] = rows;
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  T* o = out->mutable_data<T>(ctx.place());
  std::vector<int64_t> lod{0};
  int64_t at = 0;
  for (size_t s = 0; s + 1 < offs[0].size(); ++s) {
    for (size_t k = 0; k < offs.size(); ++k) {
      const T* src = ctx.Input("X", static_cast<int>(k)).data<T>();
      const int64_t n = (offs[k][s + 1] - offs[k][s]) * w;
      std::copy(src + offs[k][s] * w, src + offs[k][s] * w + n, o + at * w);
      at += offs[k][s + 1] - offs[k][s];
    }
    lod.push_back(at);
  }
  out->set_lod({lod});
  return Status::OK();
}

template <typename T>
Status ConcatGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto offs, AllOffsets(ctx));
  const int64_t w = RowWidth(ctx.Input("X", 0));
  const T* g = ctx.Input("Out@GRAD").data<T>();
  std::vector<T*> dx(offs.size(), nullptr);
  for (size_t k = 0; k < offs.size(); ++k)
    if (Tensor* t = ctx.OutputOrNull("X@GRAD", static_cast<int>(k))) {
      t->Resize(ctx.Input("X", static_cast<int>(k)).dims());
      dx[k] = t->mutable_data<T>(ctx.place());
      t->set_lod(ctx.Input("X", static_cast<int>(k)).lod());
    }
  int64_t at = 0;
  for (size_t s = 0; s + 1 < offs[0].size(); ++s)
    for (size_t k = 0; k < offs.size(); ++k) {
      const int64_t n = offs[k][s + 1] - offs[k][s];
      if (dx[k]) std::copy(g + at * w, g + (at + n) * w, dx[k] + offs[k][s] * w);
      at += n;
    }
  return Status::OK();
}

// ---- sequence_slice: rows [Offset[i], Offset[i] + Length[i]) of sequence i ----
StatusOr<std::vector<int64_t>> SliceRows(const KernelContext& ctx, LoD* lod) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SeqOffsets(ctx, "X", false));
  const Tensor& ot = ctx.Input("Offset");
  const Tensor& lt = ctx.Input("Length");
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1;
  if (ot.numel() != seqs || lt.numel() != seqs)
    return ctx.Error("Offset and Length need one entry per sequence (", seqs, "), have ",
                     ot.numel(), " and ", lt.numel());
  auto at = [](const Tensor& t, int64_t i) {
    return t.dtype() == proto::INT64 ? t.data<int64_t>()[i]
                                     : static_cast<int64_t>(t.data<int32_t>()[i]);
  };
  std::vector<int64_t> rows, out{0};
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t b = at(ot, s), n = at(lt, s);
    if (b < 0 || n < 0 || b + n > off[s + 1] - off[s])
      return ctx.Error("slice [", b, ", ", b + n, ") is outside sequence ", s, " of ",
                       off[s + 1] - off[s], " rows");
    for (int64_t r = 0; r < n; ++r) rows.push_back(off[s] + b + r);
    out.push_back(out.back() + n);
  }
  *lod = {out};
  return rows;
}

template <typename T>
Status SliceKernel(const KernelContext& ctx) {
  LoD lod;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows, SliceRows(ctx, &lod));
  const Tensor& x = ctx.Input("X");
  DDim d = x.dims();
  d[0] = static_cast<int64_t>(rows.size());
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  GatherRows(x.data<T>(), RowWidth(x), rows, out->mutable_data<T>(ctx.place()));
  out->set_lod(lod);
  return Status::OK();
}

template <typename T>
Status SliceGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LoD lod;
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> rows, SliceRows(ctx, &lod));
  const Tensor& x = ctx.Input("X");
  const int64_t w = RowWidth(x);
  const T* g = ctx.Input("Out@GRAD").data<T>();
  dx->Resize(x.dims());
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  for (size_t i = 0; i < rows.size(); ++i)
    std::copy(g + static_cast<int64_t>(i) * w, g + static_cast<int64_t>(i + 1) * w,
              o + rows[i] * w);
  dx->set_lod(x.lod());
  return Status::OK();
}

// ---- sequence_enumerate: Out[t] = ids t .. t + win_size - 1 of t's sequence (pad_value past
// its end) ----
template <typename I>
Status EnumerateKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SeqOffsets(ctx, "X", false));
  const Tensor& x = ctx.Input("X");
  if (RowWidth(x) != 1)
    return ctx.Error("X must hold one id per row, rows are ", RowWidth(x), " wide");
  const int64_t win = ctx.Attr<int>("win_size");
  const I pad = static_cast<I>(ctx.Attr<int>("pad_value"));
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({x.dims()[0], win}));
  I* o = out->mutable_data<I>(ctx.place());
  const I* ids = x.data<I>();
  for (size_t s = 0; s + 1 < off.size(); ++s)
    for (int64_t t = off[s]; t < off[s + 1]; ++t)
      for (int64_t k = 0; k < win; ++k) o[t * win + k] = t + k < off[s + 1] ? ids[t + k] : pad;
  out->set_lod(x.lod());
  return Status::OK();
}

// ---- lod_reset ----
Status LodResetKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LoD lod;
  if (ctx.InputSize("Y") > 0) {
    const Tensor& y = ctx.Input("Y");
    if (y.has_lod()) {
      lod = y.lod();  // every level (a 2-level Y gives X beam search's source grouping)
    } else {          // Y holds the offsets
      std::vector<int64_t> off;
      for (int64_t i = 0; i < y.numel(); ++i)
        off.push_back(y.dtype() == proto::INT64 ? y.data<int64_t>()[i] : y.data<int32_t>()[i]);
      lod = {off};
    }
  } else {
    const auto& t = ctx.Attr<std::vector<int>>("target_lod");
    if (t.empty()) return ctx.Error("give Y or target_lod");
    lod = {std::vector<int64_t>(t.begin(), t.end())};
  }
  if (ctx.Attr<bool>("append")) {  // lod_append: the new offsets become X's last level
    LoD full = x.lod();
    full.push_back(lod.back());
    lod = std::move(full);
  }
  LOOM_RETURN_IF_ERROR(CheckLoD(lod, x.dims().size() ? x.dims()[0] : 0, ctx.Where()));
  Tensor* out = ctx.Output("Out");
  *out = x;
  out->set_lod(lod);
  return Status::OK();
}

Status LodResetGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  *dx = ctx.Input("Out@GRAD");
  dx->set_lod(ctx.Input("X").lod());
  return Status::OK();
}

template <typename T>
std::vector<proto::OpDesc> GradOf(const OpDesc& fwd, std::initializer_list<const char*> ins) {
  return {nn::MakeGradOp(fwd, ins, {"X"})};
}

#define LOOM_SEQ2_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

Status SameAsX(InferShapeContext* ctx) {
  if (ctx->OutputSize("X@GRAD") == 0) return Status::OK();
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

Status MultiXGradShape(InferShapeContext* ctx) {
  for (int i = 0; i < ctx->OutputSize("X@GRAD"); ++i) {
    ctx->SetOutputDim("X@GRAD", ctx->InputDim("X", i), i);
    ctx->SetOutputDtype("X@GRAD", ctx->InputDtype("X", i), i);
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(sequence_expand)
    .Doc(
        "Out = each sequence of X (each row when X has no LoD) repeated as many times as the "
        "matching sequence of Y's LoD level ref_level is long.")
    .Input("X", "the tensor to repeat")
    .Input("Y", "a LoD tensor whose level ref_level gives the repeats")
    .Output("Out", "the repeated rows, with a LoD")
    .Attr<int>("ref_level", -1, "the level of Y's LoD (-1: the last)")
    .SetsLoD()
    .InferShape(ExpandInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Y", "Out@GRAD"});
    })
    .Kernel(Place::kCPU, proto::FP32, ExpandKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, ExpandKernel<double, false>)
    .Kernel(Place::kCPU, proto::INT64, ExpandKernel<int64_t, false>);

LOOM_REGISTER_OP(sequence_expand_grad)
    .Doc("X@GRAD = Out@GRAD summed over each row's copies.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sequence_expand")
    .SetsLoD()
    .InferShape(SameAsX)
    .Kernel(Place::kCPU, proto::FP32, ExpandGradKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, ExpandGradKernel<double, false>);

LOOM_REGISTER_OP(sequence_expand_as)
    .Doc("Out = row i of X repeated as many times as sequence i of Y is long; Out has Y's LoD.")
    .Input("X", "[sequences of Y, ...]")
    .Input("Y", "a LoD tensor")
    .Output("Out", "the repeated rows")
    .SetsLoD()
    .InferShape(ExpandInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Y", "Out@GRAD"});
    })
    .Kernel(Place::kCPU, proto::FP32, ExpandKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, ExpandKernel<double, true>)
    .Kernel(Place::kCPU, proto::INT64, ExpandKernel<int64_t, true>);

LOOM_REGISTER_OP(sequence_expand_as_grad)
    .Doc("X@GRAD = Out@GRAD summed over each row's copies.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(SameAsX)
    .Kernel(Place::kCPU, proto::FP32, ExpandGradKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, ExpandGradKernel<double, true>);

LOOM_REGISTER_OP(sequence_reshape)
    .Doc(
        "Out = X with each sequence's values laid out new_dim wide (a sequence of L rows of "
        "width D becomes L * D / new_dim rows).")
    .Input("X", "a LoD tensor [rows, D]")
    .Output("Out", "[rows', new_dim]")
    .Attr<int>("new_dim", 1, "the new row width")
    .SetsLoD()
    .InferShape(ReshapeInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Out@GRAD"});
    })
    .LOOM_SEQ2_KERNELS(ReshapeKernel);

LOOM_REGISTER_OP(sequence_reshape_grad)
    .Doc("X@GRAD = Out@GRAD laid out as X.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sequence_reshape")
    .SetsLoD()
    .InferShape(SameAsX)
    .LOOM_SEQ2_KERNELS(ReshapeGradKernel);

LOOM_REGISTER_OP(sequence_concat)
    .Doc("Out's sequence i = sequence i of X[0], then of X[1], ... (rows of equal width).")
    .Input("X", "LoD tensors with as many sequences each", /*duplicable=*/true)
    .Output("Out", "the concatenated sequences")
    .SetsLoD()
    .InferShape(ConcatInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Out@GRAD"});
    })
    .LOOM_SEQ2_KERNELS(ConcatKernel);

LOOM_REGISTER_OP(sequence_concat_grad)
    .Doc("X@GRAD[k] = X[k]'s rows of Out@GRAD.")
    .Input("X", "forward X", true)
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradients of X", true, true)
    .SetsLoD()
    .InferShape(MultiXGradShape)
    .LOOM_SEQ2_KERNELS(ConcatGradKernel);

LOOM_REGISTER_OP(sequence_slice)
    .Doc("Out's sequence i = rows [Offset[i], Offset[i] + Length[i]) of sequence i of X.")
    .Input("X", "a LoD tensor")
    .Input("Offset", "int64 [sequences, 1]")
    .Input("Length", "int64 [sequences, 1]")
    .Output("Out", "the slices")
    .SetsLoD()
    .InferShape(ExpandInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Offset", "Length", "Out@GRAD"});
    })
    .LOOM_SEQ2_KERNELS(SliceKernel);

LOOM_REGISTER_OP(sequence_slice_grad)
    .Doc("X@GRAD = Out@GRAD's rows back in place, zeros elsewhere.")
    .Input("X", "forward X")
    .Input("Offset", "forward Offset")
    .Input("Length", "forward Length")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(SameAsX)
    .LOOM_SEQ2_KERNELS(SliceGradKernel);

LOOM_REGISTER_OP(sequence_enumerate)
    .Doc("Out[t] = the ids t .. t + win_size - 1 of t's sequence, pad_value past its end.")
    .Input("X", "a LoD tensor of ids [rows, 1]")
    .Output("Out", "[rows, win_size], X's LoD")
    .Attr<int>("win_size", 2, "the window")
    .Attr<int>("pad_value", 0, "the id past a sequence's end")
    .SetsLoD()
    .InferShape([](InferShapeContext* ctx) {
      if (ctx->Attr<int>("win_size") < 1)
        return ctx->Error("win_size must be >= 1, got ", ctx->Attr<int>("win_size"));
      ctx->SetOutputDim("Out", DDim({ctx->InputDim("X")[0], ctx->Attr<int>("win_size")}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::INT64, EnumerateKernel<int64_t>)
    .Kernel(Place::kCPU, proto::INT32, EnumerateKernel<int32_t>);

LOOM_REGISTER_OP(lod_reset)
    .Doc(
        "Out = X with the LoD of Y (every level; or Y's values as offsets), or target_lod; with "
        "append, X's LoD with those offsets added as a last level.")
    .Input("X", "the tensor")
    .Input("Y", "a LoD tensor, or int offsets", false, true)
    .Output("Out", "X's values with the new LoD")
    .Attr<std::vector<int>>("target_lod", {}, "offsets, when Y is absent")
    .Attr<bool>("append", false,
                "keep X's LoD and add the new offsets (Y's last level) as its last level")
    .SetsLoD()
    .InferShape([](InferShapeContext* ctx) {
      ctx->ShareDimAndDtype("X", "Out");
      return Status::OK();
    })
    .GradMaker([](const OpDesc& fwd) {
      return GradOf<void>(fwd, {"X", "Out@GRAD"});
    })
    .Kernel(Place::kCPU, proto::FP32, LodResetKernel)
    .Kernel(Place::kCPU, proto::FP64, LodResetKernel)
    .Kernel(Place::kCPU, proto::INT64, LodResetKernel)
    .Kernel(Place::kCPU, proto::INT32, LodResetKernel);

LOOM_REGISTER_OP(lod_reset_grad)
    .Doc("X@GRAD = Out@GRAD with X's LoD.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("lod_reset")
    .SetsLoD()
    .InferShape(SameAsX)
    .Kernel(Place::kCPU, proto::FP32, LodResetGradKernel)
    .Kernel(Place::kCPU, proto::FP64, LodResetGradKernel);

}  // namespace loom::ops
