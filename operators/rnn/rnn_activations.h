// What the CPU and CUDA kernels of the recurrent ops (lstm, gru, gru_unit; lstm.cc, gru.cc,
// lstm_cuda.cu, gru_cuda.cu) share: the activations they take by name and their derivatives
// from the activation's output (Apply and Derive compile for the host and, under nvcc, the
// device; the enum values are Fluid's codes for gru_unit's attributes), the ops' attributes,
// and lstm's checked geometry. One definition, so both places check and compute alike.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "base/status.h"
#include "framework/op_registry.h"

#if defined(__CUDACC__)
#define LOOM_RNN_HOST_DEVICE __host__ __device__
#else
#define LOOM_RNN_HOST_DEVICE
#endif

namespace loom::ops::rnn {

enum class Act { kIdentity = 0, kSigmoid = 1, kTanh = 2, kRelu = 3 };

inline StatusOr<Act> ParseAct(const std::string& s) {
  if (s == "sigmoid") return Act::kSigmoid;
  if (s == "tanh") return Act::kTanh;
  if (s == "relu") return Act::kRelu;
  if (s == "identity" || s == "linear") return Act::kIdentity;
  return InvalidArgument("activation '", s, "' is not sigmoid, tanh, relu or identity");
}

template <typename T>
LOOM_RNN_HOST_DEVICE T Apply(Act a, T x) {
  using std::exp;
  using std::tanh;
  switch (a) {
    case Act::kSigmoid: return T(1) / (T(1) + exp(-x));
    case Act::kTanh: return tanh(x);
    case Act::kRelu: return x > T(0) ? x : T(0);
    case Act::kIdentity: return x;
  }
  return x;
}

// d act / d x, from the activation's output y.
template <typename T>
LOOM_RNN_HOST_DEVICE T Derive(Act a, T y) {
  switch (a) {
    case Act::kSigmoid: return y * (T(1) - y);
    case Act::kTanh: return T(1) - y * y;
    case Act::kRelu: return y > T(0) ? T(1) : T(0);
    case Act::kIdentity: return T(1);
  }
  return T(1);
}

// ---- the ops' attributes ----
struct LstmAttrs {
  Act gate, cell, cand;
  bool peepholes, reverse;
};

inline StatusOr<LstmAttrs> ReadLstmAttrs(const KernelContext& ctx) {
  LstmAttrs a;
  LOOM_ASSIGN_OR_RETURN(a.gate, ParseAct(ctx.Attr<std::string>("gate_activation")));
  LOOM_ASSIGN_OR_RETURN(a.cell, ParseAct(ctx.Attr<std::string>("cell_activation")));
  LOOM_ASSIGN_OR_RETURN(a.cand, ParseAct(ctx.Attr<std::string>("candidate_activation")));
  a.peepholes = ctx.Attr<bool>("use_peepholes");
  a.reverse = ctx.Attr<bool>("is_reverse");
  return a;
}

// lstm's forward geometry: Input's sequences (its last LoD level), the width D, the rows; the
// initial states checked against them and the four outputs sized.
struct LstmGeom {
  std::vector<int64_t> off;
  int64_t d, rows, seqs;
};

inline StatusOr<LstmGeom> PrepareLstm(const KernelContext& ctx) {
  const Tensor& in = ctx.Input("Input");
  if (!in.has_lod())
    return ctx.Error("Input has no LoD: feed sequences as a LoD tensor (lod_level 1)");
  LstmGeom g;
  g.off = in.lod().back();
  g.d = ctx.Input("Weight").dims()[0];
  g.rows = in.dims()[0];
  g.seqs = static_cast<int64_t>(g.off.size()) - 1;
  for (const char* s : {"H0", "C0"})
    if (ctx.InputSize(s) && ctx.Input(s).numel() != g.seqs * g.d)
      return ctx.Error(s, " has ", ctx.Input(s).numel(), " values for ", g.seqs,
                       " sequences of width ", g.d);
  ctx.Output("Hidden")->Resize(DDim({g.rows, g.d}));
  ctx.Output("Cell")->Resize(DDim({g.rows, g.d}));
  ctx.Output("BatchGate")->Resize(DDim({g.rows, 4 * g.d}));
  ctx.Output("BatchCellPreAct")->Resize(DDim({g.rows, g.d}));
  return g;
}

struct GruAttrs {
  Act gate, node;
  bool reverse = false, origin = false;
};

// gru names its activations by string, gru_unit by Fluid's enum (0 identity, 1 sigmoid,
// 2 tanh, 3 relu).
inline StatusOr<GruAttrs> ReadGruAttrs(const KernelContext& ctx, bool unit) {
  GruAttrs a;
  if (unit) {
    const int g = ctx.Attr<int>("gate_activation"), n = ctx.Attr<int>("activation");
    if (g < 0 || g > 3 || n < 0 || n > 3)
      return ctx.Error("activations are 0 identity, 1 sigmoid, 2 tanh or 3 relu, got ", g, " and ",
                       n);
    a.gate = static_cast<Act>(g);
    a.node = static_cast<Act>(n);
  } else {
    LOOM_ASSIGN_OR_RETURN(a.gate, ParseAct(ctx.Attr<std::string>("gate_activation")));
    LOOM_ASSIGN_OR_RETURN(a.node, ParseAct(ctx.Attr<std::string>("activation")));
    a.reverse = ctx.Attr<bool>("is_reverse");
  }
  a.origin = ctx.Attr<bool>("origin_mode");
  return a;
}

// gru's (gru_unit's) outputs sized for `rows` rows of width d: Hidden, the activated gates and
// r * h_prev.
inline void SizeGruOutputs(const KernelContext& ctx, bool unit, int64_t rows, int64_t d) {
  ctx.Output("Hidden")->Resize(DDim({rows, d}));
  ctx.Output(unit ? "Gate" : "BatchGate")->Resize(DDim({rows, 3 * d}));
  ctx.Output(unit ? "ResetHiddenPrev" : "BatchResetHiddenPrev")->Resize(DDim({rows, d}));
}

}  // namespace loom::ops::rnn

#undef LOOM_RNN_HOST_DEVICE
