// CUDA kernels of lstm and lstm_grad (fp32, fp64), as operators/rnn/lstm.cc: the same gate
// order (c~, i, f, o), peepholes, reverse, H0 / C0, outputs and intermediate outputs.
//
// As on the CPU, time step k of every sequence runs at once. The LoD is on the host, so the
// host plans the steps (for each k: the sequences still running, the row each is at, and the
// row it was at one step earlier) and copies the plan to the device once per call. A forward
// step is a gather of the running sequences' hidden states into a [n, D] block, one cuBLAS
// GEMM with Weight, and one element-wise kernel (a thread per sequence and column) that
// applies the gates and writes the row's outputs and the sequence's state. The backward pass
// walks the steps from the last: an element-wise kernel produces the gates' gradients (and
// the cell gradient passed to the step before), two GEMMs give Weight's gradient (accumulated)
// and the hidden gradient passed to the step before. Bias's gradient is a column sum over the
// rows at the end (the peephole parts from per-row products kept during the walk).
#include <algorithm>
#include <string>
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/rnn/rnn_activations.h"

namespace loom::ops::cuda {
namespace {

using rnn::Act;

// The steps of every sequence: step k covers plan entries [start[k], start[k + 1]); entry e
// is sequence seq[e] at row row[e], which was at row prev[e] one step earlier (-1 at k = 0).
struct Plan {
  std::vector<int64_t> start, seq, row, prev;
  int64_t widest = 0;  // the most sequences running at one step
};

Plan MakePlan(const std::vector<int64_t>& off, bool reverse) {
  Plan p;
  int64_t longest = 0;
  for (size_t s = 0; s + 1 < off.size(); ++s) longest = std::max(longest, off[s + 1] - off[s]);
  auto row_at = [&](size_t s, int64_t k) { return reverse ? off[s + 1] - 1 - k : off[s] + k; };
  for (int64_t k = 0; k < longest; ++k) {
    p.start.push_back(static_cast<int64_t>(p.seq.size()));
    for (size_t s = 0; s + 1 < off.size(); ++s) {
      if (off[s + 1] - off[s] <= k) continue;
      p.seq.push_back(static_cast<int64_t>(s));
      p.row.push_back(row_at(s, k));
      p.prev.push_back(k > 0 ? row_at(s, k - 1) : -1);
    }
    p.widest = std::max(p.widest, static_cast<int64_t>(p.seq.size()) - p.start.back());
  }
  p.start.push_back(static_cast<int64_t>(p.seq.size()));
  return p;
}

// The plan's seq / row / prev arrays on the device, one after the other.
struct DevicePlan {
  Tensor t;
  const int64_t* seq = nullptr;
  const int64_t* row = nullptr;
  const int64_t* prev = nullptr;
};

DevicePlan Upload(const KernelContext& ctx, const Plan& p) {
  const int64_t n = static_cast<int64_t>(p.seq.size());
  std::vector<int64_t> host;
  host.reserve(static_cast<size_t>(3 * n));
  host.insert(host.end(), p.seq.begin(), p.seq.end());
  host.insert(host.end(), p.row.begin(), p.row.end());
  host.insert(host.end(), p.prev.begin(), p.prev.end());
  DevicePlan d;
  d.t = Tensor(proto::INT64, DDim{std::max<int64_t>(1, 3 * n)});
  int64_t* ptr = d.t.mutable_data<int64_t>(ctx.place());
  if (n > 0) {
    cudaMemcpyAsync(ptr, host.data(), sizeof(int64_t) * host.size(), cudaMemcpyHostToDevice,
                    Stream(ctx));
    cudaStreamSynchronize(Stream(ctx));  // `host` goes out of scope
  }
  d.seq = ptr;
  d.row = ptr + n;
  d.prev = ptr + 2 * n;
  return d;
}

template <typename T>
Status Gemm(const KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a,
            const T* b, T beta, T* c) {
  if (m == 0 || n == 0 || k == 0) return Status::OK();
  return CublasStatus(
      ctx, GemmStridedBatched<T>(Cublas(ctx), ta, tb, m, n, k, T(1), a, 0, b, 0, beta, c, 0, 1));
}

template <typename T>
Tensor Scratch(const KernelContext& ctx, int64_t n, T** ptr) {
  Tensor t(ToDataType<T>(), DDim{std::max<int64_t>(1, n)});
  *ptr = t.mutable_data<T>(ctx.place());
  return t;
}

// out[i, :] = state[seq[i], :] for the n running sequences.
template <typename T>
__global__ void GatherK(const T* state, const int64_t* seq, int64_t n, int64_t d, T* out) {
  LOOM_GRID_STRIDE(i, n * d) out[i] = state[seq[i / d] * d + i % d];
}

// state[seq[i], :] = in[i, :].
template <typename T>
__global__ void ScatterK(const T* in, const int64_t* seq, int64_t n, int64_t d, T* state) {
  LOOM_GRID_STRIDE(i, n * d) state[seq[i / d] * d + i % d] = in[i];
}

// One forward step: thread (i, j) is column j of running sequence i.
template <typename T>
__global__ void LstmStepK(const T* x, const T* bias, const T* hw, const int64_t* seq,
                          const int64_t* row, int64_t n, int64_t d, rnn::LstmAttrs a, bool peep,
                          T* g, T* c, T* tc, T* h, T* hs, T* cs) {
  LOOM_GRID_STRIDE(idx, n * d) {
    const int64_t i = idx / d, j = idx % d, sq = seq[i], r = row[i];
    T* gr = g + r * 4 * d;
    const T* xr = x + r * 4 * d;
    const T* hr = hw + i * 4 * d;
    const T cp = cs[sq * d + j];
    const T cand = rnn::Apply(a.cand, xr[j] + bias[j] + hr[j]);
    const T ig = rnn::Apply(
        a.gate, xr[d + j] + bias[d + j] + hr[d + j] + (peep ? bias[4 * d + j] * cp : T(0)));
    const T fg = rnn::Apply(a.gate, xr[2 * d + j] + bias[2 * d + j] + hr[2 * d + j] +
                                        (peep ? bias[5 * d + j] * cp : T(0)));
    const T cr = fg * cp + ig * cand;
    const T og = rnn::Apply(a.gate, xr[3 * d + j] + bias[3 * d + j] + hr[3 * d + j] +
                                        (peep ? bias[6 * d + j] * cr : T(0)));
    const T t = rnn::Apply(a.cell, cr);
    gr[j] = cand;
    gr[d + j] = ig;
    gr[2 * d + j] = fg;
    gr[3 * d + j] = og;
    c[r * d + j] = cr;
    tc[r * d + j] = t;
    h[r * d + j] = og * t;
    hs[sq * d + j] = og * t;
    cs[sq * d + j] = cr;
  }
}

// One backward step: thread (i, j). Writes the gates' gradients (dgb, and dG at the row),
// the previous hidden state (hpb, for Weight's gradient), the cell gradient passed to the
// step before (dcs), and the peephole products (pp: [rows, 3 * D]).
template <typename T>
__global__ void LstmStepGradK(const T* g, const T* c, const T* tc, const T* h, const T* h0,
                              const T* c0, const T* bias, const T* dh_out, const T* dc_out,
                              const int64_t* seq, const int64_t* row, const int64_t* prev,
                              int64_t n, int64_t d, rnn::LstmAttrs a, bool peep, const T* dhs,
                              T* dcs, T* dgb, T* hpb, T* dG, T* pp) {
  LOOM_GRID_STRIDE(idx, n * d) {
    const int64_t i = idx / d, j = idx % d, sq = seq[i], r = row[i], pr = prev[i];
    const T hp = pr >= 0 ? h[pr * d + j] : (h0 ? h0[sq * d + j] : T(0));
    const T cp = pr >= 0 ? c[pr * d + j] : (c0 ? c0[sq * d + j] : T(0));
    hpb[i * d + j] = hp;
    const T* gr = g + r * 4 * d;
    const T cand = gr[j], ig = gr[d + j], fg = gr[2 * d + j], og = gr[3 * d + j];
    const T t = tc[r * d + j];
    const T dh = (dh_out ? dh_out[r * d + j] : T(0)) + dhs[sq * d + j];
    const T dpo = dh * t * rnn::Derive(a.gate, og);
    const T dc = dh * og * rnn::Derive(a.cell, t) + dcs[sq * d + j] +
                 (peep ? dpo * bias[6 * d + j] : T(0)) + (dc_out ? dc_out[r * d + j] : T(0));
    const T dpc = dc * ig * rnn::Derive(a.cand, cand);
    const T dpi = dc * cand * rnn::Derive(a.gate, ig);
    const T dpf = dc * cp * rnn::Derive(a.gate, fg);
    dcs[sq * d + j] =
        dc * fg + (peep ? dpi * bias[4 * d + j] : T(0)) + (peep ? dpf * bias[5 * d + j] : T(0));
    T* dg = dgb + i * 4 * d;
    dg[j] = dpc;
    dg[d + j] = dpi;
    dg[2 * d + j] = dpf;
    dg[3 * d + j] = dpo;
    T* dr = dG + r * 4 * d;
    dr[j] = dpc;
    dr[d + j] = dpi;
    dr[2 * d + j] = dpf;
    dr[3 * d + j] = dpo;
    if (peep) {
      pp[r * 3 * d + j] = dpi * cp;
      pp[r * 3 * d + d + j] = dpf * cp;
      pp[r * 3 * d + 2 * d + j] = dpo * c[r * d + j];
    }
  }
}

// out[j] = sum over rows of m[r, j] (m: [rows, w]).
template <typename T>
__global__ void ColumnSumK(const T* m, int64_t rows, int64_t w, T* out) {
  LOOM_GRID_STRIDE(j, w) {
    T acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += m[r * w + j];
    out[j] = acc;
  }
}

template <typename T>
Status Lstm(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(rnn::LstmAttrs a, rnn::ReadLstmAttrs(ctx));
  const bool peep = a.peepholes;
  LOOM_ASSIGN_OR_RETURN(rnn::LstmGeom geom, rnn::PrepareLstm(ctx));
  const Tensor& in = ctx.Input("Input");
  const std::vector<int64_t>& off = geom.off;
  const Tensor& wt = ctx.Input("Weight");
  const int64_t d = geom.d, seqs = geom.seqs;
  Tensor* ht = ctx.Output("Hidden");
  Tensor* ct = ctx.Output("Cell");
  Tensor* gt = ctx.Output("BatchGate");
  Tensor* at = ctx.Output("BatchCellPreAct");
  T* h = MutableDataOf<T>(ht, ctx.place());
  T* c = MutableDataOf<T>(ct, ctx.place());
  T* g = MutableDataOf<T>(gt, ctx.place());
  T* tc = MutableDataOf<T>(at, ctx.place());
  const Plan plan = MakePlan(off, a.reverse);
  const DevicePlan dp = Upload(ctx, plan);
  cudaStream_t s = Stream(ctx);
  T *hs, *cs, *hb, *gb;
  Tensor hs_t = Scratch<T>(ctx, seqs * d, &hs), cs_t = Scratch<T>(ctx, seqs * d, &cs);
  Tensor hb_t = Scratch<T>(ctx, plan.widest * d, &hb);
  Tensor gb_t = Scratch<T>(ctx, plan.widest * 4 * d, &gb);
  const size_t state_bytes = sizeof(T) * static_cast<size_t>(seqs * d);
  if (ctx.InputSize("H0"))
    cudaMemcpyAsync(hs, DataOf<T>(ctx.Input("H0")), state_bytes, cudaMemcpyDeviceToDevice, s);
  else
    cudaMemsetAsync(hs, 0, state_bytes, s);
  if (ctx.InputSize("C0"))
    cudaMemcpyAsync(cs, DataOf<T>(ctx.Input("C0")), state_bytes, cudaMemcpyDeviceToDevice, s);
  else
    cudaMemsetAsync(cs, 0, state_bytes, s);
  const T* x = DataOf<T>(in);
  const T* w = DataOf<T>(wt);
  const T* bias = DataOf<T>(ctx.Input("Bias"));
  for (size_t k = 0; k + 1 < plan.start.size(); ++k) {
    const int64_t b = plan.start[k], n = plan.start[k + 1] - b;
    GatherK<T><<<Blocks(n * d), kThreads, 0, s>>>(hs, dp.seq + b, n, d, hb);
    LOOM_RETURN_IF_ERROR(Gemm<T>(ctx, false, false, n, 4 * d, d, hb, w, T(0), gb));
    LstmStepK<T><<<Blocks(n * d), kThreads, 0, s>>>(x, bias, gb, dp.seq + b, dp.row + b, n, d, a,
                                                    peep, g, c, tc, h, hs, cs);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  }
  ht->set_lod(in.lod());
  ct->set_lod(in.lod());
  // The scratch tensors are freed when this returns, with kernels still queued on them.
  cudaStreamSynchronize(s);
  return LaunchStatus(ctx);
}

template <typename T>
Status LstmGrad(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(rnn::LstmAttrs a, rnn::ReadLstmAttrs(ctx));
  const bool peep = a.peepholes;
  const Tensor& in = ctx.Input("Input");
  if (!in.has_lod()) return ctx.Error("Input has no LoD");
  const std::vector<int64_t>& off = in.lod().back();
  const Tensor& wt = ctx.Input("Weight");
  const int64_t d = wt.dims()[0], rows = in.dims()[0];
  const int64_t seqs = static_cast<int64_t>(off.size()) - 1;
  cudaStream_t s = Stream(ctx);
  auto in_or_null = [&](const char* slot) -> const T* {
    return ctx.InputSize(slot) ? DataOf<T>(ctx.Input(slot)) : nullptr;
  };
  auto out = [&](const char* slot) -> T* {  // zeroed, with its forward input's dims
    Tensor* t = ctx.OutputOrNull(StrCat(slot, "@GRAD"));
    if (!t) return nullptr;
    t->Resize(ctx.Input(slot).dims());
    T* p = MutableDataOf<T>(t, ctx.place());
    cudaMemsetAsync(p, 0, sizeof(T) * static_cast<size_t>(t->numel()), s);
    return p;
  };
  T* dx = out("Input");
  T* dw = out("Weight");
  T* db = out("Bias");
  T* dh0 = out("H0");
  T* dc0 = out("C0");
  const Plan plan = MakePlan(off, a.reverse);
  const DevicePlan dp = Upload(ctx, plan);
  T *dhs, *dcs, *dgb, *hpb, *dhb, *dG = dx, *pp;
  Tensor dhs_t = Scratch<T>(ctx, seqs * d, &dhs), dcs_t = Scratch<T>(ctx, seqs * d, &dcs);
  Tensor dgb_t = Scratch<T>(ctx, plan.widest * 4 * d, &dgb);
  Tensor hpb_t = Scratch<T>(ctx, plan.widest * d, &hpb);
  Tensor dhb_t = Scratch<T>(ctx, plan.widest * d, &dhb);
  Tensor dG_t, pp_t = Scratch<T>(ctx, peep ? rows * 3 * d : 1, &pp);
  if (!dG) dG_t = Scratch<T>(ctx, rows * 4 * d, &dG);
  cudaMemsetAsync(dhs, 0, sizeof(T) * static_cast<size_t>(seqs * d), s);
  cudaMemsetAsync(dcs, 0, sizeof(T) * static_cast<size_t>(seqs * d), s);
  const T* w = DataOf<T>(wt);
  for (size_t k = plan.start.size() - 1; k-- > 0;) {
    const int64_t b = plan.start[k], n = plan.start[k + 1] - b;
    LstmStepGradK<T><<<Blocks(n * d), kThreads, 0, s>>>(
        DataOf<T>(ctx.Input("BatchGate")), DataOf<T>(ctx.Input("Cell")),
        DataOf<T>(ctx.Input("BatchCellPreAct")), DataOf<T>(ctx.Input("Hidden")), in_or_null("H0"),
        in_or_null("C0"), DataOf<T>(ctx.Input("Bias")), in_or_null("Hidden@GRAD"),
        in_or_null("Cell@GRAD"), dp.seq + b, dp.row + b, dp.prev + b, n, d, a, peep, dhs, dcs, dgb,
        hpb, dG, pp);
    LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
    if (dw) LOOM_RETURN_IF_ERROR(Gemm<T>(ctx, true, false, d, 4 * d, n, hpb, dgb, T(1), dw));
    LOOM_RETURN_IF_ERROR(Gemm<T>(ctx, false, true, n, d, 4 * d, dgb, w, T(0), dhb));
    ScatterK<T><<<Blocks(n * d), kThreads, 0, s>>>(dhb, dp.seq + b, n, d, dhs);
  }
  const size_t state_bytes = sizeof(T) * static_cast<size_t>(seqs * d);
  if (dh0) cudaMemcpyAsync(dh0, dhs, state_bytes, cudaMemcpyDeviceToDevice, s);
  if (dc0) cudaMemcpyAsync(dc0, dcs, state_bytes, cudaMemcpyDeviceToDevice, s);
  if (db) {
    ColumnSumK<T><<<Blocks(4 * d), kThreads, 0, s>>>(dG, rows, 4 * d, db);
    if (peep) ColumnSumK<T><<<Blocks(3 * d), kThreads, 0, s>>>(pp, rows, 3 * d, db + 4 * d);
  }
  if (Tensor* t = ctx.OutputOrNull("Input@GRAD")) t->set_lod(in.lod());
  cudaStreamSynchronize(s);  // scratch tensors are freed on return
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(lstm, kCUDA, FP32, Lstm<float>);
LOOM_REGISTER_KERNEL(lstm, kCUDA, FP64, Lstm<double>);
LOOM_REGISTER_KERNEL(lstm_grad, kCUDA, FP32, LstmGrad<float>);
LOOM_REGISTER_KERNEL(lstm_grad, kCUDA, FP64, LstmGrad<double>);

}  // namespace loom::ops::cuda
