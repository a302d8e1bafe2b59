#include "operators/shape/shape_util.h"

#include <algorithm>

namespace loom::ops {

std::string IntsToString(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + "]";
}

int NormalizeAxis(int axis, int rank) {
  if (axis < -rank || axis >= rank) return -1;
  return axis < 0 ? axis + rank : axis;
}

int StackAxis(int axis, int rank) {
  if (axis < -(rank + 1) || axis > rank) return -1;
  return axis < 0 ? axis + rank + 1 : axis;
}

std::vector<int> NormalizedPerm(const std::vector<int>& axis) {
  std::vector<int> perm;
  for (int a : axis) perm.push_back(NormalizeAxis(a, static_cast<int>(axis.size())));
  return perm;
}

SliceBox ComputeBox(const DDim& in, const std::vector<int>& axes, const std::vector<int>& starts,
                    const std::vector<int>& ends) {
  SliceBox box{std::vector<int64_t>(in.size(), 0), in};
  for (size_t i = 0; i < axes.size(); ++i) {
    int axis = NormalizeAxis(axes[i], in.size());
    int64_t dim = in[axis];
    if (dim < 0) continue;
    int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t end = ends[i] < 0 ? ends[i] + dim : ends[i];
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    box.offset[axis] = start;
    box.dims[axis] = std::max<int64_t>(end - start, 0);
  }
  return box;
}

std::vector<int64_t> SplitPieceSizes(const DDim& x, int axis, int num,
                                     const std::vector<int>& sections, int outputs) {
  const int64_t inner_each = x.product(axis + 1, x.size());
  const int64_t dim = x[axis];
  std::vector<int64_t> inner;
  int infer = -1;
  int64_t rest = dim;
  for (int i = 0; i < outputs; ++i) {
    int64_t size = num > 0 ? dim / num : sections[i];
    if (size < 0)
      infer = i;
    else
      rest -= size;
    inner.push_back(size * inner_each);
  }
  if (infer >= 0) inner[infer] = rest * inner_each;
  return inner;
}

std::vector<int64_t> ConcatPieceSizes(const KernelContext& ctx, int axis, int rank) {
  std::vector<int64_t> inner;
  for (int i = 0; i < ctx.InputSize("X"); ++i)
    inner.push_back(ctx.Input("X", i).dims().product(axis, rank));
  return inner;
}

std::vector<int64_t> Strides(const DDim& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = dims.size() - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

std::vector<int> InversePermutation(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int>(i);
  return inv;
}

Status GradLikeInput(InferShapeContext* ctx, const std::string& slot) {
  std::string grad = GradVarName(slot);
  for (int i = 0; i < ctx->OutputSize(grad); ++i) {
    if (ctx->OutputVarName(grad, i) == kEmptyVarName) continue;
    ctx->SetOutputDim(grad, ctx->InputDim(slot, i), i);
    ctx->SetOutputDtype(grad, ctx->InputDtype(slot, i), i);
  }
  return Status::OK();
}

}  // namespace loom::ops
