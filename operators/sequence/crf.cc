// Linear-chain CRF ops (Fluid's): linear_chain_crf (the negative log-likelihood of each
// sequence's tags, with its gradient), crf_decoding (Viterbi) and chunk_eval (chunk precision,
// recall and F1 of tag sequences). Transition is [D + 2, D]: row 0 the start weights, row 1
// the end weights, rows 2.. the weights of moving from tag i to tag j. For a sequence of
// emissions E [L, D] and tags y:
//   score(y) = start[y_0] + sum_t E[t, y_t] + sum_{t>0} W[y_{t-1}, y_t] + end[y_{L-1}]
//   LogLikelihood = log sum_y' exp(score(y')) - score(y)   (a cost: minimized in training)
#include <algorithm>
#include <cmath>
#include <limits>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

double LogSumExp(const double* v, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, v[i]);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(v[i] - m);
  return m + std::log(s);
}

StatusOr<std::vector<int64_t>> Offsets(const KernelContext& ctx, const char* slot) {
  const Tensor& t = ctx.Input(slot);
  if (!t.has_lod())
    return ctx.Error("input ", slot, " has no LoD: feed the sequences as a LoD tensor");
  return t.lod().back();
}

Status CrfInferShape(InferShapeContext* ctx) {
  DDim e = ctx->InputDim("Emission"), w = ctx->InputDim("Transition");
  if (e.size() != 2) return ctx->Error(ctx->DescribeInput("Emission"), " must be [rows, D]");
  if (w.size() != 2 || (e[1] >= 0 && (w[0] != e[1] + 2 || w[1] != e[1])))
    return ctx->Error(ctx->DescribeInput("Transition"), " must be [D + 2, D] for D = ", e[1],
                      " tags");
  if (ctx->InputDtype("Label") != proto::INT64)
    return ctx->Error(ctx->DescribeInput("Label"), " must be int64 tags");
  ctx->SetOutputDim("LogLikelihood", DDim({-1, 1}));
  ctx->SetOutputDtype("LogLikelihood", ctx->InputDtype("Emission"));
  for (const char* s : {"Alpha", "EmissionExps"}) {
    ctx->SetOutputDim(s, e);
    ctx->SetOutputDtype(s, ctx->InputDtype("Emission"));
  }
  ctx->SetOutputDim("TransitionExps", w);
  ctx->SetOutputDtype("TransitionExps", ctx->InputDtype("Emission"));
  return Status::OK();
}

// Forward-backward over one sequence: its NLL, and with grads, the gradients of E rows and of
// the transition (added into de, dw, scaled by g).
template <typename T>
double SequenceCrf(const T* e, const int64_t* y, int64_t len, int64_t d, const T* w, double g,
                   T* de, T* dw) {
  const T* start = w;
  const T* end = w + d;
  const T* trans = w + 2 * d;
  std::vector<double> alpha(len * d), beta(len * d), tmp(d);
  for (int64_t j = 0; j < d; ++j) alpha[j] = start[j] + e[j];
  for (int64_t t = 1; t < len; ++t)
    for (int64_t j = 0; j < d; ++j) {
      for (int64_t i = 0; i < d; ++i) tmp[i] = alpha[(t - 1) * d + i] + trans[i * d + j];
      alpha[t * d + j] = e[t * d + j] + LogSumExp(tmp.data(), d);
    }
  for (int64_t j = 0; j < d; ++j) tmp[j] = alpha[(len - 1) * d + j] + end[j];
  const double log_z = LogSumExp(tmp.data(), d);
  double score = start[y[0]] + end[y[len - 1]];
  for (int64_t t = 0; t < len; ++t) {
    score += e[t * d + y[t]];
    if (t > 0) score += trans[y[t - 1] * d + y[t]];
  }
  if (!de && !dw) return log_z - score;
  for (int64_t j = 0; j < d; ++j) beta[(len - 1) * d + j] = end[j];
  for (int64_t t = len - 2; t >= 0; --t)
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j)
        tmp[j] = trans[i * d + j] + e[(t + 1) * d + j] + beta[(t + 1) * d + j];
      beta[t * d + i] = LogSumExp(tmp.data(), d);
    }
  for (int64_t t = 0; t < len; ++t)
    for (int64_t j = 0; j < d; ++j) {
      const double p = std::exp(alpha[t * d + j] + beta[t * d + j] - log_z);
      if (de) de[t * d + j] += static_cast<T>(g * (p - (y[t] == j ? 1.0 : 0.0)));
      if (dw && t == 0) dw[j] += static_cast<T>(g * (p - (y[0] == j ? 1.0 : 0.0)));
      if (dw && t == len - 1) dw[d + j] += static_cast<T>(g * (p - (y[len - 1] == j ? 1.0 : 0.0)));
    }
  if (dw)
    for (int64_t t = 1; t < len; ++t) {
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) {
          const double p = std::exp(alpha[(t - 1) * d + i] + trans[i * d + j] + e[t * d + j] +
                                    beta[t * d + j] - log_z);
          dw[2 * d + i * d + j] += static_cast<T>(g * p);
        }
      dw[2 * d + y[t - 1] * d + y[t]] -= static_cast<T>(g);
    }
  return log_z - score;
}

template <typename T>
Status CrfKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, Offsets(ctx, "Emission"));
  const Tensor& et = ctx.Input("Emission");
  const Tensor& lt = ctx.Input("Label");
  const int64_t d = et.dims()[1], seqs = off.size() - 1;
  if (lt.numel() != et.dims()[0])
    return ctx.Error("Label has ", lt.numel(), " tags for ", et.dims()[0], " emission rows");
  const int64_t* y = lt.data<int64_t>();
  for (int64_t i = 0; i < lt.numel(); ++i)
    if (y[i] < 0 || y[i] >= d)
      return ctx.Error("Label[", i, "] = ", y[i], " is not a tag in [0, ", d, ")");
  Tensor* out = ctx.Output("LogLikelihood");
  out->Resize(DDim({seqs, 1}));
  T* ll = out->mutable_data<T>(ctx.place());
  for (const char* s : {"Alpha", "EmissionExps"}) {
    Tensor* t = ctx.Output(s);
    t->Resize(et.dims());
    std::fill_n(t->mutable_data<T>(ctx.place()), t->numel(), T(0));
  }
  Tensor* tx = ctx.Output("TransitionExps");
  tx->Resize(ctx.Input("Transition").dims());
  std::fill_n(tx->mutable_data<T>(ctx.place()), tx->numel(), T(0));
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t b = off[s], len = off[s + 1] - off[s];
    ll[s] = len == 0 ? T(0)
                     : static_cast<T>(SequenceCrf<T>(et.data<T>() + b * d, y + b, len, d,
                                                     ctx.Input("Transition").data<T>(), 0, nullptr,
                                                     nullptr));
  }
  return Status::OK();
}

template <typename T>
Status CrfGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, Offsets(ctx, "Emission"));
  const Tensor& et = ctx.Input("Emission");
  const Tensor& wt = ctx.Input("Transition");
  const int64_t d = et.dims()[1], seqs = off.size() - 1;
  const int64_t* y = ctx.Input("Label").data<int64_t>();
  const T* g = ctx.Input("LogLikelihood@GRAD").data<T>();
  Tensor* det = ctx.OutputOrNull("Emission@GRAD");
  Tensor* dwt = ctx.OutputOrNull("Transition@GRAD");
  T* de = nullptr;
  T* dw = nullptr;
  if (det) {
    det->Resize(et.dims());
    de = det->mutable_data<T>(ctx.place());
    std::fill_n(de, det->numel(), T(0));
  }
  if (dwt) {
    dwt->Resize(wt.dims());
    dw = dwt->mutable_data<T>(ctx.place());
    std::fill_n(dw, dwt->numel(), T(0));
  }
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t b = off[s], len = off[s + 1] - off[s];
    if (len == 0) continue;
    SequenceCrf<T>(et.data<T>() + b * d, y + b, len, d, wt.data<T>(), static_cast<double>(g[s]),
                   de ? de + b * d : nullptr, dw);
  }
  if (det) det->set_lod(et.lod());
  return Status::OK();
}

// ---- crf_decoding ----
Status CrfDecodingInferShape(InferShapeContext* ctx) {
  DDim e = ctx->InputDim("Emission");
  ctx->SetOutputDim("ViterbiPath", DDim({e[0], 1}));
  ctx->SetOutputDtype("ViterbiPath", proto::INT64);
  return Status::OK();
}

template <typename T>
Status CrfDecodingKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, Offsets(ctx, "Emission"));
  const Tensor& et = ctx.Input("Emission");
  const Tensor& wt = ctx.Input("Transition");
  const int64_t d = et.dims()[1], rows = et.dims()[0];
  if (wt.dims()[0] != d + 2 || wt.dims()[1] != d)
    return ctx.Error("Transition is ", wt.dims().ToString(), ", not [D + 2, D] for D = ", d);
  const T* e = et.data<T>();
  const T* w = wt.data<T>();
  Tensor* out = ctx.Output("ViterbiPath");
  out->Resize(DDim({rows, 1}));
  int64_t* path = out->mutable_data<int64_t>(ctx.place());
  const int64_t* label = ctx.InputSize("Label") ? ctx.Input("Label").data<int64_t>() : nullptr;
  std::vector<double> score(d), next(d);
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    const int64_t b = off[s], len = off[s + 1] - off[s];
    if (len == 0) continue;
    std::vector<int64_t> back(len * d, 0);
    for (int64_t j = 0; j < d; ++j) score[j] = w[j] + e[b * d + j];
    for (int64_t t = 1; t < len; ++t) {
      for (int64_t j = 0; j < d; ++j) {
        int64_t best = 0;
        for (int64_t i = 1; i < d; ++i)
          if (score[i] + w[2 * d + i * d + j] > score[best] + w[2 * d + best * d + j]) best = i;
        next[j] = score[best] + w[2 * d + best * d + j] + e[(b + t) * d + j];
        back[t * d + j] = best;
      }
      score.swap(next);
    }
    int64_t last = 0;
    for (int64_t j = 1; j < d; ++j)
      if (score[j] + w[d + j] > score[last] + w[d + last]) last = j;
    for (int64_t t = len - 1; t >= 0; --t) {
      path[b + t] = last;
      last = back[t * d + last];
    }
  }
  // With Label: 1 where the decoded tag is right, 0 where it is not (Fluid's form).
  if (label)
    for (int64_t r = 0; r < rows; ++r) path[r] = path[r] == label[r] ? 1 : 0;
  out->set_lod(et.lod());
  return Status::OK();
}

// ---- chunk_eval ----
// Tags encode (chunk type, position): tag = type * tag_kinds + position, tag_kinds by scheme
// (IOB: B 0, I 1; IOE: I 0, E 1; IOBES: B 0, I 1, E 2, S 3; plain: 1); a tag >= num_chunk_types
// * tag_kinds is outside every chunk (O).
struct Chunk {
  int64_t begin, end, type;
  bool operator==(const Chunk& o) const {
    return begin == o.begin && end == o.end && type == o.type;
  }
};

std::vector<Chunk> Chunks(const int64_t* tags, int64_t n, const std::string& scheme,
                          int64_t types) {
  const int64_t kinds = scheme == "IOB" || scheme == "IOE" ? 2 : scheme == "IOBES" ? 4 : 1;
  std::vector<Chunk> out;
  int64_t start = -1, type = -1;
  auto close = [&](int64_t end) {
    if (start >= 0) out.push_back({start, end, type});
    start = -1;
    type = -1;
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t tag = tags[i];
    if (tag < 0 || tag >= types * kinds) {  // O
      close(i);
      continue;
    }
    const int64_t ty = tag / kinds, pos = tag % kinds;
    if (scheme == "plain") {
      if (ty != type) {
        close(i);
        start = i;
        type = ty;
      }
    } else if (scheme == "IOB") {
      if (pos == 0 || ty != type) {
        close(i);
        start = i;
        type = ty;
      }
    } else if (scheme == "IOE") {
      if (ty != type) {
        close(i);
        start = i;
        type = ty;
      }
      if (pos == 1) close(i + 1);
    } else {  // IOBES
      if (pos == 0 || pos == 3 || ty != type) {
        close(i);
        start = i;
        type = ty;
      }
      if (pos == 2 || pos == 3) close(i + 1);
    }
  }
  close(n);
  return out;
}

Status ChunkEvalInferShape(InferShapeContext* ctx) {
  const std::string& scheme = ctx->Attr<std::string>("chunk_scheme");
  if (scheme != "IOB" && scheme != "IOE" && scheme != "IOBES" && scheme != "plain")
    return ctx->Error("chunk_scheme '", scheme, "' is not IOB, IOE, IOBES or plain");
  for (const char* s : {"Precision", "Recall", "F1-Score"}) {
    ctx->SetOutputDim(s, DDim({1}));
    ctx->SetOutputDtype(s, proto::FP32);
  }
  for (const char* s : {"NumInferChunks", "NumLabelChunks", "NumCorrectChunks"}) {
    ctx->SetOutputDim(s, DDim({1}));
    ctx->SetOutputDtype(s, proto::INT64);
  }
  return Status::OK();
}

Status ChunkEvalKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> off, Offsets(ctx, "Label"));
  const Tensor& inf = ctx.Input("Inference");
  const Tensor& lab = ctx.Input("Label");
  if (inf.numel() != lab.numel())
    return ctx.Error("Inference has ", inf.numel(), " tags, Label ", lab.numel());
  const std::string& scheme = ctx.Attr<std::string>("chunk_scheme");
  const int64_t types = ctx.Attr<int>("num_chunk_types");
  const auto& excluded = ctx.Attr<std::vector<int>>("excluded_chunk_types");
  auto keep = [&](const Chunk& c) {
    return std::find(excluded.begin(), excluded.end(), c.type) == excluded.end();
  };
  int64_t n_inf = 0, n_lab = 0, n_ok = 0;
  for (size_t s = 0; s + 1 < off.size(); ++s) {
    const int64_t b = off[s], n = off[s + 1] - off[s];
    auto a = Chunks(inf.data<int64_t>() + b, n, scheme, types);
    auto l = Chunks(lab.data<int64_t>() + b, n, scheme, types);
    for (const auto& c : a)
      if (keep(c)) {
        ++n_inf;
        if (std::find(l.begin(), l.end(), c) != l.end()) ++n_ok;
      }
    for (const auto& c : l) n_lab += keep(c);
  }
  const float p = n_inf ? static_cast<float>(n_ok) / n_inf : 0.0f;
  const float r = n_lab ? static_cast<float>(n_ok) / n_lab : 0.0f;
  ctx.Output("Precision")->mutable_data<float>(ctx.place())[0] = p;
  ctx.Output("Recall")->mutable_data<float>(ctx.place())[0] = r;
  ctx.Output("F1-Score")->mutable_data<float>(ctx.place())[0] = n_ok ? 2 * p * r / (p + r) : 0.0f;
  ctx.Output("NumInferChunks")->mutable_data<int64_t>(ctx.place())[0] = n_inf;
  ctx.Output("NumLabelChunks")->mutable_data<int64_t>(ctx.place())[0] = n_lab;
  ctx.Output("NumCorrectChunks")->mutable_data<int64_t>(ctx.place())[0] = n_ok;
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(linear_chain_crf)
    .Doc(
        "LogLikelihood[s] = log Z(s) - score(tags of sequence s) under a linear-chain CRF with "
        "Emission [rows, D] scores and Transition [D + 2, D] (start, end, then tag-to-tag "
        "weights): the negative log-likelihood, a cost to minimize.")
    .Input("Emission", "a LoD tensor [rows, D] of tag scores")
    .Input("Transition", "[D + 2, D]")
    .Input("Label", "int64 tags [rows, 1], Emission's LoD")
    .Output("Alpha", "accepted (Fluid's intermediate; zeros)")
    .Output("EmissionExps", "accepted (Fluid's intermediate; zeros)")
    .Output("TransitionExps", "accepted (Fluid's intermediate; zeros)")
    .Output("LogLikelihood", "[sequences, 1]")
    .SetsLoD()
    .InferShape(CrfInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"Emission", "Transition", "Label", "LogLikelihood@GRAD"},
                         {"Emission", "Transition"})};
    })
    .Kernel(Place::kCPU, proto::FP32, CrfKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CrfKernel<double>);

LOOM_REGISTER_OP(linear_chain_crf_grad)
    .Doc("Emission@GRAD and Transition@GRAD of linear_chain_crf (forward-backward).")
    .Input("Emission", "forward Emission")
    .Input("Transition", "forward Transition")
    .Input("Label", "forward Label")
    .Input("LogLikelihood@GRAD", "gradient of LogLikelihood")
    .Output("Emission@GRAD", "gradient of Emission", false, true)
    .Output("Transition@GRAD", "gradient of Transition", false, true)
    .SetsLoD()
    .InferShape([](InferShapeContext* ctx) {
      for (const char* slot : {"Emission", "Transition"}) {
        const std::string grad = StrCat(slot, "@GRAD");
        if (ctx->OutputSize(grad) == 0) continue;
        ctx->SetOutputDim(grad, ctx->InputDim(slot));
        ctx->SetOutputDtype(grad, ctx->InputDtype(slot));
      }
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, CrfGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CrfGradKernel<double>);

LOOM_REGISTER_OP(crf_decoding)
    .Doc(
        "ViterbiPath = the highest-scoring tags of each sequence (Viterbi); with Label, 1 where "
        "the decoded tag equals the label and 0 where not.")
    .Input("Emission", "a LoD tensor [rows, D]")
    .Input("Transition", "[D + 2, D]")
    .Input("Label", "int64 tags [rows, 1]", false, true)
    .Output("ViterbiPath", "int64 [rows, 1], Emission's LoD")
    .SetsLoD()
    .InferShape(CrfDecodingInferShape)
    .Kernel(Place::kCPU, proto::FP32, CrfDecodingKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, CrfDecodingKernel<double>);

LOOM_REGISTER_OP(chunk_eval)
    .Doc(
        "Precision, recall and F1 of the chunks in Inference against those in Label (both int64 "
        "tags over Label's sequences), under chunk_scheme IOB, IOE, IOBES or plain.")
    .Input("Inference", "int64 tags [rows, 1]")
    .Input("Label", "int64 tags [rows, 1], a LoD tensor")
    .Output("Precision", "[1]")
    .Output("Recall", "[1]")
    .Output("F1-Score", "[1]")
    .Output("NumInferChunks", "[1] int64")
    .Output("NumLabelChunks", "[1] int64")
    .Output("NumCorrectChunks", "[1] int64")
    .Attr<int>("num_chunk_types", 1, "the number of chunk types")
    .Attr<std::string>("chunk_scheme", "IOB", "IOB, IOE, IOBES or plain")
    .Attr<std::vector<int>>("excluded_chunk_types", {}, "chunk types not counted")
    .InferShape(ChunkEvalInferShape)
    .Kernel(Place::kCPU, proto::INT64, ChunkEvalKernel);

}  // namespace loom::ops
