// Fluid 1.x's LoD tensor array ops, the pieces of its hand-written dynamic RNN:
//
//   table = lod_rank_table(x)                  the sequences of x, longest first
//   steps = lod_tensor_to_array(x, table)      element t: row t of every sequence longer than t
//   while t < max_sequence_len(table):
//     mem = shrink_rnn_memory(mem, t, table)   the first rows: the sequences still running
//     ... read_from_array(steps, t) ... write_to_array(h, t, outs)
//   out = array_to_lod_tensor(outs, table)     back to x's rows and order, with x's LoD
//
// plus reorder_lod_tensor_by_rank (a per-sequence tensor, such as an initial memory, put in the
// table's order). A rank table is an int64 tensor [sequences, 2] of (index in x, length), sorted
// by length, longest first (stable: equal lengths keep x's order); every element of the arrays
// and every shrunk memory lists the sequences in that order. Every op here has a gradient, so a
// while loop over these arrays trains: the gradient of an array is an array (elements missing
// where no gradient reached, read as zeros), and read_from_array_grad adds into it. Also here:
// the gradients of tensor_array.cc's write_to_array, read_from_array and
// tensor_array_to_tensor, and empty_array_like (an array's zero gradient, which backward
// seeds a loop-carried array with; while_grad threads one gradient array through the
// iterations). reorder_lod_tensor_by_rank takes X with at most one LoD level.
#include <algorithm>
#include <cstring>

#include "framework/tensor_array.h"
#include "operators/common.h"
#include "operators/control/control_util.h"

namespace loom::ops {
namespace {

struct RankItem {
  int64_t index;
  int64_t length;
};

Tensor OnHost(const KernelContext& ctx, const Tensor& t) {
  if (t.place().is_cpu()) return t;
  ctx.device().Wait();
  Tensor host;
  TensorCopy(t, Place::CPU(), &host);
  return host;
}

StatusOr<std::vector<RankItem>> ReadTable(const KernelContext& ctx, const std::string& slot) {
  const Tensor* t = ctx.InputOrNull(slot);
  if (!t || t->dtype() != proto::INT64 || t->dims().size() != 2 || t->dims()[1] != 2)
    return ctx.Error("input '", slot, "' (var '", ctx.InputVarName(slot),
                     "') is not a rank table (make it with layers.lod_rank_table)");
  Tensor h = OnHost(ctx, *t);
  const int64_t* p = h.data<int64_t>();
  std::vector<RankItem> items(static_cast<size_t>(h.dims()[0]));
  for (size_t k = 0; k < items.size(); ++k) items[k] = {p[2 * k], p[2 * k + 1]};
  return items;
}

// The one-level LoD offsets of x at level 0 (a tensor without LoD: one row per sequence).
StatusOr<std::vector<int64_t>> TopOffsets(const KernelContext& ctx, const Tensor& x,
                                          const std::string& slot, size_t sequences) {
  std::vector<int64_t> off;
  if (x.lod().empty()) {
    for (int64_t r = 0; r <= x.dims()[0]; ++r) off.push_back(r);
  } else if (x.lod().size() == 1) {
    off = x.lod()[0];
  } else {
    return ctx.Error("input '", slot, "' (var '", ctx.InputVarName(slot), "') has a ",
                     x.lod().size(), "-level LoD; only one level is supported");
  }
  if (off.size() != sequences + 1)
    return ctx.Error("input '", slot, "' (var '", ctx.InputVarName(slot), "') has ", off.size() - 1,
                     " sequence(s), the rank table ", sequences);
  return off;
}

int64_t RowBytes(const Tensor& t) {
  int64_t n = static_cast<int64_t>(SizeOf(t.dtype()));
  for (size_t d = 1; d < t.dims().size(); ++d) n *= t.dims()[d];
  return n;
}

DDim WithRows(const DDim& d, int64_t rows) {
  std::vector<int64_t> v(d.begin(), d.end());
  v[0] = rows;
  return DDim(v);
}

// A host tensor of `rows` rows shaped and typed like `like` (zeros).
Tensor HostLike(const Tensor& like, int64_t rows) {
  Tensor t;
  t.Resize(WithRows(like.dims(), rows));
  void* p = t.mutable_data(Place::CPU(), like.dtype());
  std::memset(p, 0, static_cast<size_t>(rows * RowBytes(like)));
  return t;
}

TensorArray* MutableArray(Variable* v) {
  if (!v->IsType<TensorArray>()) v->Clear();  // an empty tensor a shape pass made
  return v->GetMutable<TensorArray>();
}

StatusOr<const TensorArray*> ArrayInput(const KernelContext& ctx, const std::string& slot) {
  const Variable* v = ctx.InputVariable(slot);
  if (!v || !v->IsType<TensorArray>())
    return ctx.Error("input '", slot, "' (var '", ctx.InputVarName(slot),
                     "') is not a tensor array");
  return &v->Get<TensorArray>();
}

// Element t of the array a LoD tensor is split into: for each sequence of the table still
// running at step t (length > t), in table order, the row offsets[index] + t.
size_t Running(const std::vector<RankItem>& items, int64_t t) {
  size_t n = 0;
  while (n < items.size() && items[n].length > t) ++n;
  return n;
}

// ---- lod_rank_table ----
Status RankTableInferShape(InferShapeContext* ctx) {
  if (ctx->IsRuntime()) return Status::OK();
  ctx->SetOutputDim("Out", DDim{-1, 2});
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

Status RankTableKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int level = ctx.Attr<int>("level");
  if (level < 0 || level >= static_cast<int>(x.lod().size()))
    return ctx.Error("level ", level, " is not a level of the LoD of X (var '",
                     ctx.InputVarName("X"), "', ", x.lod().size(), " level(s))");
  const auto& off = x.lod()[static_cast<size_t>(level)];
  std::vector<RankItem> items;
  for (size_t i = 0; i + 1 < off.size(); ++i)
    items.push_back({static_cast<int64_t>(i), off[i + 1] - off[i]});
  std::stable_sort(items.begin(), items.end(),
                   [](const RankItem& a, const RankItem& b) { return a.length > b.length; });
  Tensor* out = ctx.Output("Out");
  out->set_lod({});
  out->Resize(DDim{static_cast<int64_t>(items.size()), 2});
  int64_t* p = out->mutable_data<int64_t>(Place::CPU());
  for (size_t k = 0; k < items.size(); ++k) {
    p[2 * k] = items[k].index;
    p[2 * k + 1] = items[k].length;
  }
  return Status::OK();
}

// ---- max_sequence_len ----
Status MaxLenInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim{1});
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

Status MaxLenKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim{1});
  out->mutable_data<int64_t>(Place::CPU())[0] = items.empty() ? 0 : items[0].length;
  return Status::OK();
}

// ---- lod_tensor_to_array and array_to_lod_tensor, and their gradients ----
//
// A sequence of x (level 0 of its LoD) is a list of steps ("units"): its rows when x has one
// LoD level, its sub-sequences (with everything below them) when it has more. Element t of
// the array holds unit t of every sequence still running, in table order, and the LoD of
// those units' levels below.

// Unit u of a tensor whose LoD levels below its units are `sub` (empty: a unit is a row):
// its row range, appending the lengths of its own levels to lens (one list per level).
std::pair<int64_t, int64_t> UnitSpan(const LoD& sub, int64_t u,
                                     std::vector<std::vector<int64_t>>* lens) {
  int64_t b = u, e = u + 1;
  for (size_t l = 0; l < sub.size(); ++l) {
    for (int64_t j = b; j < e; ++j) (*lens)[l].push_back(sub[l][j + 1] - sub[l][j]);
    b = sub[l][static_cast<size_t>(b)];
    e = sub[l][static_cast<size_t>(e)];
  }
  return {b, e};
}

// Where each unit lies in the whole LoD tensor and in its array element.
struct Piece {
  size_t step;
  int64_t elem_row, whole_row, rows;
};
struct Layout {
  std::vector<Piece> pieces;
  std::vector<int64_t> elem_rows;  // rows of each element
  std::vector<LoD> elem_lod;       // LoD of each element
  int64_t whole_rows = 0;
  LoD whole_lod;
};

int64_t Steps(const std::vector<RankItem>& items) { return items.empty() ? 0 : items[0].length; }

// The layout of lod_tensor_to_array(x): from x's LoD.
StatusOr<Layout> SplitLayout(const KernelContext& ctx, const Tensor& x,
                             const std::vector<RankItem>& items) {
  if (x.lod().empty())
    return ctx.Error("X (var '", ctx.InputVarName("X"), "') has no LoD: nothing to split");
  const auto& off = x.lod()[0];
  if (off.size() != items.size() + 1)
    return ctx.Error("X (var '", ctx.InputVarName("X"), "') has ", off.size() - 1,
                     " sequence(s), the rank table ", items.size());
  for (const auto& it : items)
    if (it.index < 0 || it.index >= static_cast<int64_t>(items.size()) ||
        off[static_cast<size_t>(it.index) + 1] - off[static_cast<size_t>(it.index)] != it.length)
      return ctx.Error("the rank table (var '", ctx.InputVarName("RankTable"),
                       "') does not describe the sequences of X (var '", ctx.InputVarName("X"),
                       "'): build it from X's LoD");
  const LoD sub(x.lod().begin() + 1, x.lod().end());
  Layout lay;
  const int64_t steps = Steps(items);
  for (int64_t t = 0; t < steps; ++t) {
    std::vector<std::vector<int64_t>> lens(sub.size());
    int64_t at = 0;
    for (size_t k = 0; k < Running(items, t); ++k) {
      auto [b, e] = UnitSpan(sub, off[static_cast<size_t>(items[k].index)] + t, &lens);
      lay.pieces.push_back({static_cast<size_t>(t), at, b, e - b});
      at += e - b;
    }
    lay.elem_rows.push_back(at);
    lay.elem_lod.push_back(sub.empty() ? LoD{} : LengthsToLoD(lens));
  }
  lay.whole_rows = x.dims()[0];
  lay.whole_lod = x.lod();
  return lay;
}

// The layout of array_to_lod_tensor(a): from the elements' LoD and the table.
StatusOr<Layout> MergeLayout(const KernelContext& ctx, const TensorArray& a,
                             const std::vector<RankItem>& items) {
  const int64_t steps = Steps(items);
  const std::string name = ctx.InputVarName("X");
  if (steps == 0)
    return ctx.Error("the rank table (var '", ctx.InputVarName("RankTable"),
                     "') has no step: nothing to assemble");
  if (static_cast<int64_t>(a.size()) < steps)
    return ctx.Error("array X (var '", name, "') has ", a.size(),
                     " element(s); the rank table's longest sequence has ", steps, " step(s)");
  const size_t levels = a.front().lod().size();
  for (int64_t t = 0; t < steps; ++t) {
    const Tensor& e = a[static_cast<size_t>(t)];
    if (!e.initialized())
      return ctx.Error("element ", t, " of array X (var '", name, "') was never written");
    const size_t n = Running(items, t);
    const int64_t units = e.lod().empty() ? (e.dims().size() ? e.dims()[0] : 0)
                                          : static_cast<int64_t>(e.lod()[0].size()) - 1;
    if (e.lod().size() != levels || units != static_cast<int64_t>(n))
      return ctx.Error("element ", t, " of array X (var '", name, "') holds ", units,
                       " step(s) with a ", e.lod().size(), "-level LoD; ", n,
                       " sequence(s) run at step ", t, " (element 0 has ", levels, " level(s))");
  }
  std::vector<size_t> rank(items.size());
  for (size_t k = 0; k < items.size(); ++k) rank[static_cast<size_t>(items[k].index)] = k;
  std::vector<std::vector<int64_t>> lens(levels + 1);
  Layout lay;
  for (int64_t t = 0; t < steps; ++t) {
    lay.elem_rows.push_back(a[static_cast<size_t>(t)].dims()[0]);
    lay.elem_lod.push_back(a[static_cast<size_t>(t)].lod());
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t len = items[rank[i]].length;
    lens[0].push_back(len);
    for (int64_t t = 0; t < len; ++t) {
      const Tensor& e = a[static_cast<size_t>(t)];
      std::vector<std::vector<int64_t>> own(levels);
      auto [b, end] = UnitSpan(e.lod(), static_cast<int64_t>(rank[i]), &own);
      for (size_t l = 0; l < levels; ++l)
        lens[l + 1].insert(lens[l + 1].end(), own[l].begin(), own[l].end());
      lay.pieces.push_back({static_cast<size_t>(t), b, lay.whole_rows, end - b});
      lay.whole_rows += end - b;
    }
  }
  lay.whole_lod = LengthsToLoD(lens);
  return lay;
}

// Copies the pieces from the whole tensor into elements (to_elements) or back.
void CopyPieces(const Layout& lay, const Tensor& whole_or_null, std::vector<Tensor>* elems,
                Tensor* whole, bool to_elements) {
  for (const Piece& p : lay.pieces) {
    Tensor& e = (*elems)[p.step];
    if (!e.initialized()) continue;  // no gradient reached this element
    const int64_t bytes = RowBytes(e);
    if (to_elements)
      std::memcpy(static_cast<char*>(e.raw_data()) + p.elem_row * bytes,
                  static_cast<const char*>(whole_or_null.raw_data()) + p.whole_row * bytes,
                  static_cast<size_t>(p.rows * bytes));
    else
      std::memcpy(static_cast<char*>(whole->raw_data()) + p.whole_row * bytes,
                  static_cast<const char*>(e.raw_data()) + p.elem_row * bytes,
                  static_cast<size_t>(p.rows * bytes));
  }
}

// Elements shaped by the layout, filled from `whole`, placed on `place`.
void SplitByLayout(const Layout& lay, const Tensor& whole, const Place& place, TensorArray* out) {
  std::vector<Tensor> elems;
  for (size_t t = 0; t < lay.elem_rows.size(); ++t) {
    elems.push_back(HostLike(whole, lay.elem_rows[t]));
    elems.back().set_lod(lay.elem_lod[t]);
  }
  CopyPieces(lay, whole, &elems, nullptr, true);
  out->assign(elems.size(), Tensor());
  for (size_t t = 0; t < elems.size(); ++t) {
    if (place.is_cpu()) {
      (*out)[t] = std::move(elems[t]);
    } else {
      TensorCopy(elems[t], place, &(*out)[t]);
      (*out)[t].set_lod(lay.elem_lod[t]);
    }
  }
}

// The whole tensor (rows lay.whole_rows, like `like`) from the elements of a (missing ones:
// zeros). Returns "" or what is wrong with an element.
std::string MergeByLayout(const KernelContext& ctx, const Layout& lay, const TensorArray& a,
                          const Tensor& like, Tensor* whole) {
  *whole = HostLike(like, lay.whole_rows);
  std::vector<Tensor> elems(lay.elem_rows.size());
  for (size_t t = 0; t < elems.size() && t < a.size(); ++t) {
    if (!a[t].initialized()) continue;
    if (a[t].dims().size() == 0 || a[t].dims()[0] != lay.elem_rows[t] ||
        RowBytes(a[t]) != RowBytes(like))
      return StrCat("element ", t, " is ", a[t].dims().ToString(), ", expected ", lay.elem_rows[t],
                    " row(s) of ", like.dims().ToString(), "'s width");
    elems[t] = OnHost(ctx, a[t]);
  }
  CopyPieces(lay, Tensor(), &elems, whole, false);
  return "";
}

Status ToArrayInferShape(InferShapeContext* ctx) {
  if (!ctx->IsRuntime()) ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status ToArrayKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  Tensor x = OnHost(ctx, ctx.Input("X"));
  LOOM_ASSIGN_OR_RETURN(Layout lay, SplitLayout(ctx, x, items));
  SplitByLayout(lay, x, ctx.place(), MutableArray(ctx.OutputVariable("Out")));
  return Status::OK();
}

// X@GRAD = Out@GRAD's rows back in X's places (zeros where no gradient reached).
Status ToArrayGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(Layout lay, SplitLayout(ctx, x, items));
  Tensor g = HostLike(x, x.dims()[0]);
  const Variable* v = ctx.InputVariable("Out@GRAD");
  if (v && v->IsType<TensorArray>()) {
    std::string bad = MergeByLayout(ctx, lay, v->Get<TensorArray>(), x, &g);
    if (!bad.empty())
      return ctx.Error("Out@GRAD (var '", ctx.InputVarName("Out@GRAD"), "'): ", bad);
  }
  TensorCopy(g, ctx.place(), dx);
  dx->set_lod(x.lod());
  return Status::OK();
}

Status FromArrayInferShape(InferShapeContext* ctx) {
  if (ctx->IsRuntime()) return Status::OK();
  DDim d = ctx->InputDim("X");
  if (d.size() > 0) ctx->SetOutputDim("Out", WithRows(d, -1));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status FromArrayKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  LOOM_ASSIGN_OR_RETURN(const TensorArray* a, ArrayInput(ctx, "X"));
  LOOM_ASSIGN_OR_RETURN(Layout lay, MergeLayout(ctx, *a, items));
  Tensor out;
  std::string bad = MergeByLayout(ctx, lay, *a, a->front(), &out);
  if (!bad.empty()) return ctx.Error("array X (var '", ctx.InputVarName("X"), "'): ", bad);
  Tensor* o = ctx.Output("Out");
  TensorCopy(out, ctx.place(), o);
  o->set_lod(lay.whole_lod);
  return Status::OK();
}

// X@GRAD (an array) = Out@GRAD split as the forward elements were assembled.
Status FromArrayGradKernel(const KernelContext& ctx) {
  Variable* v = ctx.OutputVariable("X@GRAD");
  if (!v) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  LOOM_ASSIGN_OR_RETURN(const TensorArray* a, ArrayInput(ctx, "X"));
  LOOM_ASSIGN_OR_RETURN(Layout lay, MergeLayout(ctx, *a, items));
  Tensor g = OnHost(ctx, ctx.Input("Out@GRAD"));
  if (g.dims().size() == 0 || g.dims()[0] != lay.whole_rows)
    return ctx.Error("Out@GRAD (var '", ctx.InputVarName("Out@GRAD"), "') is ", g.dims().ToString(),
                     ", the forward output has ", lay.whole_rows, " row(s)");
  SplitByLayout(lay, g, ctx.place(), MutableArray(v));
  return Status::OK();
}

// ---- shrink_rnn_memory: Out = the first rows of X, one per sequence longer than I ----
StatusOr<int64_t> ReadStep(const KernelContext& ctx) {
  Tensor i = OnHost(ctx, ctx.Input("I"));
  if (i.numel() != 1 || (i.dtype() != proto::INT64 && i.dtype() != proto::INT32))
    return ctx.Error("input 'I' (var '", ctx.InputVarName("I"),
                     "') must be a one-element int64 step, it is ", DataTypeName(i.dtype()),
                     i.dims().ToString());
  return i.dtype() == proto::INT64 ? i.data<int64_t>()[0] : i.data<int32_t>()[0];
}

Status ShrinkInferShape(InferShapeContext* ctx) {
  if (ctx->IsRuntime()) return Status::OK();
  DDim d = ctx->InputDim("X");
  if (d.size() > 0) ctx->SetOutputDim("Out", WithRows(d, -1));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status ShrinkKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  LOOM_ASSIGN_OR_RETURN(int64_t step, ReadStep(ctx));
  const Tensor& x = ctx.Input("X");
  const auto n = static_cast<int64_t>(Running(items, step));
  if (x.dims().size() == 0 || x.dims()[0] < n)
    return ctx.Error("X (var '", ctx.InputVarName("X"), "') is ", x.dims().ToString(), ": ", n,
                     " sequence(s) are still running at step ", step);
  Tensor h = OnHost(ctx, x);
  Tensor out = HostLike(x, n);
  if (n > 0) std::memcpy(out.raw_data(), h.raw_data(), n * RowBytes(x));
  Tensor* o = ctx.Output("Out");
  TensorCopy(out, ctx.place(), o);
  o->set_lod({});
  return Status::OK();
}

// X@GRAD = Out@GRAD in the first rows, zeros below.
Status ShrinkGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  Tensor g = HostLike(x, x.dims()[0]);
  if (const Tensor* dout = ctx.InputOrNull("Out@GRAD"); dout && dout->initialized()) {
    if (dout->dims()[0] > x.dims()[0] || RowBytes(*dout) != RowBytes(x))
      return ctx.Error("Out@GRAD is ", dout->dims().ToString(), ", X ", x.dims().ToString());
    Tensor h = OnHost(ctx, *dout);
    std::memcpy(g.raw_data(), h.raw_data(), h.dims()[0] * RowBytes(x));
  }
  TensorCopy(g, ctx.place(), dx);
  return Status::OK();
}

// ---- reorder_lod_tensor_by_rank: X's sequences (rows without a LoD) in the table's order ----
Status ReorderInferShape(InferShapeContext* ctx) {
  if (ctx->IsRuntime()) return Status::OK();
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

// Copies the sequences of src (offsets src_off) into dst (offsets dst_off): dst's sequence k
// is src's sequence perm[k] (backward: the other way round).
void Permute(const Tensor& src, const std::vector<int64_t>& src_off, Tensor* dst,
             const std::vector<int64_t>& dst_off, const std::vector<RankItem>& items,
             bool backward) {
  const int64_t bytes = RowBytes(src);
  for (size_t k = 0; k < items.size(); ++k) {
    const auto i = static_cast<size_t>(items[k].index);
    const size_t from = backward ? k : i, to = backward ? i : k;
    const int64_t rows = src_off[from + 1] - src_off[from];
    std::memcpy(static_cast<char*>(dst->raw_data()) + dst_off[to] * bytes,
                static_cast<const char*>(src.raw_data()) + src_off[from] * bytes,
                static_cast<size_t>(rows * bytes));
  }
}

std::vector<int64_t> ReorderedOffsets(const std::vector<int64_t>& off,
                                      const std::vector<RankItem>& items) {
  std::vector<int64_t> out{0};
  for (const auto& it : items) {
    const auto i = static_cast<size_t>(it.index);
    out.push_back(out.back() + off[i + 1] - off[i]);
  }
  return out;
}

Status CheckPermutation(const KernelContext& ctx, const std::vector<RankItem>& items) {
  std::vector<bool> seen(items.size(), false);
  for (const auto& it : items) {
    if (it.index < 0 || it.index >= static_cast<int64_t>(items.size()) ||
        seen[static_cast<size_t>(it.index)])
      return ctx.Error("the rank table (var '", ctx.InputVarName("RankTable"),
                       "') is not a permutation of its sequences");
    seen[static_cast<size_t>(it.index)] = true;
  }
  return Status::OK();
}

Status ReorderKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  LOOM_RETURN_IF_ERROR(CheckPermutation(ctx, items));
  Tensor x = OnHost(ctx, ctx.Input("X"));
  LOOM_ASSIGN_OR_RETURN(auto off, TopOffsets(ctx, x, "X", items.size()));
  const std::vector<int64_t> out_off = ReorderedOffsets(off, items);
  Tensor out = HostLike(x, x.dims()[0]);
  Permute(x, off, &out, out_off, items, false);
  Tensor* o = ctx.Output("Out");
  TensorCopy(out, ctx.place(), o);
  o->set_lod(x.lod().empty() ? LoD{} : LoD{out_off});
  return Status::OK();
}

Status ReorderGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(auto items, ReadTable(ctx, "RankTable"));
  LOOM_RETURN_IF_ERROR(CheckPermutation(ctx, items));
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(auto off, TopOffsets(ctx, x, "X", items.size()));
  Tensor g = OnHost(ctx, ctx.Input("Out@GRAD"));
  if (g.dims() != x.dims())
    return ctx.Error("Out@GRAD is ", g.dims().ToString(), ", X ", x.dims().ToString());
  Tensor out = HostLike(x, x.dims()[0]);
  Permute(g, ReorderedOffsets(off, items), &out, off, items, true);
  TensorCopy(out, ctx.place(), dx);
  dx->set_lod(x.lod());
  return Status::OK();
}

// ---- the gradients of write_to_array and read_from_array ----
StatusOr<int64_t> ReadIndexOf(const KernelContext& ctx) {
  Tensor i = OnHost(ctx, ctx.Input("I"));
  if (i.numel() != 1 || (i.dtype() != proto::INT64 && i.dtype() != proto::INT32))
    return ctx.Error("input 'I' (var '", ctx.InputVarName("I"),
                     "') must be a one-element int64 index");
  return i.dtype() == proto::INT64 ? i.data<int64_t>()[0] : i.data<int32_t>()[0];
}

// X@GRAD = Out@GRAD[I], zeros when the array gradient has no element I.
Status WriteGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(int64_t i, ReadIndexOf(ctx));
  const Tensor& x = ctx.Input("X");
  const Variable* v = ctx.InputVariable("Out@GRAD");
  if (v && v->IsType<TensorArray>()) {
    const TensorArray& a = v->Get<TensorArray>();
    if (i < static_cast<int64_t>(a.size()) && a[static_cast<size_t>(i)].initialized()) {
      const Tensor& e = a[static_cast<size_t>(i)];
      if (e.dims() != x.dims())
        return ctx.Error("element ", i, " of Out@GRAD (var '", ctx.InputVarName("Out@GRAD"),
                         "') is ", e.dims().ToString(), ", X ", x.dims().ToString());
      CopyOnPlace(ctx, e, dx);
      return Status::OK();
    }
  }
  ZerosOnPlace(ctx, x, dx);
  return Status::OK();
}

// X@GRAD[I] += Out@GRAD: the array gradient accumulates what every read of it adds.
Status ReadGradKernel(const KernelContext& ctx) {
  Variable* v = ctx.OutputVariable("X@GRAD");
  if (!v) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(int64_t i, ReadIndexOf(ctx));
  const Tensor& g = ctx.Input("Out@GRAD");
  TensorArray* a = MutableArray(v);
  if (static_cast<int64_t>(a->size()) <= i) a->resize(static_cast<size_t>(i) + 1);
  Tensor& e = (*a)[static_cast<size_t>(i)];
  if (e.initialized()) {
    if (e.dims() != g.dims())
      return ctx.Error("element ", i, " of X@GRAD is ", e.dims().ToString(), ", Out@GRAD ",
                       g.dims().ToString());
    Tensor sum;
    CopyOnPlace(ctx, e, &sum);  // a fresh buffer: e may share another array's
    LOOM_RETURN_IF_ERROR(AddOnPlace(ctx, g, &sum));
    e = std::move(sum);
  } else {
    Tensor copy;
    CopyOnPlace(ctx, g, &copy);
    e = std::move(copy);
  }
  return Status::OK();
}

Status NoShape(InferShapeContext*) { return Status::OK(); }

// tensor_array_to_tensor's gradient: X@GRAD[k] = element k's part of Out@GRAD along axis
// (stacked: the slice k, without the axis), shaped as the forward element k.
Status ArrayToTensorGradKernel(const KernelContext& ctx) {
  Variable* v = ctx.OutputVariable("X@GRAD");
  if (!v) return Status::OK();
  LOOM_ASSIGN_OR_RETURN(const TensorArray* x, ArrayInput(ctx, "X"));
  const int axis = ctx.Attr<int>("axis");
  const bool stack = ctx.Attr<bool>("use_stack");
  Tensor g = OnHost(ctx, ctx.Input("Out@GRAD"));
  const std::vector<int64_t> gd(g.dims().begin(), g.dims().end());
  if (axis < 0 || axis >= static_cast<int>(gd.size()))
    return ctx.Error("axis ", axis, " is not a dim of Out@GRAD ", g.dims().ToString());
  int64_t outer = 1, inner = static_cast<int64_t>(SizeOf(g.dtype()));
  for (int d = 0; d < axis; ++d) outer *= gd[d];
  for (size_t d = axis + 1; d < gd.size(); ++d) inner *= gd[d];
  const int64_t total = gd[axis];
  TensorArray* out = MutableArray(v);
  out->assign(x->size(), Tensor());
  int64_t at = 0;
  for (size_t k = 0; k < x->size(); ++k) {
    const Tensor& e = (*x)[k];
    const int64_t along = stack ? 1 : e.dims()[axis];
    if (at + along > total)
      return ctx.Error("Out@GRAD ", g.dims().ToString(), " is shorter along axis ", axis,
                       " than the elements of X");
    Tensor part;
    part.Resize(e.dims());
    char* dst = static_cast<char*>(part.mutable_data(Place::CPU(), g.dtype()));
    const char* src = static_cast<const char*>(g.raw_data());
    for (int64_t r = 0; r < outer; ++r)
      std::memcpy(dst + r * along * inner, src + (r * total + at) * inner,
                  static_cast<size_t>(along * inner));
    at += along;
    if (ctx.place().is_cpu())
      (*out)[k] = std::move(part);
    else
      TensorCopy(part, ctx.place(), &(*out)[k]);
  }
  return Status::OK();
}

// Out = an empty array: the zero gradient of an array (its elements read as zeros).
Status EmptyArrayKernel(const KernelContext& ctx) {
  MutableArray(ctx.OutputVariable("Out"))->clear();
  return Status::OK();
}

Status XGradLikeX(InferShapeContext* ctx) {
  if (ctx->IsRuntime() || ctx->OutputSize("X@GRAD") == 0) return Status::OK();
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

proto::OpDesc Grad(const OpDesc& fwd, const char* type, std::initializer_list<const char*> ins) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType(type);
  for (const char* in : ins) op.SetInput(in, fwd.Input(in));
  std::vector<std::string> douts;
  for (const auto& o : fwd.Output("Out")) douts.push_back(GradVarName(o));
  op.SetInput("Out@GRAD", douts);
  std::vector<std::string> dxs;
  for (const auto& x : fwd.Input("X")) dxs.push_back(GradVarName(x));
  op.SetOutput("X@GRAD", dxs);
  return g;
}

}  // namespace

// Every kernel here moves bytes, whatever the dtype: registered for the common ones (an op
// whose first input is an array or a rank table runs its fp32 entry).
#define LOOM_LOD_ARRAY_KERNELS(fn)           \
  Kernel(Place::kCPU, proto::FP32, fn)       \
      .Kernel(Place::kCPU, proto::FP64, fn)  \
      .Kernel(Place::kCPU, proto::INT32, fn) \
      .Kernel(Place::kCPU, proto::INT64, fn) LOOM_LOD_ARRAY_CUDA_KERNELS(fn)
#if LOOM_CUDA_ENABLED
#define LOOM_LOD_ARRAY_CUDA_KERNELS(fn)       \
  .Kernel(Place::kCUDA, proto::FP32, fn)      \
      .Kernel(Place::kCUDA, proto::FP64, fn)  \
      .Kernel(Place::kCUDA, proto::INT32, fn) \
      .Kernel(Place::kCUDA, proto::INT64, fn)
#else
#define LOOM_LOD_ARRAY_CUDA_KERNELS(fn)
#endif

LOOM_REGISTER_OP(lod_rank_table)
    .Doc(
        "Out = the rank table of X's LoD level `level`: int64 [sequences, 2] rows (index, "
        "length), longest first (equal lengths in X's order).")
    .Input("X", "a LoD tensor")
    .Output("Out", "the rank table")
    .Attr<int>("level", 0, "the LoD level whose sequences are ranked")
    .SetsLoD()
    .InferShape(RankTableInferShape)
    .LOOM_LOD_ARRAY_KERNELS(RankTableKernel);

LOOM_REGISTER_OP(max_sequence_len)
    .Doc("Out = the length of the longest sequence of a rank table (0 when it has none).")
    .Input("RankTable", "a rank table")
    .Output("Out", "int64[1]")
    .InferShape(MaxLenInferShape)
    .LOOM_LOD_ARRAY_KERNELS(MaxLenKernel);

LOOM_REGISTER_OP(lod_tensor_to_array)
    .Doc(
        "Out[t] = row t of every sequence of X longer than t, in the rank table's order (X: a "
        "one-level LoD tensor; the array has as many elements as the longest sequence).")
    .Input("X", "a LoD tensor")
    .Input("RankTable", "X's rank table")
    .Output("Out", "LOD_TENSOR_ARRAY variable")
    .InferShape(ToArrayInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{Grad(fwd, "lod_tensor_to_array_grad", {"X", "RankTable"})};
    })
    .LOOM_LOD_ARRAY_KERNELS(ToArrayKernel);

LOOM_REGISTER_OP(lod_tensor_to_array_grad)
    .Doc("X@GRAD = the rows of the array Out@GRAD back in X's places (zeros where missing).")
    .Input("X", "forward X")
    .Input("RankTable", "forward RankTable")
    .Input("Out@GRAD", "gradient of Out (an array)", false, true)
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(XGradLikeX)
    .KernelDtypeFrom("X")
    .LOOM_LOD_ARRAY_KERNELS(ToArrayGradKernel);

LOOM_REGISTER_OP(array_to_lod_tensor)
    .Doc(
        "Out = the inverse of lod_tensor_to_array: the elements' rows back in sequence order, "
        "with the LoD of the sequences the rank table describes.")
    .Input("X", "LOD_TENSOR_ARRAY variable")
    .Input("RankTable", "the rank table the array was split by")
    .Output("Out", "a LoD tensor")
    .SetsLoD()
    .InferShape(FromArrayInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{Grad(fwd, "array_to_lod_tensor_grad", {"X", "RankTable"})};
    })
    .LOOM_LOD_ARRAY_KERNELS(FromArrayKernel);

LOOM_REGISTER_OP(array_to_lod_tensor_grad)
    .Doc("X@GRAD (an array) = Out@GRAD split by the rank table, as lod_tensor_to_array.")
    .Input("X", "forward X")
    .Input("RankTable", "forward RankTable")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X (an array)", false, true)
    .InferShape(NoShape)
    .KernelDtypeFrom("Out@GRAD")
    .LOOM_LOD_ARRAY_KERNELS(FromArrayGradKernel);

LOOM_REGISTER_OP(shrink_rnn_memory)
    .Doc(
        "Out = the first rows of X, one per sequence of the rank table longer than I (the "
        "sequences still running at step I, as the table orders them).")
    .Input("X", "a memory, one row per running sequence")
    .Input("I", "one-element int64 step")
    .Input("RankTable", "the rank table")
    .Output("Out", "the rows still running")
    .SetsLoD()
    .InferShape(ShrinkInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          Grad(fwd, "shrink_rnn_memory_grad", {"X", "I", "RankTable"})};
    })
    .LOOM_LOD_ARRAY_KERNELS(ShrinkKernel);

LOOM_REGISTER_OP(shrink_rnn_memory_grad)
    .Doc("X@GRAD = Out@GRAD in the first rows, zeros in the rows dropped.")
    .Input("X", "forward X")
    .Input("I", "forward I")
    .Input("RankTable", "forward RankTable")
    .Input("Out@GRAD", "gradient of Out", false, true)
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(XGradLikeX)
    .KernelDtypeFrom("X")
    .LOOM_LOD_ARRAY_KERNELS(ShrinkGradKernel);

LOOM_REGISTER_OP(reorder_lod_tensor_by_rank)
    .Doc(
        "Out = the sequences of X (its rows when X has no LoD) in the rank table's order: "
        "Out's sequence k is X's sequence table[k].index.")
    .Input("X", "a tensor with one sequence (or row) per table entry")
    .Input("RankTable", "the rank table")
    .Output("Out", "the reordered tensor")
    .SetsLoD()
    .InferShape(ReorderInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          Grad(fwd, "reorder_lod_tensor_by_rank_grad", {"X", "RankTable"})};
    })
    .LOOM_LOD_ARRAY_KERNELS(ReorderKernel);

LOOM_REGISTER_OP(reorder_lod_tensor_by_rank_grad)
    .Doc("X@GRAD = Out@GRAD's sequences back in X's order.")
    .Input("X", "forward X")
    .Input("RankTable", "forward RankTable")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .SetsLoD()
    .InferShape(XGradLikeX)
    .KernelDtypeFrom("X")
    .LOOM_LOD_ARRAY_KERNELS(ReorderGradKernel);

LOOM_REGISTER_OP(tensor_array_to_tensor_grad)
    .Doc("X@GRAD (an array) = Out@GRAD split back into X's elements along axis.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X (an array)", false, true)
    .AttrsFrom("tensor_array_to_tensor")
    .InferShape(NoShape)
    .KernelDtypeFrom("Out@GRAD")
    .LOOM_LOD_ARRAY_KERNELS(ArrayToTensorGradKernel);

LOOM_REGISTER_OP(empty_array_like)
    .Doc("Out = an empty array (the zero gradient of array X: missing elements read as zeros).")
    .Input("X", "LOD_TENSOR_ARRAY variable")
    .Output("Out", "LOD_TENSOR_ARRAY variable")
    .InferShape(NoShape)
    .LOOM_LOD_ARRAY_KERNELS(EmptyArrayKernel);

LOOM_REGISTER_OP(write_to_array_grad)
    .Doc("X@GRAD = element I of the array gradient Out@GRAD (zeros when it has none).")
    .Input("X", "forward X")
    .Input("I", "forward I")
    .Input("Out@GRAD", "gradient of Out (an array)", false, true)
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(XGradLikeX)
    .KernelDtypeFrom("X")
    .LOOM_LOD_ARRAY_KERNELS(WriteGradKernel);

LOOM_REGISTER_OP(read_from_array_grad)
    .Doc("X@GRAD[I] += Out@GRAD (X@GRAD: the array's gradient, an array).")
    .Input("I", "forward I")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X (an array)", false, true)
    .InferShape(NoShape)
    .KernelDtypeFrom("Out@GRAD")
    .LOOM_LOD_ARRAY_KERNELS(ReadGradKernel);

#undef LOOM_LOD_ARRAY_CUDA_KERNELS
#undef LOOM_LOD_ARRAY_KERNELS

// The gradients of tensor_array.cc's write and read.
std::vector<proto::OpDesc> WriteToArrayGradMaker(const OpDesc& fwd) {
  return {Grad(fwd, "write_to_array_grad", {"X", "I"})};
}

std::vector<proto::OpDesc> ArrayToTensorGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = Grad(fwd, "tensor_array_to_tensor_grad", {"X"});
  OpDesc op(&g);
  for (const char* a : {"axis", "use_stack"})
    if (auto v = fwd.GetAttr(a); v.ok()) op.SetAttr(a, v.value());
  return {g};
}

std::vector<proto::OpDesc> ReadFromArrayGradMaker(const OpDesc& fwd) {
  proto::OpDesc g = Grad(fwd, "read_from_array_grad", {"I"});
  return {g};
}

}  // namespace loom::ops
