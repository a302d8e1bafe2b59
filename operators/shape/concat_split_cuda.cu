// CUDA kernels of concat, split and stack (fp32, fp64, fp16, int32, int64) and their gradients
// concat_grad, split_grad, stack_grad (fp32, fp64, fp16), as operators/shape/concat_split.cc: the
// data is viewed as an [outer, sum(inner_i)] matrix whose piece i is an [outer, inner_i] block; one
// launch per piece copies its block (one thread per element). Null gradient outputs are skipped.
#include "operators/cuda_util.cuh"
#include "operators/shape/shape_util.h"

namespace loom::ops::cuda {
namespace {

// out[o, offset + k] = piece[o, k] for o < outer, k < inner; out rows are `total` wide.
template <typename T>
__global__ void PieceToWholeK(const T* piece, T* out, int64_t outer, int64_t inner, int64_t total,
                              int64_t offset) {
  LOOM_GRID_STRIDE(i, outer * inner) {
    const int64_t o = i / inner, k = i % inner;
    out[o * total + offset + k] = piece[i];
  }
}

// piece[o, k] = in[o, offset + k].
template <typename T>
__global__ void WholeToPieceK(const T* in, T* piece, int64_t outer, int64_t inner, int64_t total,
                              int64_t offset) {
  LOOM_GRID_STRIDE(i, outer * inner) {
    const int64_t o = i / inner, k = i % inner;
    piece[i] = in[o * total + offset + k];
  }
}

int64_t Total(const std::vector<int64_t>& inner) {
  int64_t t = 0;
  for (int64_t w : inner) t += w;
  return t;
}

// As ConcatCompute: joins the [outer, inner[i]] pieces into out.
template <typename T>
Status ConcatPieces(const KernelContext& ctx, const std::vector<const T*>& pieces,
                    const std::vector<int64_t>& inner, int64_t outer, T* out) {
  const int64_t total = Total(inner);
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t n = outer * inner[i];
    if (n > 0)
      PieceToWholeK<T>
          <<<Blocks(n), kThreads, 0, Stream(ctx)>>>(pieces[i], out, outer, inner[i], total, offset);
    offset += inner[i];
  }
  return LaunchStatus(ctx);
}

// As SplitCompute: cuts `in` into the [outer, inner[i]] pieces; null pieces are skipped.
template <typename T>
Status SplitPieces(const KernelContext& ctx, const T* in, int64_t outer,
                   const std::vector<int64_t>& inner, const std::vector<T*>& pieces) {
  const int64_t total = Total(inner);
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t n = outer * inner[i];
    if (pieces[i] && n > 0)
      WholeToPieceK<T>
          <<<Blocks(n), kThreads, 0, Stream(ctx)>>>(in, pieces[i], outer, inner[i], total, offset);
    offset += inner[i];
  }
  return LaunchStatus(ctx);
}

template <typename T>
Status ConcatSlot(const KernelContext& ctx, const std::string& slot, Tensor* out) {
  const int n = ctx.InputSize(slot);
  const int rank = ctx.Input(slot, 0).dims().size();
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), rank);
  const int64_t outer = ctx.Input(slot, 0).dims().product(0, axis);
  std::vector<const T*> pieces;
  std::vector<int64_t> inner;
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.Input(slot, i);
    pieces.push_back(DataOf<T>(x));
    inner.push_back(x.dims().product(axis, rank));
  }
  return ConcatPieces<T>(ctx, pieces, inner, outer, MutableDataOf<T>(out, ctx.place()));
}

template <typename T>
Status SplitIntoSlot(const KernelContext& ctx, const Tensor& in, int64_t outer,
                     const std::vector<int64_t>& inner, const std::string& slot) {
  std::vector<T*> pieces;
  for (int i = 0; i < static_cast<int>(inner.size()); ++i) {
    Tensor* t = ctx.OutputOrNull(slot, i);
    pieces.push_back(t ? MutableDataOf<T>(t, ctx.place()) : nullptr);
  }
  return SplitPieces<T>(ctx, DataOf<T>(in), outer, inner, pieces);
}

template <typename T>
Status Concat(const KernelContext& ctx) {
  return ConcatSlot<T>(ctx, "X", ctx.Output("Out"));
}

template <typename T>
Status SplitGrad(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  return ConcatSlot<T>(ctx, "Out@GRAD", dx);
}

template <typename T>
Status ConcatGrad(const KernelContext& ctx) {
  const Tensor& g = ctx.Input("Out@GRAD");
  const int rank = g.dims().size();
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), rank);
  return SplitIntoSlot<T>(ctx, g, g.dims().product(0, axis), ConcatPieceSizes(ctx, axis, rank),
                          "X@GRAD");
}

template <typename T>
Status Split(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int rank = x.dims().size();
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), rank);
  const std::vector<int64_t> inner =
      SplitPieceSizes(x.dims(), axis, ctx.Attr<int>("num"), ctx.Attr<std::vector<int>>("sections"),
                      ctx.OutputSize("Out"));
  return SplitIntoSlot<T>(ctx, x, x.dims().product(0, axis), inner, "Out");
}

template <typename T>
Status Stack(const KernelContext& ctx) {
  const Tensor& x0 = ctx.Input("X", 0);
  const int rank = x0.dims().size();
  const int axis = StackAxis(ctx.Attr<int>("axis"), rank);
  std::vector<const T*> pieces;
  for (int i = 0; i < ctx.InputSize("X"); ++i) pieces.push_back(DataOf<T>(ctx.Input("X", i)));
  std::vector<int64_t> inner(pieces.size(), x0.dims().product(axis, rank));
  return ConcatPieces<T>(ctx, pieces, inner, x0.dims().product(0, axis),
                         MutableDataOf<T>(ctx.Output("Y"), ctx.place()));
}

template <typename T>
Status StackGrad(const KernelContext& ctx) {
  const Tensor& g = ctx.Input("Y@GRAD");
  const int rank = g.dims().size() - 1;
  const int axis = StackAxis(ctx.Attr<int>("axis"), rank);
  std::vector<int64_t> inner(ctx.OutputSize("X@GRAD"), g.dims().product(axis + 1, rank + 1));
  return SplitIntoSlot<T>(ctx, g, g.dims().product(0, axis), inner, "X@GRAD");
}

}  // namespace

LOOM_REGISTER_KERNEL(concat, kCUDA, FP32, Concat<float>);
LOOM_REGISTER_KERNEL(concat, kCUDA, FP64, Concat<double>);
LOOM_REGISTER_KERNEL(concat, kCUDA, INT32, Concat<int32_t>);
LOOM_REGISTER_KERNEL(concat, kCUDA, INT64, Concat<int64_t>);
LOOM_REGISTER_KERNEL(concat_grad, kCUDA, FP32, ConcatGrad<float>);
LOOM_REGISTER_KERNEL(concat_grad, kCUDA, FP64, ConcatGrad<double>);
LOOM_REGISTER_KERNEL(split, kCUDA, FP32, Split<float>);
LOOM_REGISTER_KERNEL(split, kCUDA, FP64, Split<double>);
LOOM_REGISTER_KERNEL(split, kCUDA, INT32, Split<int32_t>);
LOOM_REGISTER_KERNEL(split, kCUDA, INT64, Split<int64_t>);
LOOM_REGISTER_KERNEL(split_grad, kCUDA, FP32, SplitGrad<float>);
LOOM_REGISTER_KERNEL(split_grad, kCUDA, FP64, SplitGrad<double>);
LOOM_REGISTER_KERNEL(stack, kCUDA, FP32, Stack<float>);
LOOM_REGISTER_KERNEL(stack, kCUDA, FP64, Stack<double>);
LOOM_REGISTER_KERNEL(stack, kCUDA, INT32, Stack<int32_t>);
LOOM_REGISTER_KERNEL(stack, kCUDA, INT64, Stack<int64_t>);
LOOM_REGISTER_KERNEL(stack_grad, kCUDA, FP32, StackGrad<float>);
LOOM_REGISTER_KERNEL(stack_grad, kCUDA, FP64, StackGrad<double>);
// fp16: the same copies.
LOOM_REGISTER_KERNEL(concat, kCUDA, FP16, Concat<__half>);
LOOM_REGISTER_KERNEL(concat_grad, kCUDA, FP16, ConcatGrad<__half>);
LOOM_REGISTER_KERNEL(split, kCUDA, FP16, Split<__half>);
LOOM_REGISTER_KERNEL(split_grad, kCUDA, FP16, SplitGrad<__half>);
LOOM_REGISTER_KERNEL(stack, kCUDA, FP16, Stack<__half>);
LOOM_REGISTER_KERNEL(stack_grad, kCUDA, FP16, StackGrad<__half>);

}  // namespace loom::ops::cuda
