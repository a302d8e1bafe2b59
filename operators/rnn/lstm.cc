// lstm (Fluid's dynamic_lstm op): an LSTM over the sequences of a LoD input whose rows are the
// already-projected inputs of the four gates. Per sequence (rows in order, or reversed):
//   [c~, i, f, o] = Input_t + h_{t-1} · Weight + Bias[0:4D]      (gate order as Fluid's)
//   i = act_gate(i + W_ic c_{t-1}), f = act_gate(f + W_fc c_{t-1})   (peepholes optional)
//   c~ = act_cand(c~);  c_t = f c_{t-1} + i c~
//   o = act_gate(o + W_oc c_t);  h_t = o act_cell(c_t)
// with h_{-1} = H0, c_{-1} = C0 (zeros when absent); the peephole weights W_ic, W_fc, W_oc are
// Bias[4D:7D]. BatchGate keeps the activated gates and BatchCellPreAct act_cell(c_t), per row,
// for the gradient.
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
using rnn::LongestOf;
using rnn::LstmAttrs;
using rnn::ParseAct;
using rnn::RowAt;

Status LstmInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), w = ctx->InputDim("Weight"), b = ctx->InputDim("Bias");
  if (in.size() != 2) return ctx->Error(ctx->DescribeInput("Input"), " must be [rows, 4 * D]");
  if (w.size() != 2 || (w[0] >= 0 && w[1] >= 0 && w[1] != 4 * w[0]))
    return ctx->Error(ctx->DescribeInput("Weight"), " must be [D, 4 * D]");
  const int64_t d = w[0];
  if (in[1] >= 0 && d >= 0 && in[1] != 4 * d)
    return ctx->Error(ctx->DescribeInput("Input"), " must have 4 * D = ", 4 * d,
                      " columns (the four gates' projected inputs)");
  const int64_t bw = ctx->Attr<bool>("use_peepholes") ? 7 * d : 4 * d;
  if (b.numel() >= 0 && d >= 0 && b.numel() != bw)
    return ctx->Error(
        ctx->DescribeInput("Bias"), " must hold ", bw,
        ctx->Attr<bool>("use_peepholes") ? " values (7 * D with peepholes)" : " values (4 * D)");
  for (const char* s : {"gate_activation", "cell_activation", "candidate_activation"}) {
    auto a = ParseAct(ctx->Attr<std::string>(s));
    if (!a.ok()) return ctx->Error(s, ": ", a.status().message());
  }
  ctx->SetOutputDim("Hidden", DDim({in[0], d}));
  ctx->SetOutputDim("Cell", DDim({in[0], d}));
  ctx->SetOutputDim("BatchGate", DDim({in[0], 4 * d}));
  ctx->SetOutputDim("BatchCellPreAct", DDim({in[0], d}));
  for (const char* s : {"Hidden", "Cell", "BatchGate", "BatchCellPreAct"})
    ctx->SetOutputDtype(s, ctx->InputDtype("Input"));
  return Status::OK();
}

Status LstmGradInferShape(InferShapeContext* ctx) {
  for (const char* slot : {"Input", "H0", "C0", "Weight", "Bias"}) {
    const std::string grad = StrCat(slot, "@GRAD");
    if (ctx->OutputSize(grad) == 0 || ctx->InputSize(slot) == 0) continue;
    ctx->SetOutputDim(grad, ctx->InputDim(slot));
    ctx->SetOutputDtype(grad, ctx->InputDtype(slot));
  }
  return Status::OK();
}

// Step k of every sequence at once: one GEMM of the running sequences' previous hidden states
// with Weight (Fluid's sequence2batch, without reordering the rows).
template <typename T>
Status LstmKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(LstmAttrs a, rnn::ReadLstmAttrs(ctx));
  LOOM_ASSIGN_OR_RETURN(rnn::LstmGeom geom, rnn::PrepareLstm(ctx));
  const Tensor& in = ctx.Input("Input");
  const std::vector<int64_t>& off = geom.off;
  const Tensor& wt = ctx.Input("Weight");
  const int64_t d = geom.d, seqs = geom.seqs;
  const T* x = in.data<T>();
  const T* w = wt.data<T>();
  const T* bias = ctx.Input("Bias").data<T>();
  Tensor* ht = ctx.Output("Hidden");
  Tensor* ct = ctx.Output("Cell");
  Tensor* gt = ctx.Output("BatchGate");
  Tensor* at = ctx.Output("BatchCellPreAct");
  T* h = ht->mutable_data<T>(ctx.place());
  T* c = ct->mutable_data<T>(ctx.place());
  T* g = gt->mutable_data<T>(ctx.place());
  T* tc = at->mutable_data<T>(ctx.place());
  const T* wic = a.peepholes ? bias + 4 * d : nullptr;
  const T* wfc = a.peepholes ? bias + 5 * d : nullptr;
  const T* woc = a.peepholes ? bias + 6 * d : nullptr;
  // Each sequence's state so far (initially H0 / C0, or zeros).
  std::vector<T> hs(static_cast<size_t>(seqs * d), T(0)), cs(hs.size(), T(0));
  if (ctx.InputSize("H0")) std::copy_n(ctx.Input("H0").data<T>(), seqs * d, hs.data());
  if (ctx.InputSize("C0")) std::copy_n(ctx.Input("C0").data<T>(), seqs * d, cs.data());
  std::vector<T> hb, gb;
  for (int64_t k = 0, steps = LongestOf(off); k < steps; ++k) {
    const std::vector<int64_t> active = ActiveAt(off, k);
    const int64_t n = static_cast<int64_t>(active.size());
    hb.resize(static_cast<size_t>(n * d));
    gb.resize(static_cast<size_t>(n * 4 * d));
    for (int64_t i = 0; i < n; ++i) std::copy_n(hs.data() + active[i] * d, d, hb.data() + i * d);
    Gemm(false, false, n, 4 * d, d, hb.data(), w, gb.data());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t sq = active[i], r = RowAt(off, sq, k, a.reverse);
      T* gr = g + r * 4 * d;
      T* cp = cs.data() + sq * d;
      T* cr = c + r * d;
      for (int64_t j = 0; j < 4 * d; ++j) gr[j] = x[r * 4 * d + j] + bias[j] + gb[i * 4 * d + j];
      for (int64_t j = 0; j < d; ++j) {
        T& cand = gr[j];
        T& ig = gr[d + j];
        T& fg = gr[2 * d + j];
        T& og = gr[3 * d + j];
        cand = Apply(a.cand, cand);
        ig = Apply(a.gate, ig + (wic ? wic[j] * cp[j] : T(0)));
        fg = Apply(a.gate, fg + (wfc ? wfc[j] * cp[j] : T(0)));
        cr[j] = fg * cp[j] + ig * cand;
        og = Apply(a.gate, og + (woc ? woc[j] * cr[j] : T(0)));
        tc[r * d + j] = Apply(a.cell, cr[j]);
        h[r * d + j] = og * tc[r * d + j];
      }
      std::copy_n(h + r * d, d, hs.data() + sq * d);
      std::copy_n(cr, d, cp);
    }
  }
  ht->set_lod(in.lod());
  ct->set_lod(in.lod());
  return Status::OK();
}

// Backpropagation through time, one step of every sequence at once (from the last).
template <typename T>
Status LstmGradKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(LstmAttrs a, rnn::ReadLstmAttrs(ctx));
  const Tensor& in = ctx.Input("Input");
  if (!in.has_lod()) return ctx.Error("Input has no LoD");
  const std::vector<int64_t>& off = in.lod().back();
  const Tensor& wt = ctx.Input("Weight");
  const int64_t d = wt.dims()[0], seqs = off.size() - 1;
  const T* w = wt.data<T>();
  const T* bias = ctx.Input("Bias").data<T>();
  const T* h = ctx.Input("Hidden").data<T>();
  const T* c = ctx.Input("Cell").data<T>();
  const T* g = ctx.Input("BatchGate").data<T>();
  const T* tc = ctx.Input("BatchCellPreAct").data<T>();
  const T* dh_out = ctx.InputSize("Hidden@GRAD") ? ctx.Input("Hidden@GRAD").data<T>() : nullptr;
  const T* dc_out = ctx.InputSize("Cell@GRAD") ? ctx.Input("Cell@GRAD").data<T>() : nullptr;
  const T* h0 = ctx.InputSize("H0") ? ctx.Input("H0").data<T>() : nullptr;
  const T* c0 = ctx.InputSize("C0") ? ctx.Input("C0").data<T>() : nullptr;
  // Each gradient takes its forward input's dims.
  auto out = [&](const char* slot) -> T* {
    Tensor* t = ctx.OutputOrNull(StrCat(slot, "@GRAD"));
    if (!t) return nullptr;
    t->Resize(ctx.Input(slot).dims());
    T* p = t->mutable_data<T>(ctx.place());
    std::fill(p, p + t->numel(), T(0));
    return p;
  };
  T* dx = out("Input");
  T* dw = out("Weight");
  T* db = out("Bias");
  T* dh0 = out("H0");
  T* dc0 = out("C0");
  const T* wic = a.peepholes ? bias + 4 * d : nullptr;
  const T* wfc = a.peepholes ? bias + 5 * d : nullptr;
  const T* woc = a.peepholes ? bias + 6 * d : nullptr;
  const std::vector<T> zeros(static_cast<size_t>(d), T(0));
  // Gradients flowing into each sequence's previous step.
  std::vector<T> dhs(static_cast<size_t>(seqs * d), T(0)), dcs(dhs.size(), T(0));
  std::vector<T> dgb, hpb, dhb;
  for (int64_t k = LongestOf(off) - 1; k >= 0; --k) {
    const std::vector<int64_t> active = ActiveAt(off, k);
    const int64_t n = static_cast<int64_t>(active.size());
    dgb.resize(static_cast<size_t>(n * 4 * d));
    hpb.resize(static_cast<size_t>(n * d));
    dhb.resize(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t sq = active[i], r = RowAt(off, sq, k, a.reverse);
      const int64_t prev = k > 0 ? RowAt(off, sq, k - 1, a.reverse) : -1;
      const T* hp = prev >= 0 ? h + prev * d : (h0 ? h0 + sq * d : zeros.data());
      const T* cp = prev >= 0 ? c + prev * d : (c0 ? c0 + sq * d : zeros.data());
      std::copy_n(hp, d, hpb.data() + i * d);
      const T* gr = g + r * 4 * d;
      T* dg = dgb.data() + i * 4 * d;
      T* dh_next = dhs.data() + sq * d;
      T* dc_next = dcs.data() + sq * d;
      for (int64_t j = 0; j < d; ++j) {
        const T cand = gr[j], ig = gr[d + j], fg = gr[2 * d + j], og = gr[3 * d + j];
        const T t = tc[r * d + j];
        const T dh = (dh_out ? dh_out[r * d + j] : T(0)) + dh_next[j];
        const T dpo = dh * t * Derive(a.gate, og);
        const T dc = dh * og * Derive(a.cell, t) + dc_next[j] + (woc ? dpo * woc[j] : T(0)) +
                     (dc_out ? dc_out[r * d + j] : T(0));
        const T dpc = dc * ig * Derive(a.cand, cand);
        const T dpi = dc * cand * Derive(a.gate, ig);
        const T dpf = dc * cp[j] * Derive(a.gate, fg);
        dc_next[j] = dc * fg + (wic ? dpi * wic[j] : T(0)) + (wfc ? dpf * wfc[j] : T(0));
        dg[j] = dpc;
        dg[d + j] = dpi;
        dg[2 * d + j] = dpf;
        dg[3 * d + j] = dpo;
        if (db && a.peepholes) {
          db[4 * d + j] += dpi * cp[j];
          db[5 * d + j] += dpf * cp[j];
          db[6 * d + j] += dpo * c[r * d + j];
        }
      }
      if (dx) std::copy_n(dg, 4 * d, dx + r * 4 * d);
      if (db)
        for (int64_t j = 0; j < 4 * d; ++j) db[j] += dg[j];
    }
    if (dw) Gemm(true, false, d, 4 * d, n, hpb.data(), dgb.data(), dw, /*accumulate=*/true);
    Gemm(false, true, n, d, 4 * d, dgb.data(), w, dhb.data());
    for (int64_t i = 0; i < n; ++i) std::copy_n(dhb.data() + i * d, d, dhs.data() + active[i] * d);
  }
  if (dh0) std::copy(dhs.begin(), dhs.end(), dh0);
  if (dc0) std::copy(dcs.begin(), dcs.end(), dc0);
  if (Tensor* t = ctx.OutputOrNull("Input@GRAD")) t->set_lod(in.lod());
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(lstm)
    .Doc(
        "An LSTM over the sequences of Input (rows: the projected inputs of the gates "
        "c~, i, f, o, 4 * D wide): Hidden, Cell [rows, D]; Weight [D, 4 * D] the recurrent "
        "weights, Bias [1, 4 * D] (+ 3 * D peephole weights W_ic, W_fc, W_oc with "
        "use_peepholes); H0, C0 [sequences, D] the initial states (zeros when absent).")
    .Input("Input", "a LoD tensor [rows, 4 * D]")
    .Input("H0", "initial hidden state [sequences, D]", false, true)
    .Input("C0", "initial cell state [sequences, D]", false, true)
    .Input("Weight", "[D, 4 * D]")
    .Input("Bias", "[1, 4 * D], or [1, 7 * D] with peepholes")
    .Output("Hidden", "[rows, D], Input's LoD")
    .Output("Cell", "[rows, D], Input's LoD")
    .Output("BatchGate", "the activated gates per row (for the gradient)")
    .Output("BatchCellPreAct", "cell_activation(Cell) per row (for the gradient)")
    .Attr<bool>("use_peepholes", true, "the gates also see the cell state")
    .Attr<bool>("is_reverse", false, "run each sequence from its last row to its first")
    .Attr<std::string>("gate_activation", "sigmoid", "sigmoid, tanh, relu or identity")
    .Attr<std::string>("cell_activation", "tanh", "sigmoid, tanh, relu or identity")
    .Attr<std::string>("candidate_activation", "tanh", "sigmoid, tanh, relu or identity")
    .SetsLoD()
    .InferShape(LstmInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd,
                         {"Input", "H0", "C0", "Weight", "Bias", "Hidden", "Cell", "BatchGate",
                          "BatchCellPreAct", "Hidden@GRAD", "Cell@GRAD"},
                         {"Input", "H0", "C0", "Weight", "Bias"})};
    })
    .Kernel(Place::kCPU, proto::FP32, LstmKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LstmKernel<double>);

LOOM_REGISTER_OP(lstm_grad)
    .Doc("Gradients of lstm, by backpropagation through time within each sequence.")
    .Input("Input", "forward Input")
    .Input("H0", "forward H0", false, true)
    .Input("C0", "forward C0", false, true)
    .Input("Weight", "forward Weight")
    .Input("Bias", "forward Bias")
    .Input("Hidden", "forward Hidden")
    .Input("Cell", "forward Cell")
    .Input("BatchGate", "forward BatchGate")
    .Input("BatchCellPreAct", "forward BatchCellPreAct")
    .Input("Hidden@GRAD", "gradient of Hidden", false, true)
    .Input("Cell@GRAD", "gradient of Cell", false, true)
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("H0@GRAD", "gradient of H0", false, true)
    .Output("C0@GRAD", "gradient of C0", false, true)
    .Output("Weight@GRAD", "gradient of Weight", false, true)
    .Output("Bias@GRAD", "gradient of Bias", false, true)
    .AttrsFrom("lstm")
    .SetsLoD()
    .InferShape(LstmGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, LstmGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LstmGradKernel<double>);

}  // namespace loom::ops
