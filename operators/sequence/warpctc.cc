// warpctc: the CTC loss (Graves et al. 2006) of Fluid's warpctc op, computed here in log space.
// For a sequence of unscaled logits x [T, C] (softmax over C inside) and a label l [L] with
// values in [0, C) other than blank, with z = (blank, l_1, blank, ..., l_L, blank) of S = 2L + 1
// states:
//   alpha[t, s] = log y[t, z_s] + logsumexp(alpha[t-1, s], alpha[t-1, s-1],
//                                           alpha[t-1, s-2] when z_s != blank, z_s != z_{s-2})
//   beta[t, s]  = logsumexp over the same moves forward of beta[t+1, s'] + log y[t+1, z_s']
//   log P = logsumexp(alpha[T-1, S-1], alpha[T-1, S-2]),  Loss = -log P
// beta excludes step t's emission, so alpha[t, s] + beta[t, s] - log P is the log occupancy of
// state s at step t, and dLoss/dx[t, c] = y[t, c] - sum_{s: z_s = c} occupancy[t, s].
// The forward op writes that gradient (WarpCTCGrad, Logits' layout); warpctc_grad scales it by
// Loss@GRAD of the sequence and, with norm_by_times, by 1 / T (norm_by_times leaves the loss
// alone, as in Fluid). A label that no alignment fits (L + repeated neighbours > T) gives a
// loss of 0 and a zero gradient: warp-ctc's convention, which Fluid inherits.
// Logits: a LoD tensor [rows, C] with Label a LoD tensor [label rows, 1]; or, with LogitsLength
// and LabelLength, padded time-major Logits [max T, batch, C] and Label [batch, max L].
#include <algorithm>
#include <cmath>
#include <limits>

#include "operators/common.h"
#include "operators/nn/nn_util.h"
#include "operators/sequence/sequence_util.h"

namespace loom::ops {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double LogAdd(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

// Where each sequence's steps and labels are: step t of sequence s is row
// step_row(s, t) = step_begin[s] + t * step_stride of Logits; label j is label_begin[s] + j.
struct CtcLayout {
  std::vector<int64_t> steps, step_begin, labels, label_begin;
  int64_t step_stride = 1;
};

StatusOr<int64_t> LengthAt(const KernelContext& ctx, const char* slot, int64_t b) {
  const Tensor& t = ctx.Input(slot);
  if (t.dtype() == proto::INT32) return static_cast<int64_t>(t.data<int32_t>()[b]);
  if (t.dtype() == proto::INT64) return t.data<int64_t>()[b];
  return ctx.Error(slot, " must hold int32 / int64 lengths");
}

StatusOr<CtcLayout> PlanSequences(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Logits");
  const Tensor& label = ctx.Input("Label");
  CtcLayout p;
  if (ctx.InputSize("LogitsLength") > 0) {
    if (x.dims().size() != 3)
      return ctx.Error(
          "with LogitsLength, Logits must be padded [max_logit_length, batch, "
          "num_classes + 1], got ",
          x.dims().ToString());
    const int64_t max_t = x.dims()[0], batch = x.dims()[1];
    if (ctx.InputSize("LabelLength") == 0)
      return ctx.Error("LogitsLength needs LabelLength too (padded mode)");
    if (label.dims().size() != 2 || label.dims()[0] != batch)
      return ctx.Error("padded Label must be [batch = ", batch, ", max_label_length], got ",
                       label.dims().ToString());
    const int64_t max_l = label.dims()[1];
    if (ctx.Input("LogitsLength").numel() != batch)
      return ctx.Error("LogitsLength has ", ctx.Input("LogitsLength").numel(),
                       " lengths for a batch of ", batch, " sequences");
    if (ctx.Input("LabelLength").numel() != batch)
      return ctx.Error("LabelLength has ", ctx.Input("LabelLength").numel(),
                       " lengths for a batch of ", batch, " sequences");
    p.step_stride = batch;
    for (int64_t b = 0; b < batch; ++b) {
      LOOM_ASSIGN_OR_RETURN(int64_t t, LengthAt(ctx, "LogitsLength", b));
      LOOM_ASSIGN_OR_RETURN(int64_t l, LengthAt(ctx, "LabelLength", b));
      if (t < 0 || t > max_t)
        return ctx.Error("LogitsLength[", b, "] = ", t, " is outside [0, ", max_t, "]");
      if (l < 0 || l > max_l)
        return ctx.Error("LabelLength[", b, "] = ", l, " is outside [0, ", max_l, "]");
      p.steps.push_back(t);
      p.step_begin.push_back(b);
      p.labels.push_back(l);
      p.label_begin.push_back(b * max_l);
    }
    return p;
  }
  if (ctx.InputSize("LabelLength") > 0)
    return ctx.Error("LabelLength needs LogitsLength too (padded mode)");
  if (x.dims().size() != 2)
    return ctx.Error("Logits must be a LoD tensor [rows, num_classes + 1], got ",
                     x.dims().ToString());
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> xoff, SequenceOffsets(ctx, "Logits"));
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> loff, SequenceOffsets(ctx, "Label"));
  if (xoff.size() != loff.size())
    return ctx.Error("Logits has ", xoff.size() - 1, " sequences but Label has ", loff.size() - 1,
                     ": each sequence needs its label sequence");
  for (size_t s = 0; s + 1 < xoff.size(); ++s) {
    p.steps.push_back(xoff[s + 1] - xoff[s]);
    p.step_begin.push_back(xoff[s]);
    p.labels.push_back(loff[s + 1] - loff[s]);
    p.label_begin.push_back(loff[s]);
  }
  return p;
}

// The loss of one sequence; writes dLoss/dx into g (rows t * stride of width c). logp holds
// the log-softmax of the sequence's rows, [T, C] contiguous.
double SequenceCtc(const std::vector<double>& logp, int64_t steps, int64_t c,
                   const std::vector<int64_t>& label, int64_t blank, std::vector<double>* grad) {
  const int64_t len = static_cast<int64_t>(label.size()), states = 2 * len + 1;
  grad->assign(steps * c, 0.0);
  int64_t repeats = 0;
  for (int64_t j = 1; j < len; ++j) repeats += label[j] == label[j - 1];
  if (steps == 0 || len + repeats > steps) return 0.0;  // no alignment: warp-ctc gives 0
  auto z = [&](int64_t s) { return s % 2 == 0 ? blank : label[s / 2]; };
  auto skip = [&](int64_t s) { return s >= 2 && z(s) != blank && z(s) != z(s - 2); };
  std::vector<double> alpha(steps * states, kNegInf), beta(steps * states, kNegInf);
  alpha[0] = logp[blank];
  if (states > 1) alpha[1] = logp[z(1)];
  for (int64_t t = 1; t < steps; ++t) {
    const double* prev = &alpha[(t - 1) * states];
    double* cur = &alpha[t * states];
    for (int64_t s = 0; s < states; ++s) {
      double a = prev[s];
      if (s >= 1) a = LogAdd(a, prev[s - 1]);
      if (skip(s)) a = LogAdd(a, prev[s - 2]);
      cur[s] = a == kNegInf ? kNegInf : a + logp[t * c + z(s)];
    }
  }
  double* last = &beta[(steps - 1) * states];
  last[states - 1] = 0.0;
  if (states > 1) last[states - 2] = 0.0;
  for (int64_t t = steps - 2; t >= 0; --t) {
    const double* next = &beta[(t + 1) * states];
    double* cur = &beta[t * states];
    const double* lp = &logp[(t + 1) * c];
    for (int64_t s = 0; s < states; ++s) {
      double b = next[s] + lp[z(s)];
      if (s + 1 < states) b = LogAdd(b, next[s + 1] + lp[z(s + 1)]);
      if (s + 2 < states && skip(s + 2)) b = LogAdd(b, next[s + 2] + lp[z(s + 2)]);
      cur[s] = b;
    }
  }
  const double* fin = &alpha[(steps - 1) * states];
  const double log_p = states > 1 ? LogAdd(fin[states - 1], fin[states - 2]) : fin[0];
  if (log_p == kNegInf) return 0.0;
  for (int64_t t = 0; t < steps; ++t) {
    double* g = &(*grad)[t * c];
    for (int64_t k = 0; k < c; ++k) g[k] = std::exp(logp[t * c + k]);
    for (int64_t s = 0; s < states; ++s) {
      const double occ = alpha[t * states + s] + beta[t * states + s] - log_p;
      if (occ != kNegInf) g[z(s)] -= std::exp(occ);
    }
  }
  return -log_p;
}

Status CheckLabels(const KernelContext& ctx, const CtcLayout& p, int64_t c, int64_t blank) {
  const Tensor& label = ctx.Input("Label");
  for (size_t s = 0; s < p.labels.size(); ++s)
    for (int64_t j = 0; j < p.labels[s]; ++j) {
      const int64_t i = p.label_begin[s] + j;
      const int64_t v =
          label.dtype() == proto::INT32 ? label.data<int32_t>()[i] : label.data<int64_t>()[i];
      if (v < 0 || v >= c || v == blank)
        return ctx.Error("Label value ", v, " (sequence ", s, ", position ", j,
                         ") must be a class in [0, ", c, ") other than blank ", blank);
    }
  return Status::OK();
}

template <typename T>
Status WarpCtcKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Logits");
  const Tensor& label = ctx.Input("Label");
  if (label.dtype() != proto::INT32 && label.dtype() != proto::INT64)
    return ctx.Error("Label must hold int32 / int64 class ids");
  LOOM_ASSIGN_OR_RETURN(CtcLayout p, PlanSequences(ctx));
  const int64_t c = x.dims()[x.dims().size() - 1];
  const int64_t blank = ctx.Attr<int>("blank");
  if (blank < 0 || blank >= c)
    return ctx.Error("blank ", blank, " is not a class of Logits' ", c,
                     " (num_classes + 1): it must be in [0, ", c, ")");
  LOOM_RETURN_IF_ERROR(CheckLabels(ctx, p, c, blank));
  const int64_t seqs = static_cast<int64_t>(p.steps.size());
  Tensor* loss = ctx.Output("Loss");
  loss->Resize(DDim({seqs, 1}));
  T* lo = loss->mutable_data<T>(ctx.place());
  Tensor* gt = ctx.Output("WarpCTCGrad");
  gt->Resize(x.dims());
  T* go = gt->mutable_data<T>(ctx.place());
  std::fill_n(go, gt->numel(), T(0));
  const T* xv = x.data<T>();
  std::vector<double> logp, grad;
  std::vector<int64_t> lab;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t steps = p.steps[s];
    logp.assign(steps * c, 0.0);
    for (int64_t t = 0; t < steps; ++t) {
      const T* row = xv + (p.step_begin[s] + t * p.step_stride) * c;
      double m = kNegInf;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, static_cast<double>(row[k]));
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(row[k]) - m);
      const double lse = m + std::log(sum);
      for (int64_t k = 0; k < c; ++k) logp[t * c + k] = static_cast<double>(row[k]) - lse;
    }
    lab.resize(p.labels[s]);
    for (int64_t j = 0; j < p.labels[s]; ++j) {
      const int64_t i = p.label_begin[s] + j;
      lab[j] = label.dtype() == proto::INT32 ? label.data<int32_t>()[i] : label.data<int64_t>()[i];
    }
    lo[s] = static_cast<T>(SequenceCtc(logp, steps, c, lab, blank, &grad));
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t k = 0; k < c; ++k)
        go[(p.step_begin[s] + t * p.step_stride) * c + k] = static_cast<T>(grad[t * c + k]);
  }
  gt->set_lod(x.lod());
  return Status::OK();
}

template <typename T>
Status WarpCtcGradKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Logits");
  const Tensor& gt = ctx.Input("WarpCTCGrad");
  const Tensor& dloss = ctx.Input("Loss@GRAD");
  Tensor* dx = ctx.Output("Logits@GRAD");
  const int64_t c = x.dims()[x.dims().size() - 1];
  std::vector<int64_t> steps, begin;
  int64_t stride = 1;
  if (ctx.InputSize("LogitsLength") > 0) {
    stride = x.dims()[1];
    for (int64_t b = 0; b < stride; ++b) {
      LOOM_ASSIGN_OR_RETURN(int64_t t, LengthAt(ctx, "LogitsLength", b));
      steps.push_back(t);
      begin.push_back(b);
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, SequenceOffsets(ctx, "Logits"));
    for (size_t s = 0; s + 1 < off.size(); ++s) {
      steps.push_back(off[s + 1] - off[s]);
      begin.push_back(off[s]);
    }
  }
  if (dloss.numel() != static_cast<int64_t>(steps.size()))
    return ctx.Error("Loss@GRAD has ", dloss.numel(), " values for ", steps.size(), " sequences");
  dx->Resize(x.dims());
  T* d = dx->mutable_data<T>(ctx.place());
  std::fill_n(d, dx->numel(), T(0));
  const T* g = gt.data<T>();
  const T* dl = dloss.data<T>();
  const bool norm = ctx.Attr<bool>("norm_by_times");
  for (size_t s = 0; s < steps.size(); ++s) {
    if (steps[s] == 0) continue;
    const T scale = norm ? dl[s] / static_cast<T>(steps[s]) : dl[s];
    for (int64_t t = 0; t < steps[s]; ++t) {
      const int64_t row = (begin[s] + t * stride) * c;
      for (int64_t k = 0; k < c; ++k) d[row + k] = g[row + k] * scale;
    }
  }
  dx->set_lod(x.lod());
  return Status::OK();
}

Status WarpCtcInferShape(InferShapeContext* ctx) {
  const DataType dt = ctx->InputDtype("Logits");
  if (dt != proto::FP32 && dt != proto::FP64)
    return ctx->Error(ctx->DescribeInput("Logits"), " must be float32 / float64 logits");
  const DataType lt = ctx->InputDtype("Label");
  if (lt != proto::INT32 && lt != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Label"), " must hold int32 / int64 class ids");
  const DDim x = ctx->InputDim("Logits");
  const DDim label = ctx->InputDim("Label");
  const bool padded = ctx->HasInput("LogitsLength");
  if (padded != ctx->HasInput("LabelLength"))
    return ctx->Error("LogitsLength and LabelLength go together (padded mode) or are both absent");
  int64_t seqs = -1;
  if (padded) {
    if (x.size() != 3)
      return ctx->Error(ctx->DescribeInput("Logits"),
                        " must be padded [max_logit_length, batch, num_classes + 1]");
    if (label.size() != 2)
      return ctx->Error(ctx->DescribeInput("Label"), " must be padded [batch, max_label_length]");
    if (x[1] >= 0 && label[0] >= 0 && x[1] != label[0])
      return ctx->Error(ctx->DescribeInput("Logits"), " has a batch of ", x[1], " but ",
                        ctx->DescribeInput("Label"), " has ", label[0]);
    seqs = x[1];
  } else {
    if (x.size() != 2)
      return ctx->Error(ctx->DescribeInput("Logits"),
                        " must be a LoD tensor [rows, num_classes + 1]");
    if (label.size() != 2 || (label[1] >= 0 && label[1] != 1))
      return ctx->Error(ctx->DescribeInput("Label"), " must be a LoD tensor [rows, 1]");
  }
  const int64_t c = x[x.size() - 1];
  const int blank = ctx->Attr<int>("blank");
  if (blank < 0 || (c >= 0 && blank >= c))
    return ctx->Error("blank ", blank, " must be in [0, ", c, "): a class of ",
                      ctx->DescribeInput("Logits"));
  ctx->SetOutputDim("Loss", DDim({seqs, 1}));
  ctx->SetOutputDtype("Loss", dt);
  ctx->SetOutputDim("WarpCTCGrad", x);
  ctx->SetOutputDtype("WarpCTCGrad", dt);
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(warpctc)
    .Doc(
        "Loss[s] = -log P(Label s | Logits s) under CTC (softmax over Logits' last axis inside, "
        "log-space forward-backward); WarpCTCGrad holds dLoss/dLogits. A label no alignment "
        "fits gives a loss of 0 (warp-ctc's convention). LoD mode: Logits [rows, C], Label "
        "[label rows, 1]; padded mode (LogitsLength, LabelLength): Logits [max T, batch, C], "
        "Label [batch, max L].")
    .Input("Logits", "float32 / float64 unscaled logits, [rows, C] LoD or [max T, batch, C]")
    .Input("Label", "int32 / int64 class ids, [rows, 1] LoD or [batch, max L]")
    .Input("LogitsLength", "int64 [batch] steps of each padded sequence", false, true)
    .Input("LabelLength", "int64 [batch] labels of each padded sequence", false, true)
    .Output("WarpCTCGrad", "dLoss/dLogits, Logits' layout (an intermediate of the grad op)")
    .Output("Loss", "[sequences, 1] CTC negative log-likelihoods")
    .Attr<int>("blank", 0, "the blank class, in [0, C)")
    .Attr<bool>("norm_by_times", false, "divide each sequence's gradient by its length")
    .SetsLoD()
    .KernelDtypeFrom("Logits")
    .InferShape(WarpCtcInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"Logits", "WarpCTCGrad", "LogitsLength", "Loss@GRAD"}, {"Logits"})};
    })
    .Kernel(Place::kCPU, proto::FP32, WarpCtcKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, WarpCtcKernel<double>);

LOOM_REGISTER_OP(warpctc_grad)
    .Doc(
        "Logits@GRAD of warpctc: WarpCTCGrad scaled by each sequence's Loss@GRAD (and 1 / T "
        "with norm_by_times).")
    .Input("Logits", "forward Logits")
    .Input("WarpCTCGrad", "forward WarpCTCGrad")
    .Input("LogitsLength", "forward LogitsLength", false, true)
    .Input("Loss@GRAD", "gradient of Loss")
    .Output("Logits@GRAD", "gradient of Logits")
    .AttrsFrom("warpctc")
    .SetsLoD()
    .KernelDtypeFrom("Logits")
    .InferShape([](InferShapeContext* ctx) {
      ctx->ShareDimAndDtype("Logits", "Logits@GRAD");
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, WarpCtcGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, WarpCtcGradKernel<double>);

}  // namespace loom::ops
