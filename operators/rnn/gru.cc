// gru (Fluid's dynamic_gru op) over the sequences of a LoD input, gru_unit (one step for a
// batch: the same recurrence over sequences of one row, HiddenPrev as the initial state) and
// lstm_unit (one LSTM step from pre-activations). Fluid's layouts: the GRU's input rows are the
// projected inputs of the update gate u, the reset gate r and the candidate c (3 * D wide);
// Weight [D, 3 * D] holds the D x 2D gate weights followed in memory by the D x D candidate
// weights; per step
//   u = act_gate(x_u + h W_u + b_u),  r = act_gate(x_r + h W_r + b_r)
//   c = act_node(x_c + (r h) W_c + b_c)
//   h' = (1 - u) h + u c   (origin_mode: u h + (1 - u) c)
#include <algorithm>
#include <cmath>
#include <string>

#include "operators/common.h"
#include "operators/math/blas.h"
#include "operators/nn/nn_util.h"
#include "operators/rnn/rnn_activations.h"
#include "operators/rnn/rnn_util.h"

namespace loom::ops {
namespace {

using rnn::Act;
using rnn::ActiveAt;
using rnn::Apply;
using rnn::Derive;
using rnn::GruAttrs;
using rnn::LongestOf;
using rnn::ParseAct;
using rnn::ReadGruAttrs;
using rnn::RowAt;

// The recurrence over the sequences `off` of x [rows, 3D], one time step of every sequence at
// once (a GEMM per gate block over the running sequences): gate [rows, 3D] (activated u, r,
// c), rh [rows, D] (r h_prev), h [rows, D].
template <typename T>
void GruForward(const GruAttrs& a, const std::vector<int64_t>& off, int64_t d, const T* x,
                const T* h0, const T* w, const T* bias, T* gate, T* rh, T* h) {
  const T* wg = w;              // [D, 2D]
  const T* wc = w + 2 * d * d;  // [D, D]
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1;
  std::vector<T> hs(static_cast<size_t>(seqs * d), T(0));
  if (h0) std::copy_n(h0, seqs * d, hs.data());
  std::vector<T> hb, gb, rhb, cb;
  for (int64_t k = 0, steps = LongestOf(off); k < steps; ++k) {
    const std::vector<int64_t> active = ActiveAt(off, k);
    const int64_t n = static_cast<int64_t>(active.size());
    hb.resize(static_cast<size_t>(n * d));
    gb.resize(static_cast<size_t>(n * 2 * d));
    rhb.resize(static_cast<size_t>(n * d));
    cb.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) std::copy_n(hs.data() + active[i] * d, d, hb.data() + i * d);
    Gemm(false, false, n, 2 * d, d, hb.data(), wg, gb.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = RowAt(off, static_cast<size_t>(active[i]), k, a.reverse);
      T* g = gate + r * 3 * d;
      for (int64_t j = 0; j < 3 * d; ++j) g[j] = x[r * 3 * d + j] + (bias ? bias[j] : T(0));
      for (int64_t j = 0; j < 2 * d; ++j) g[j] = Apply(a.gate, g[j] + gb[i * 2 * d + j]);
      for (int64_t j = 0; j < d; ++j) rhb[i * d + j] = rh[r * d + j] = g[d + j] * hb[i * d + j];
    }
    Gemm(false, false, n, d, d, rhb.data(), wc, cb.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = RowAt(off, static_cast<size_t>(active[i]), k, a.reverse);
      T* g = gate + r * 3 * d;
      const T* hp = hb.data() + i * d;
      for (int64_t j = 0; j < d; ++j) {
        g[2 * d + j] = Apply(a.node, g[2 * d + j] + cb[i * d + j]);
        const T u = g[j], c = g[2 * d + j];
        h[r * d + j] = a.origin ? u * hp[j] + (T(1) - u) * c : (T(1) - u) * hp[j] + u * c;
      }
      std::copy_n(h + r * d, d, hs.data() + active[i] * d);
    }
  }
}

// Gradients of GruForward from dh_out [rows, D] (one time step of every sequence at once, from
// the last); any of dx, dh0, dw, db may be null.
template <typename T>
void GruBackward(const GruAttrs& a, const std::vector<int64_t>& off, int64_t d, const T* h0,
                 const T* w, const T* gate, const T* rh, const T* h, const T* dh_out, T* dx, T* dh0,
                 T* dw, T* db) {
  const T* wg = w;
  const T* wc = w + 2 * d * d;
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1;
  const std::vector<T> zeros(static_cast<size_t>(d), T(0));
  std::vector<T> dhs(static_cast<size_t>(seqs * d), T(0));
  std::vector<T> hpb, rhb, dgu, dgc, drh, dhp;
  for (int64_t k = LongestOf(off) - 1; k >= 0; --k) {
    const std::vector<int64_t> active = ActiveAt(off, k);
    const int64_t n = static_cast<int64_t>(active.size());
    hpb.resize(static_cast<size_t>(n * d));
    rhb.resize(static_cast<size_t>(n * d));
    dgu.resize(static_cast<size_t>(n * 2 * d));  // [du, dr] pre-activation
    dgc.resize(static_cast<size_t>(n * d));
    drh.resize(static_cast<size_t>(n * d));
    dhp.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t sq = active[i], r = RowAt(off, static_cast<size_t>(sq), k, a.reverse);
      const int64_t prev = k > 0 ? RowAt(off, static_cast<size_t>(sq), k - 1, a.reverse) : -1;
      const T* hp = prev >= 0 ? h + prev * d : (h0 ? h0 + sq * d : zeros.data());
      std::copy_n(hp, d, hpb.data() + i * d);
      std::copy_n(rh + r * d, d, rhb.data() + i * d);
      const T* g = gate + r * 3 * d;
      for (int64_t j = 0; j < d; ++j) {
        const T dh = (dh_out ? dh_out[r * d + j] : T(0)) + dhs[sq * d + j];
        const T u = g[j], c = g[2 * d + j];
        const T du = a.origin ? dh * (hp[j] - c) : dh * (c - hp[j]);
        const T dc = a.origin ? dh * (T(1) - u) : dh * u;
        dhp[i * d + j] = a.origin ? dh * u : dh * (T(1) - u);
        dgu[i * 2 * d + j] = du * Derive(a.gate, u);
        dgc[i * d + j] = dc * Derive(a.node, c);
      }
    }
    // d(r h_prev) = dc_pre · W_cᵀ; then the reset gate and h_prev's share through it.
    Gemm(false, true, n, d, d, dgc.data(), wc, drh.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = RowAt(off, static_cast<size_t>(active[i]), k, a.reverse);
      const T* g = gate + r * 3 * d;
      for (int64_t j = 0; j < d; ++j) {
        const T rg = g[d + j];
        dgu[i * 2 * d + d + j] = drh[i * d + j] * hpb[i * d + j] * Derive(a.gate, rg);
        dhp[i * d + j] += drh[i * d + j] * rg;
      }
      if (dx) {
        std::copy_n(dgu.data() + i * 2 * d, 2 * d, dx + r * 3 * d);
        std::copy_n(dgc.data() + i * d, d, dx + r * 3 * d + 2 * d);
      }
      if (db) {
        for (int64_t j = 0; j < 2 * d; ++j) db[j] += dgu[i * 2 * d + j];
        for (int64_t j = 0; j < d; ++j) db[2 * d + j] += dgc[i * d + j];
      }
    }
    Gemm(false, true, n, d, 2 * d, dgu.data(), wg, dhp.data(), /*accumulate=*/true);
    if (dw) {
      Gemm(true, false, d, 2 * d, n, hpb.data(), dgu.data(), dw, /*accumulate=*/true);
      Gemm(true, false, d, d, n, rhb.data(), dgc.data(), dw + 2 * d * d, true);
    }
    for (int64_t i = 0; i < n; ++i) std::copy_n(dhp.data() + i * d, d, dhs.data() + active[i] * d);
  }
  if (dh0) std::copy(dhs.begin(), dhs.end(), dh0);
}

Status GruShapes(InferShapeContext* ctx, bool unit) {
  DDim in = ctx->InputDim("Input"), w = ctx->InputDim("Weight");
  if (in.size() != 2) return ctx->Error(ctx->DescribeInput("Input"), " must be [rows, 3 * D]");
  if (w.size() != 2 || (w[0] >= 0 && w[1] >= 0 && w[1] != 3 * w[0]))
    return ctx->Error(ctx->DescribeInput("Weight"), " must be [D, 3 * D]");
  const int64_t d = w[0];
  if (in[1] >= 0 && d >= 0 && in[1] != 3 * d)
    return ctx->Error(ctx->DescribeInput("Input"), " must have 3 * D = ", 3 * d, " columns");
  if (ctx->InputSize("Bias") > 0 && ctx->InputDim("Bias").numel() >= 0 && d >= 0 &&
      ctx->InputDim("Bias").numel() != 3 * d)
    return ctx->Error(ctx->DescribeInput("Bias"), " must hold 3 * D = ", 3 * d, " values");
  if (!unit)
    for (const char* s : {"gate_activation", "activation"}) {
      auto a = ParseAct(ctx->Attr<std::string>(s));
      if (!a.ok()) return ctx->Error(s, ": ", a.status().message());
    }
  ctx->SetOutputDim("Hidden", DDim({in[0], d}));
  ctx->SetOutputDim(unit ? "Gate" : "BatchGate", DDim({in[0], 3 * d}));
  ctx->SetOutputDim(unit ? "ResetHiddenPrev" : "BatchResetHiddenPrev", DDim({in[0], d}));
  for (const char* s :
       {"Hidden", unit ? "Gate" : "BatchGate", unit ? "ResetHiddenPrev" : "BatchResetHiddenPrev"})
    ctx->SetOutputDtype(s, ctx->InputDtype("Input"));
  return Status::OK();
}

template <typename T, bool kUnit>
Status GruKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(GruAttrs a, ReadGruAttrs(ctx, kUnit));
  const Tensor& in = ctx.Input("Input");
  const int64_t rows = in.dims()[0], d = ctx.Input("Weight").dims()[0];
  std::vector<int64_t> off;
  const T* h0 = nullptr;
  if (kUnit) {
    for (int64_t r = 0; r <= rows; ++r) off.push_back(r);
    const Tensor& hp = ctx.Input("HiddenPrev");
    if (hp.numel() != rows * d)
      return ctx.Error("HiddenPrev has ", hp.numel(), " values for ", rows, " rows of width ", d);
    h0 = hp.data<T>();
  } else {
    if (!in.has_lod())
      return ctx.Error("Input has no LoD: feed sequences as a LoD tensor (lod_level 1)");
    off = in.lod().back();
    if (ctx.InputSize("H0")) {
      if (ctx.Input("H0").numel() != static_cast<int64_t>(off.size() - 1) * d)
        return ctx.Error("H0 has ", ctx.Input("H0").numel(), " values for ", off.size() - 1,
                         " sequences of width ", d);
      h0 = ctx.Input("H0").data<T>();
    }
  }
  Tensor* ht = ctx.Output("Hidden");
  Tensor* gt = ctx.Output(kUnit ? "Gate" : "BatchGate");
  Tensor* rt = ctx.Output(kUnit ? "ResetHiddenPrev" : "BatchResetHiddenPrev");
  rnn::SizeGruOutputs(ctx, kUnit, rows, d);
  GruForward<T>(a, off, d, in.data<T>(), h0, ctx.Input("Weight").data<T>(),
                ctx.InputSize("Bias") ? ctx.Input("Bias").data<T>() : nullptr,
                gt->mutable_data<T>(ctx.place()), rt->mutable_data<T>(ctx.place()),
                ht->mutable_data<T>(ctx.place()));
  if (!kUnit) ht->set_lod(in.lod());
  return Status::OK();
}

template <typename T, bool kUnit>
Status GruGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(GruAttrs a, ReadGruAttrs(ctx, kUnit));
  const Tensor& in = ctx.Input("Input");
  const int64_t rows = in.dims()[0], d = ctx.Input("Weight").dims()[0];
  const char* h0_slot = kUnit ? "HiddenPrev" : "H0";
  std::vector<int64_t> off;
  if (kUnit) {
    for (int64_t r = 0; r <= rows; ++r) off.push_back(r);
  } else {
    if (!in.has_lod()) return ctx.Error("Input has no LoD");
    off = in.lod().back();
  }
  auto grad = [&](const char* slot) -> T* {
    if (ctx.InputSize(slot) == 0) return nullptr;
    Tensor* t = ctx.OutputOrNull(StrCat(slot, "@GRAD"));
    if (!t) return nullptr;
    t->Resize(ctx.Input(slot).dims());
    T* p = t->mutable_data<T>(ctx.place());
    std::fill(p, p + t->numel(), T(0));
    return p;
  };
  const T* h0 = ctx.InputSize(h0_slot) ? ctx.Input(h0_slot).data<T>() : nullptr;
  GruBackward<T>(a, off, d, h0, ctx.Input("Weight").data<T>(),
                 ctx.Input(kUnit ? "Gate" : "BatchGate").data<T>(),
                 ctx.Input(kUnit ? "ResetHiddenPrev" : "BatchResetHiddenPrev").data<T>(),
                 ctx.Input("Hidden").data<T>(),
                 ctx.InputSize("Hidden@GRAD") ? ctx.Input("Hidden@GRAD").data<T>() : nullptr,
                 grad("Input"), grad(h0_slot), grad("Weight"), grad("Bias"));
  if (!kUnit)
    if (Tensor* t = ctx.OutputOrNull("Input@GRAD")) t->set_lod(in.lod());
  return Status::OK();
}

Status GruGradInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"Input", "H0", "HiddenPrev", "Weight", "Bias"}) {
    const std::string grad = StrCat(slot, "@GRAD");
    if (ctx->OutputSize(grad) == 0 || ctx->InputSize(slot) == 0) continue;
    ctx->SetOutputDim(grad, ctx->InputDim(slot));
    ctx->SetOutputDtype(grad, ctx->InputDtype(slot));
  }
  return Status::OK();
}

// ---- lstm_unit ----
// i = sigmoid(X_i), f = sigmoid(X_f + forget_bias), o = sigmoid(X_o), g = tanh(X_g) (X is
// [N, 4D] in the order i, f, o, g); C = f C_prev + i g; H = o tanh(C).
Status LstmUnitInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), c = ctx->InputDim("C_prev");
  if (x.size() != 2 || c.size() != 2)
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("C_prev"),
                      " must be 2-D");
  if (x[1] >= 0 && c[1] >= 0 && x[1] != 4 * c[1])
    return ctx->Error(ctx->DescribeInput("X"), " must be 4 times as wide as ",
                      ctx->DescribeInput("C_prev"));
  ctx->SetOutputDim("C", c);
  ctx->SetOutputDim("H", c);
  ctx->SetOutputDtype("C", ctx->InputDtype("X"));
  ctx->SetOutputDtype("H", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
T Sigm(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
Status LstmUnitKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& cpt = ctx.Input("C_prev");
  const int64_t n = cpt.dims()[0], d = cpt.dims()[1];
  if (xt.dims()[0] != n) return ctx.Error("X has ", xt.dims()[0], " rows, C_prev ", n);
  const T fb = static_cast<T>(ctx.Attr<float>("forget_bias"));
  const T* x = xt.data<T>();
  const T* cp = cpt.data<T>();
  T* c = ctx.Output("C")->mutable_data<T>(ctx.place());
  T* h = ctx.Output("H")->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < d; ++j) {
      const T* xr = x + r * 4 * d;
      const T i = Sigm(xr[j]), f = Sigm(xr[d + j] + fb), o = Sigm(xr[2 * d + j]);
      const T g = std::tanh(xr[3 * d + j]);
      c[r * d + j] = f * cp[r * d + j] + i * g;
      h[r * d + j] = o * std::tanh(c[r * d + j]);
    }
  return Status::OK();
}

template <typename T>
Status LstmUnitGradKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& cpt = ctx.Input("C_prev");
  const int64_t n = cpt.dims()[0], d = cpt.dims()[1];
  const T fb = static_cast<T>(ctx.Attr<float>("forget_bias"));
  const T* x = xt.data<T>();
  const T* cp = cpt.data<T>();
  const T* c = ctx.Input("C").data<T>();
  const T* dh = ctx.InputSize("H@GRAD") ? ctx.Input("H@GRAD").data<T>() : nullptr;
  const T* dcin = ctx.InputSize("C@GRAD") ? ctx.Input("C@GRAD").data<T>() : nullptr;
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dcpt = ctx.OutputOrNull("C_prev@GRAD");
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dcp = dcpt ? dcpt->mutable_data<T>(ctx.place()) : nullptr;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < d; ++j) {
      const T* xr = x + r * 4 * d;
      const T i = Sigm(xr[j]), f = Sigm(xr[d + j] + fb), o = Sigm(xr[2 * d + j]);
      const T g = std::tanh(xr[3 * d + j]), tc = std::tanh(c[r * d + j]);
      const T gh = dh ? dh[r * d + j] : T(0);
      const T dc = gh * o * (T(1) - tc * tc) + (dcin ? dcin[r * d + j] : T(0));
      if (dx) {
        T* dxr = dx + r * 4 * d;
        dxr[j] = dc * g * i * (T(1) - i);
        dxr[d + j] = dc * cp[r * d + j] * f * (T(1) - f);
        dxr[2 * d + j] = gh * tc * o * (T(1) - o);
        dxr[3 * d + j] = dc * i * (T(1) - g * g);
      }
      if (dcp) dcp[r * d + j] = dc * f;
    }
  return Status::OK();
}

#define LOOM_RNN_KERNELS(fn, unit)                  \
  Kernel(Place::kCPU, proto::FP32, fn<float, unit>) \
      .Kernel(Place::kCPU, proto::FP64, fn<double, unit>)

}  // namespace

LOOM_REGISTER_OP(gru)
    .Doc(
        "A GRU over the sequences of Input (rows: the projected inputs of the update gate, "
        "the reset gate and the candidate, 3 * D wide): Hidden [rows, D]. Weight [D, 3 * D] "
        "holds the D x 2D gate weights, then the D x D candidate weights; H0 the initial "
        "states (zeros when absent).")
    .Input("Input", "a LoD tensor [rows, 3 * D]")
    .Input("H0", "initial hidden state [sequences, D]", false, true)
    .Input("Weight", "[D, 3 * D]")
    .Input("Bias", "[1, 3 * D]", false, true)
    .Output("Hidden", "[rows, D], Input's LoD")
    .Output("BatchGate", "activated gates per row (for the gradient)")
    .Output("BatchResetHiddenPrev", "r * h_prev per row (for the gradient)")
    .Output("BatchHidden", "accepted (Fluid's intermediate)", false, true)
    .Attr<std::string>("activation", "tanh", "the candidate's: sigmoid, tanh, relu, identity")
    .Attr<std::string>("gate_activation", "sigmoid", "the gates': sigmoid, tanh, relu, identity")
    .Attr<bool>("is_reverse", false, "run each sequence from its last row to its first")
    .Attr<bool>("origin_mode", false, "h' = u h + (1 - u) c instead of (1 - u) h + u c")
    .SetsLoD()
    .InferShape([](InferShapeContext* c) { return GruShapes(c, false); })
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd,
                         {"Input", "H0", "Weight", "Bias", "Hidden", "BatchGate",
                          "BatchResetHiddenPrev", "Hidden@GRAD"},
                         {"Input", "H0", "Weight", "Bias"})};
    })
    .LOOM_RNN_KERNELS(GruKernel, false);

LOOM_REGISTER_OP(gru_grad)
    .Doc("Gradients of gru, by backpropagation through time within each sequence.")
    .Input("Input", "forward Input")
    .Input("H0", "forward H0", false, true)
    .Input("Weight", "forward Weight")
    .Input("Bias", "forward Bias", false, true)
    .Input("Hidden", "forward Hidden")
    .Input("BatchGate", "forward BatchGate")
    .Input("BatchResetHiddenPrev", "forward BatchResetHiddenPrev")
    .Input("Hidden@GRAD", "gradient of Hidden", false, true)
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("H0@GRAD", "gradient of H0", false, true)
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("gru")
    .SetsLoD()
    .InferShape(GruGradInferShape)
    .LOOM_RNN_KERNELS(GruGradKernel, false);

LOOM_REGISTER_OP(gru_unit)
    .Doc(
        "One GRU step for a batch: Hidden = the GRU update of HiddenPrev by Input (the "
        "projected inputs of u, r and c, 3 * D wide), as gru's recurrence.")
    .Input("Input", "[N, 3 * D]")
    .Input("HiddenPrev", "[N, D]")
    .Input("Weight", "[D, 3 * D]")
    .Input("Bias", "[1, 3 * D]", false, true)
    .Output("Gate", "activated gates [N, 3 * D]")
    .Output("ResetHiddenPrev", "r * HiddenPrev [N, D]")
    .Output("Hidden", "[N, D]")
    .Attr<int>("activation", 2, "the candidate's: 0 identity, 1 sigmoid, 2 tanh, 3 relu")
    .Attr<int>("gate_activation", 1, "the gates': 0 identity, 1 sigmoid, 2 tanh, 3 relu")
    .Attr<bool>("origin_mode", false, "h' = u h + (1 - u) c instead of (1 - u) h + u c")
    .InferShape([](InferShapeContext* c) { return GruShapes(c, true); })
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd,
                         {"Input", "HiddenPrev", "Weight", "Bias", "Hidden", "Gate",
                          "ResetHiddenPrev", "Hidden@GRAD"},
                         {"Input", "HiddenPrev", "Weight", "Bias"})};
    })
    .LOOM_RNN_KERNELS(GruKernel, true);

LOOM_REGISTER_OP(gru_unit_grad)
    .Doc("Gradients of gru_unit.")
    .Input("Input", "forward Input")
    .Input("HiddenPrev", "forward HiddenPrev")
    .Input("Weight", "forward Weight")
    .Input("Bias", "forward Bias", false, true)
    .Input("Hidden", "forward Hidden")
    .Input("Gate", "forward Gate")
    .Input("ResetHiddenPrev", "forward ResetHiddenPrev")
    .Input("Hidden@GRAD", "gradient of Hidden", false, true)
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("HiddenPrev@GRAD", "gradient of HiddenPrev", false, true)
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("gru_unit")
    .InferShape(GruGradInferShape)
    .LOOM_RNN_KERNELS(GruGradKernel, true);

LOOM_REGISTER_OP(lstm_unit)
    .Doc(
        "One LSTM step from pre-activations X [N, 4 * D] in the order i, f, o, g: "
        "C = sigmoid(f + forget_bias) C_prev + sigmoid(i) tanh(g), H = sigmoid(o) tanh(C).")
    .Input("X", "[N, 4 * D]")
    .Input("C_prev", "[N, D]")
    .Output("C", "[N, D]")
    .Output("H", "[N, D]")
    .Attr<float>("forget_bias", 0.0f, "added to the forget gate's pre-activation")
    .InferShape(LstmUnitInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "C_prev", "C", "H", "C@GRAD", "H@GRAD"}, {"X", "C_prev"})};
    })
    .Kernel(Place::kCPU, proto::FP32, LstmUnitKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LstmUnitKernel<double>);

LOOM_REGISTER_OP(lstm_unit_grad)
    .Doc("X@GRAD and C_prev@GRAD of lstm_unit.")
    .Input("X", "forward X")
    .Input("C_prev", "forward C_prev")
    .Input("C", "forward C")
    .Input("H", "forward H")
    .Input("C@GRAD", "gradient of C", false, true)
    .Input("H@GRAD", "gradient of H", false, true)
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("C_prev@GRAD", "gradient of C_prev", false, true)
    .AttrsFrom("lstm_unit")
    .InferShape([](InferShapeContext* ctx) {
      for (const char* slot : {"X", "C_prev"}) {
        const std::string grad = StrCat(slot, "@GRAD");
        if (ctx->OutputSize(grad) == 0) continue;
        ctx->SetOutputDim(grad, ctx->InputDim(slot));
        ctx->SetOutputDtype(grad, ctx->InputDtype(slot));
      }
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, LstmUnitGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LstmUnitGradKernel<double>);

}  // namespace loom::ops
