// similarity_focus: a 0/1 mask of X [N, A, B, C] that picks, for every batch entry and every
// channel in `indexes` along `axis`, the largest elements of that channel's 2-D slice one per
// row and column (greedily: the largest element not in a row or column picked before, until
// min(rows, cols) are picked), and marks them across the whole axis; the masks of the indexes
// are OR-ed. No gradient.
#include <algorithm>
#include <numeric>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status SimilarityFocusInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() != 4) return ctx->Error(ctx->DescribeInput("X"), " must be 4-D [N, A, B, C]");
  const int axis = ctx->Attr<int>("axis");
  if (axis < 1 || axis > 3) return ctx->Error("axis must be 1, 2 or 3, got ", axis);
  const auto& idx = ctx->Attr<std::vector<int>>("indexes");
  if (idx.empty()) return ctx->Error("indexes must not be empty");
  for (int i : idx)
    if (i < 0 || (x[axis] >= 0 && i >= x[axis]))
      return ctx->Error("index ", i, " of indexes is outside dim ", axis, " (", x[axis], ") of ",
                        ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
Status SimilarityFocusKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const DDim& d = xt.dims();
  const int axis = ctx.Attr<int>("axis");
  const auto& indexes = ctx.Attr<std::vector<int>>("indexes");
  for (int i : indexes)
    if (i < 0 || i >= d[axis]) return ctx.Error("index ", i, " is outside dim ", axis, " of X");
  // The two dims other than axis (among 1..3): p (rows) and q (cols).
  int p = 0, q = 0;
  for (int k = 1; k <= 3; ++k)
    if (k != axis) (p == 0 ? p : q) = k;
  const int64_t strides[4] = {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
  const T* x = xt.data<T>();
  Tensor* out = ctx.Output("Out");
  out->Resize(d);
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + xt.numel(), T(0));
  const int64_t rows = d[p], cols = d[q];
  std::vector<int64_t> order(static_cast<size_t>(rows * cols));
  std::vector<T> slice(order.size());
  for (int64_t n = 0; n < d[0]; ++n)
    for (int index : indexes) {
      const int64_t base = n * strides[0] + index * strides[axis];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          slice[r * cols + c] = x[base + r * strides[p] + c * strides[q]];
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return slice[a] > slice[b]; });
      std::vector<bool> row_used(rows, false), col_used(cols, false);
      int64_t picked = 0;
      for (int64_t e : order) {
        const int64_t r = e / cols, c = e % cols;
        if (row_used[r] || col_used[c]) continue;
        row_used[r] = col_used[c] = true;
        for (int64_t a = 0; a < d[axis]; ++a)
          o[n * strides[0] + a * strides[axis] + r * strides[p] + c * strides[q]] = T(1);
        if (++picked == std::min(rows, cols)) break;
      }
    }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(similarity_focus)
    .Doc(
        "Out = a 0/1 mask of X [N, A, B, C]: per batch entry and per channel i in indexes along "
        "axis, the greedy one-per-row-and-column largest elements of X's slice i, marked along "
        "all of axis; OR over the indexes.")
    .Input("X", "[N, A, B, C]")
    .Output("Out", "the mask, X's dims and dtype")
    .Attr<int>("axis", 1, "the dim the indexes select on (1, 2 or 3)")
    .Attr<std::vector<int>>("indexes", {}, "channels along axis")
    .InferShape(SimilarityFocusInferShape)
    .Kernel(Place::kCPU, proto::FP32, SimilarityFocusKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SimilarityFocusKernel<double>);

}  // namespace loom::ops
