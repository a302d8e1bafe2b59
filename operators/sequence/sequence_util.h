// Host-side planning shared by the CPU and CUDA kernels of the sequence ops
// (sequence_ops.cc, sequence_lod.cc, sequence_cuda.cu, sequence_rows_cuda.cu): the offsets of
// an input's sequences, a row's width, the LoD above the last level, and sequence_expand's
// plan. One definition, so the two places check and plan alike.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "framework/op_registry.h"

namespace loom::ops {

// The last level's offsets of a LoD input, or an error naming the op and input.
inline StatusOr<std::vector<int64_t>> SequenceOffsets(const KernelContext& ctx, const char* slot) {
  const Tensor& x = ctx.Input(slot);
  if (!x.has_lod())
    return ctx.Error("input ", slot,
                     " has no LoD: feed it as a LoDTensor (fluid.create_lod_tensor, or a "
                     "DataFeeder over a variable declared with lod_level >= 1)");
  const std::vector<int64_t>& off = x.lod().back();
  if (off.back() != (x.dims().size() ? x.dims()[0] : 0))
    return ctx.Error("input ", slot, "'s LoD ", LoDToString(x.lod()), " does not cover its ",
                     x.dims().ToString(), " rows");
  return off;
}

// The LoD above the last level (what remains once each last-level sequence is one row).
inline LoD UpperLevels(const LoD& lod) { return LoD(lod.begin(), lod.end() - 1); }

// Elements per row (dims after the first; for no rows, their product).
inline int64_t RowWidth(const Tensor& x) {
  return x.dims().size() && x.dims()[0] > 0 ? x.numel() / x.dims()[0]
                                            : x.dims().product(1, x.dims().size());
}

// sequence_expand / sequence_expand_as: the X row of every output row, and the output's LoD.
struct Expansion {
  std::vector<int64_t> rows;
  LoD lod;
};

inline StatusOr<Expansion> PlanExpand(const KernelContext& ctx, bool as) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const int64_t x_rows = x.dims().size() ? x.dims()[0] : 0;
  if (!y.has_lod()) return ctx.Error("input Y has no LoD: its sequences give the repeats");
  Expansion e;
  if (as) {
    const auto& ref = y.lod().back();
    if (static_cast<int64_t>(ref.size()) - 1 != x_rows)
      return ctx.Error("X has ", x_rows, " rows, Y ", ref.size() - 1, " sequences");
    for (size_t i = 0; i + 1 < ref.size(); ++i)
      for (int64_t k = ref[i]; k < ref[i + 1]; ++k) e.rows.push_back(static_cast<int64_t>(i));
    e.lod = {ref};
    return e;
  }
  int level = ctx.Attr<int>("ref_level");
  if (level < 0) level += static_cast<int>(y.lod().size());
  if (level < 0 || level >= static_cast<int>(y.lod().size()))
    return ctx.Error("ref_level ", ctx.Attr<int>("ref_level"), " is not a level of Y's LoD ",
                     LoDToString(y.lod()));
  const auto& ref = y.lod()[level];
  std::vector<int64_t> xoff;  // X's sequences: its last LoD level, or one per row
  if (x.has_lod()) {
    xoff = x.lod().back();
  } else {
    for (int64_t r = 0; r <= x_rows; ++r) xoff.push_back(r);
  }
  if (xoff.size() != ref.size())
    return ctx.Error("X has ", xoff.size() - 1, " sequences, Y's level ", level, " has ",
                     ref.size() - 1);
  std::vector<int64_t> out_off{0};
  for (size_t i = 0; i + 1 < ref.size(); ++i)
    for (int64_t c = 0; c < ref[i + 1] - ref[i]; ++c) {
      for (int64_t r = xoff[i]; r < xoff[i + 1]; ++r) e.rows.push_back(r);
      out_off.push_back(static_cast<int64_t>(e.rows.size()));
    }
  for (int64_t r : e.rows)  // a LoD that does not cover X: rows the gather would read
    if (r < 0 || r >= x_rows)
      return ctx.Error("X's LoD ", LoDToString(x.lod()), " does not cover its ",
                       x.dims().ToString(), " rows");
  if (x.has_lod()) {
    e.lod = {out_off};
  } else {
    e.lod = {ref};  // rows repeated: grouped by the X row they copy (Y's level)
  }
  return e;
}

// sequence_pad: X's sequences, the row width, the padded length (padded_length, or the longest
// sequence), checked against PadValue; Out [seqs, len, ...] and Length [seqs] sized.
struct PadPlan {
  std::vector<int64_t> off;
  int64_t seqs, w, len;
};

inline StatusOr<PadPlan> PlanPad(const KernelContext& ctx) {
  PadPlan p;
  LOOM_ASSIGN_OR_RETURN(p.off, SequenceOffsets(ctx, "X"));
  const Tensor& xt = ctx.Input("X");
  const Tensor& pv = ctx.Input("PadValue");
  p.seqs = static_cast<int64_t>(p.off.size()) - 1;
  p.w = RowWidth(xt);
  if (pv.numel() != 1 && pv.numel() != p.w)
    return ctx.Error("PadValue has ", pv.numel(), " elements: give 1 or a row's ", p.w);
  int64_t longest = 0;
  for (int64_t s = 0; s < p.seqs; ++s) longest = std::max(longest, p.off[s + 1] - p.off[s]);
  p.len = ctx.Attr<int>("padded_length");
  if (p.len < 0) p.len = longest;
  if (p.len < longest)
    return ctx.Error("padded_length ", p.len, " is shorter than the longest sequence (", longest,
                     ")");
  std::vector<int64_t> d{p.seqs, p.len};
  for (int i = 1; i < xt.dims().size(); ++i) d.push_back(xt.dims()[i]);
  ctx.Output("Out")->Resize(DDim(d));
  ctx.Output("Length")->Resize(DDim({p.seqs}));
  return p;
}

// sequence_unpad: Out sized for the sequences `off` (one row per unpadded step) of X
// [seqs, len, ...]; returns the elements per step.
inline int64_t SizeUnpadded(const KernelContext& ctx, const std::vector<int64_t>& off) {
  const Tensor& xt = ctx.Input("X");
  const int64_t seqs = xt.dims()[0], len = xt.dims()[1];
  std::vector<int64_t> d{off.back()};
  for (int i = 2; i < xt.dims().size(); ++i) d.push_back(xt.dims()[i]);
  ctx.Output("Out")->Resize(DDim(d));
  return len > 0 && seqs > 0 ? xt.numel() / (seqs * len) : 0;
}

}  // namespace loom::ops
