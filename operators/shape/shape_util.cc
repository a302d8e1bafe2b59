#include "operators/shape/shape_util.h"

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
