// CUDA kernels of gru, gru_grad, gru_unit and gru_unit_grad, fp32 and fp64, with the semantics
// (layouts, outputs, errors) of the CPU kernels in operators/rnn/gru.cc: per step
//   u = act_gate(x_u + h W_u + b_u),  r = act_gate(x_r + h W_r + b_r)
//   c = act_node(x_c + (r h) W_c + b_c)
//   h' = (1 - u) h + u c   (origin_mode: u h + (1 - u) c)
// As on the CPU, one time step of every running sequence at once. The LoD is on the host, so
// the host plans the recurrence: it numbers the (sequence, step) pairs step by step ("positions":
// step 0 of every non-empty sequence in index order, then step 1 of those still running, ...),
// so that the n sequences running at step k hold the contiguous positions [start_k,
// start_k + n). Per position the plan holds the row it reads and writes, the previous step's
// row (-1 - s at step 0: sequence s's initial state) and the position of the same sequence at
// the next step (-1 after its last). The plan goes to the device once per call; scratch
// buffers indexed by position then make every step's GEMM operands contiguous slices, and a
// step hands its state to the next by writing it at the `next` position (no gather or scatter
// per step).
//   Forward, per step: GEMM [u r]_pre = h_prev · W_g; a gate kernel (u, r, r h_prev); GEMM
// c_pre = (r h_prev) · W_c; an update kernel (c, h', the next step's h_prev).
//   Backward: h_prev and r h_prev of every position gathered once from Hidden / H0 /
// BatchResetHiddenPrev; per step from the last: a kernel for the pre-activation gradients of u
// and c and h_prev's direct share (the carried state gradient read at `next`); GEMM d(r h_prev)
// = dc_pre · W_cᵀ; a kernel for r's gradient and h_prev's share through it; GEMM dh_prev +=
// d[u r]_pre · W_gᵀ. The parameter gradients are sums over every position, so they come after
// the loop as one GEMM each (over all positions instead of one per step): dW_g = h_prevᵀ ·
// d[u r]_pre, dW_c = (r h_prev)ᵀ · dc_pre, dBias = onesᵀ · [d[u r]_pre dc_pre].
#include <algorithm>
#include <string>
#include <vector>

#include "framework/lod.h"
#include "operators/cuda_util.cuh"
#include "operators/rnn/rnn_activations.h"

namespace loom::ops::cuda {
namespace {

using rnn::Act;
using rnn::GruAttrs;
using rnn::ReadGruAttrs;

// The sequences of the call: gru's from Input's LoD (H0 optional), gru_unit's one row each
// (HiddenPrev their initial states). The errors are the CPU kernels'; in addition the shapes the
// CPU leaves to InferShape and the LoD are checked, since a mismatch here would read or write
// device memory out of bounds.
struct GruGeom {
  int64_t rows = 0, d = 0;
  std::vector<int64_t> off;
  const Tensor* h0 = nullptr;
};

StatusOr<GruGeom> ReadGeom(const KernelContext& ctx, bool unit, bool grad) {
  const Tensor& in = ctx.Input("Input");
  const Tensor& w = ctx.Input("Weight");
  GruGeom g;
  if (in.dims().size() == 2 && w.dims().size() == 2) {
    g.rows = in.dims()[0];
    g.d = w.dims()[0];
  }
  if (in.dims().size() != 2 || w.dims().size() != 2 || in.dims()[1] != 3 * g.d ||
      w.dims()[1] != 3 * g.d)
    return ctx.Error("Input ", in.dims().ToString(), " and Weight ", w.dims().ToString(),
                     " must be [rows, 3 * D] and [D, 3 * D]");
  if (ctx.InputSize("Bias") && ctx.Input("Bias").numel() != 3 * g.d)
    return ctx.Error("Bias has ", ctx.Input("Bias").numel(), " values, not 3 * D = ", 3 * g.d);
  if (unit) {
    for (int64_t r = 0; r <= g.rows; ++r) g.off.push_back(r);
    g.h0 = &ctx.Input("HiddenPrev");
    if (g.h0->numel() != g.rows * g.d)
      return ctx.Error("HiddenPrev has ", g.h0->numel(), " values for ", g.rows, " rows of width ",
                       g.d);
    return g;
  }
  if (!in.has_lod())
    return ctx.Error(grad ? "Input has no LoD"
                          : "Input has no LoD: feed sequences as a LoD tensor (lod_level 1)");
  LOOM_RETURN_IF_ERROR(CheckLoD(in.lod(), g.rows, ctx.Where()));
  g.off = in.lod().back();
  if (ctx.InputSize("H0")) {
    g.h0 = &ctx.Input("H0");
    if (g.h0->numel() != static_cast<int64_t>(g.off.size() - 1) * g.d)
      return ctx.Error("H0 has ", g.h0->numel(), " values for ", g.off.size() - 1,
                       " sequences of width ", g.d);
  }
  return g;
}

// The host's plan of the recurrence (see the header) and its copy on the device.
struct Plan {
  std::vector<int64_t> start;  // steps + 1 position offsets
  int64_t positions = 0;       // = rows for a well-formed LoD
  Tensor dev;                  // int64 [3 * positions]: row, prev, next
  const int64_t* row = nullptr;
  const int64_t* prev = nullptr;
  const int64_t* next = nullptr;
  int64_t Steps() const { return static_cast<int64_t>(start.size()) - 1; }
  int64_t Width(int64_t k) const { return start[k + 1] - start[k]; }
};

Status MakePlan(const KernelContext& ctx, const std::vector<int64_t>& off, bool reverse,
                Plan* plan) {
  const size_t seqs = off.size() - 1;
  int64_t longest = 0;
  for (size_t s = 0; s < seqs; ++s) longest = std::max(longest, off[s + 1] - off[s]);
  std::vector<int64_t> row, prev, next, last(seqs, -1);  // last: s's position at step k - 1
  plan->start = {0};
  for (int64_t k = 0; k < longest; ++k) {
    for (size_t s = 0; s < seqs; ++s) {
      if (off[s + 1] - off[s] <= k) continue;
      const int64_t p = static_cast<int64_t>(row.size());
      row.push_back(reverse ? off[s + 1] - 1 - k : off[s] + k);
      prev.push_back(k == 0 ? -1 - static_cast<int64_t>(s)
                            : (reverse ? off[s + 1] - k : off[s] + k - 1));
      next.push_back(-1);
      if (last[s] >= 0) next[last[s]] = p;
      last[s] = p;
    }
    plan->start.push_back(static_cast<int64_t>(row.size()));
  }
  const int64_t n = plan->positions = static_cast<int64_t>(row.size());
  if (n == 0) return Status::OK();
  row.insert(row.end(), prev.begin(), prev.end());
  row.insert(row.end(), next.begin(), next.end());
  plan->dev = Tensor(proto::INT64, DDim{3 * n});
  int64_t* p = plan->dev.mutable_data<int64_t>(ctx.place());
  cudaError_t e = cudaMemcpyAsync(p, row.data(), sizeof(int64_t) * row.size(),
                                  cudaMemcpyHostToDevice, Stream(ctx));
  // `row` dies with this call: wait for the copy to have read it.
  if (e == cudaSuccess) e = cudaStreamSynchronize(Stream(ctx));
  if (e != cudaSuccess) return ctx.Error("copying the GRU plan failed: ", cudaGetErrorString(e));
  plan->row = p;
  plan->prev = p + n;
  plan->next = p + 2 * n;
  return Status::OK();
}

// Row-major C[m, n] = op(A) · op(B) + beta C (m, n, k > 0).
template <typename T>
Status RowGemm(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
               const T* a, const T* b, T beta, T* c) {
  return CublasStatus(
      ctx, GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, T(1), a, 0, b, 0, beta, c, 0, 1));
}

// Scratch of `sizes` elements each, carved from one allocation.
template <typename T>
std::vector<T*> Carve(const KernelContext& ctx, Tensor* buf, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  *buf = Tensor(ToDataType<T>(), DDim{total});
  T* p = buf->mutable_data<T>(ctx.place());
  std::vector<T*> out;
  for (int64_t s : sizes) {
    out.push_back(p);
    p += s;
  }
  return out;
}

// ---- forward ----

// The first step's previous states: H0's rows (zeros without H0), n positions from 0.
template <typename T>
__global__ void InitStatesK(const int64_t* prev, const T* h0, T* hp, int64_t n, int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t p = e / d, j = e % d;
    hp[e] = h0 ? h0[(-1 - prev[p]) * d + j] : T(0);
  }
}

// u and r of step positions [start, start + n) from x, Bias and gb = h_prev · W_g ([n, 2D]);
// BatchResetHiddenPrev and its compact copy rhb ([n, D], the next GEMM's operand).
template <typename T>
__global__ void GatesK(Act act, const int64_t* row, const T* x, const T* bias, const T* gb,
                       const T* hp, T* gate, T* rh, T* rhb, int64_t start, int64_t n, int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, j = e % d, p = start + i, r = row[p];
    const T* xr = x + r * 3 * d;
    T* g = gate + r * 3 * d;
    const T u = rnn::Apply(act, (xr[j] + (bias ? bias[j] : T(0))) + gb[i * 2 * d + j]);
    const T rg = rnn::Apply(act, (xr[d + j] + (bias ? bias[d + j] : T(0))) + gb[i * 2 * d + d + j]);
    g[j] = u;
    g[d + j] = rg;
    rhb[e] = rh[r * d + j] = rg * hp[p * d + j];
  }
}

// c from x, Bias and cb = (r h_prev) · W_c ([n, D]); Hidden; the state the sequence's next
// step reads.
template <typename T>
__global__ void UpdateK(Act act, bool origin, const int64_t* row, const int64_t* next, const T* x,
                        const T* bias, const T* cb, T* gate, T* h, T* hp, int64_t start, int64_t n,
                        int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, j = e % d, p = start + i, r = row[p];
    T* g = gate + r * 3 * d;
    const T c =
        rnn::Apply(act, (x[r * 3 * d + 2 * d + j] + (bias ? bias[2 * d + j] : T(0))) + cb[e]);
    g[2 * d + j] = c;
    const T u = g[j], hprev = hp[p * d + j];
    const T hn = origin ? u * hprev + (T(1) - u) * c : (T(1) - u) * hprev + u * c;
    h[r * d + j] = hn;
    if (next[p] >= 0) hp[next[p] * d + j] = hn;
  }
}

template <typename T>
Status GruFwd(const KernelContext& ctx, bool unit) {
  LOOM_ASSIGN_OR_RETURN(GruAttrs a, ReadGruAttrs(ctx, unit));
  LOOM_ASSIGN_OR_RETURN(GruGeom geo, ReadGeom(ctx, unit, /*grad=*/false));
  const Tensor& in = ctx.Input("Input");
  const int64_t rows = geo.rows, d = geo.d;
  Tensor* ht = ctx.Output("Hidden");
  Tensor* gt = ctx.Output(unit ? "Gate" : "BatchGate");
  Tensor* rt = ctx.Output(unit ? "ResetHiddenPrev" : "BatchResetHiddenPrev");
  rnn::SizeGruOutputs(ctx, unit, rows, d);
  T* h = ht->mutable_data<T>(ctx.place());
  T* gate = gt->mutable_data<T>(ctx.place());
  T* rh = rt->mutable_data<T>(ctx.place());
  if (!unit) ht->set_lod(in.lod());
  if (rows == 0 || d == 0) return Status::OK();

  Plan plan;
  LOOM_RETURN_IF_ERROR(MakePlan(ctx, geo.off, a.reverse, &plan));
  if (plan.positions == 0) return Status::OK();
  const int64_t widest = plan.Width(0), positions = plan.positions;
  Tensor buf;
  const std::vector<T*> s =
      Carve<T>(ctx, &buf, {positions * d, widest * 2 * d, widest * d, widest * d});
  T *hp = s[0], *gb = s[1], *rhb = s[2], *cb = s[3];
  const T* x = in.data<T>();
  const T* wg = ctx.Input("Weight").data<T>();  // [D, 2D]
  const T* wc = wg + 2 * d * d;                 // [D, D]
  const T* bias = ctx.InputSize("Bias") ? ctx.Input("Bias").data<T>() : nullptr;
  const cudaStream_t st = Stream(ctx);

  InitStatesK<T><<<Blocks(widest * d), kThreads, 0, st>>>(
      plan.prev, geo.h0 ? geo.h0->data<T>() : nullptr, hp, widest, d);
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  for (int64_t k = 0; k < plan.Steps(); ++k) {
    const int64_t start = plan.start[k], n = plan.Width(k);
    LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, false, false, n, 2 * d, d, hp + start * d, wg, T(0), gb));
    GatesK<T><<<Blocks(n * d), kThreads, 0, st>>>(a.gate, plan.row, x, bias, gb, hp, gate, rh, rhb,
                                                  start, n, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, false, false, n, d, d, rhb, wc, T(0), cb));
    UpdateK<T><<<Blocks(n * d), kThreads, 0, st>>>(a.node, a.origin, plan.row, plan.next, x, bias,
                                                   cb, gate, h, hp, start, n, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  }
  return Status::OK();
}

// ---- backward ----

// h_prev (from Hidden, H0 or zeros) and r h_prev of every position.
template <typename T>
__global__ void PrevStatesK(const int64_t* row, const int64_t* prev, const T* h, const T* h0,
                            const T* rh, T* hp, T* rhp, int64_t positions, int64_t d) {
  LOOM_GRID_STRIDE(e, positions * d) {
    const int64_t p = e / d, j = e % d, q = prev[p];
    hp[e] = q >= 0 ? h[q * d + j] : (h0 ? h0[(-1 - q) * d + j] : T(0));
    rhp[e] = rh[row[p] * d + j];
  }
}

// Step positions [start, start + n): the gradient reaching h' (Hidden@GRAD plus what the next
// step sent back through `next`), the pre-activation gradients of u (dgur's first half) and c
// (dgc), and h_prev's direct share (dhp).
template <typename T>
__global__ void GradUpdateK(Act gate_act, Act node_act, bool origin, const int64_t* row,
                            const int64_t* next, const T* gate, const T* hp, const T* dh_out,
                            T* dgur, T* dgc, T* dhp, int64_t start, int64_t n, int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, j = e % d, p = start + i, r = row[p], q = next[p];
    const T dh = (dh_out ? dh_out[r * d + j] : T(0)) + (q >= 0 ? dhp[q * d + j] : T(0));
    const T* g = gate + r * 3 * d;
    const T u = g[j], c = g[2 * d + j], hprev = hp[p * d + j];
    const T du = origin ? dh * (hprev - c) : dh * (c - hprev);
    const T dc = origin ? dh * (T(1) - u) : dh * u;
    dhp[p * d + j] = origin ? dh * u : dh * (T(1) - u);
    dgur[p * 2 * d + j] = du * rnn::Derive(gate_act, u);
    dgc[p * d + j] = dc * rnn::Derive(node_act, c);
  }
}

// From drh = d(r h_prev) ([n, D]): r's pre-activation gradient (dgur's second half) and
// h_prev's share through r h_prev.
template <typename T>
__global__ void GradResetK(Act gate_act, const int64_t* row, const T* gate, const T* hp,
                           const T* drh, T* dgur, T* dhp, int64_t start, int64_t n, int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t i = e / d, j = e % d, p = start + i;
    const T rg = gate[row[p] * 3 * d + d + j];
    dgur[p * 2 * d + d + j] = drh[e] * hp[p * d + j] * rnn::Derive(gate_act, rg);
    dhp[p * d + j] += drh[e] * rg;
  }
}

// Input@GRAD's rows: [d[u r]_pre dc_pre] of their positions.
template <typename T>
__global__ void InputGradK(const int64_t* row, const T* dgur, const T* dgc, T* dx,
                           int64_t positions, int64_t d) {
  LOOM_GRID_STRIDE(e, positions * 3 * d) {
    const int64_t p = e / (3 * d), j = e % (3 * d);
    dx[row[p] * 3 * d + j] = j < 2 * d ? dgur[p * 2 * d + j] : dgc[p * d + j - 2 * d];
  }
}

// H0@GRAD: what the first step (n positions from 0) sent back; empty sequences keep zeros.
template <typename T>
__global__ void InitGradK(const int64_t* prev, const T* dhp, T* dh0, int64_t n, int64_t d) {
  LOOM_GRID_STRIDE(e, n * d) {
    const int64_t p = e / d, j = e % d;
    dh0[(-1 - prev[p]) * d + j] = dhp[e];
  }
}

template <typename T>
__global__ void FillK(T* o, T v, int64_t n) {
  LOOM_GRID_STRIDE(i, n) o[i] = v;
}

template <typename T>
Status GruBwd(const KernelContext& ctx, bool unit) {
  LOOM_ASSIGN_OR_RETURN(GruAttrs a, ReadGruAttrs(ctx, unit));
  LOOM_ASSIGN_OR_RETURN(GruGeom geo, ReadGeom(ctx, unit, /*grad=*/true));
  const Tensor& in = ctx.Input("Input");
  const int64_t d = geo.d;
  const cudaStream_t st = Stream(ctx);
  // The gradient of an input the op has and the caller asked for, zero-filled (else null).
  auto grad = [&](const char* slot) -> T* {
    if (ctx.InputSize(slot) == 0) return nullptr;
    Tensor* t = ctx.OutputOrNull(StrCat(slot, "@GRAD"));
    if (!t) return nullptr;
    t->Resize(ctx.Input(slot).dims());
    T* p = t->mutable_data<T>(ctx.place());
    cudaMemsetAsync(p, 0, sizeof(T) * t->numel(), st);
    return p;
  };
  T* dx = grad("Input");
  T* dh0 = grad(unit ? "HiddenPrev" : "H0");
  T* dw = grad("Weight");
  T* db = grad("Bias");
  if (!unit)
    if (Tensor* t = ctx.OutputOrNull("Input@GRAD")) t->set_lod(in.lod());
  if (geo.rows == 0 || d == 0 || !(dx || dh0 || dw || db)) return Status::OK();

  Plan plan;
  LOOM_RETURN_IF_ERROR(MakePlan(ctx, geo.off, a.reverse, &plan));
  if (plan.positions == 0) return Status::OK();
  const int64_t positions = plan.positions, widest = plan.Width(0);
  Tensor buf;
  const std::vector<T*> s =
      Carve<T>(ctx, &buf,
               {positions * d, positions * d, positions * 2 * d, positions * d, positions * d,
                widest * d, db ? positions : 0});
  T *hp = s[0], *rhp = s[1], *dgur = s[2], *dgc = s[3], *dhp = s[4], *drh = s[5], *ones = s[6];
  const T* wg = ctx.Input("Weight").data<T>();
  const T* wc = wg + 2 * d * d;
  const T* gate = ctx.Input(unit ? "Gate" : "BatchGate").data<T>();
  const T* dh_out = ctx.InputSize("Hidden@GRAD") ? ctx.Input("Hidden@GRAD").data<T>() : nullptr;

  PrevStatesK<T><<<Blocks(positions * d), kThreads, 0, st>>>(
      plan.row, plan.prev, ctx.Input("Hidden").data<T>(), geo.h0 ? geo.h0->data<T>() : nullptr,
      ctx.Input(unit ? "ResetHiddenPrev" : "BatchResetHiddenPrev").data<T>(), hp, rhp, positions,
      d);
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  for (int64_t k = plan.Steps() - 1; k >= 0; --k) {
    const int64_t start = plan.start[k], n = plan.Width(k);
    GradUpdateK<T><<<Blocks(n * d), kThreads, 0, st>>>(a.gate, a.node, a.origin, plan.row,
                                                       plan.next, gate, hp, dh_out, dgur, dgc, dhp,
                                                       start, n, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    // d(r h_prev) = dc_pre · W_cᵀ; then the reset gate and h_prev's share through it.
    LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, false, true, n, d, d, dgc + start * d, wc, T(0), drh));
    GradResetK<T><<<Blocks(n * d), kThreads, 0, st>>>(a.gate, plan.row, gate, hp, drh, dgur, dhp,
                                                      start, n, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    // h_prev's share through the gates (the first step's only matters for H0@GRAD).
    if (k > 0 || dh0)
      LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, false, true, n, d, 2 * d, dgur + start * 2 * d, wg, T(1),
                                      dhp + start * d));
  }
  if (dx) {
    InputGradK<T>
        <<<Blocks(positions * 3 * d), kThreads, 0, st>>>(plan.row, dgur, dgc, dx, positions, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  }
  if (dh0) {
    InitGradK<T><<<Blocks(widest * d), kThreads, 0, st>>>(plan.prev, dhp, dh0, widest, d);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  }
  if (dw) {
    LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, true, false, d, 2 * d, positions, hp, dgur, T(0), dw));
    LOOM_RETURN_IF_ERROR(
        RowGemm<T>(ctx, true, false, d, d, positions, rhp, dgc, T(0), dw + 2 * d * d));
  }
  if (db) {
    FillK<T><<<Blocks(positions), kThreads, 0, st>>>(ones, T(1), positions);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    LOOM_RETURN_IF_ERROR(RowGemm<T>(ctx, false, false, 1, 2 * d, positions, ones, dgur, T(0), db));
    LOOM_RETURN_IF_ERROR(
        RowGemm<T>(ctx, false, false, 1, d, positions, ones, dgc, T(0), db + 2 * d));
  }
  return Status::OK();
}

template <typename T>
Status Gru(const KernelContext& ctx) {
  return GruFwd<T>(ctx, false);
}
template <typename T>
Status GruGrad(const KernelContext& ctx) {
  return GruBwd<T>(ctx, false);
}
template <typename T>
Status GruUnit(const KernelContext& ctx) {
  return GruFwd<T>(ctx, true);
}
template <typename T>
Status GruUnitGrad(const KernelContext& ctx) {
  return GruBwd<T>(ctx, true);
}

}  // namespace

LOOM_REGISTER_KERNEL(gru, kCUDA, FP32, Gru<float>);
LOOM_REGISTER_KERNEL(gru, kCUDA, FP64, Gru<double>);
LOOM_REGISTER_KERNEL(gru_grad, kCUDA, FP32, GruGrad<float>);
LOOM_REGISTER_KERNEL(gru_grad, kCUDA, FP64, GruGrad<double>);
LOOM_REGISTER_KERNEL(gru_unit, kCUDA, FP32, GruUnit<float>);
LOOM_REGISTER_KERNEL(gru_unit, kCUDA, FP64, GruUnit<double>);
LOOM_REGISTER_KERNEL(gru_unit_grad, kCUDA, FP32, GruUnitGrad<float>);
LOOM_REGISTER_KERNEL(gru_unit_grad, kCUDA, FP64, GruUnitGrad<double>);

}  // namespace loom::ops::cuda
