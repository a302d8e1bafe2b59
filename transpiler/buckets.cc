#include "transpiler/buckets.h"

#include <algorithm>

namespace loom::transpiler {

std::vector<GradBucket> PlanBuckets(const ProgramDesc& main,
                                    const std::vector<OptimizedParam>& params,
                                    int64_t limit_bytes) {
  const BlockDesc& block = *main.GlobalBlock();
  std::vector<std::pair<int, const OptimizedParam*>> order;
  for (const auto& p : params) order.push_back({LastGradWriter(block, p.grad), &p});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GradBucket> buckets;
  GradBucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    current.fused = current.params.size() > 1;
    buckets.push_back(std::move(current));
    current = GradBucket();
  };
  for (const auto& [producer, p] : order) {
    // A sparse gradient (SelectedRows) is exchanged as rows by its own call.
    VarDesc g = block.FindVarRecursive(p->grad);
    const bool sparse = g && g.Type() == proto::VarType::SELECTED_ROWS;
    const bool alone = sparse || limit_bytes <= 0 || p->bytes >= limit_bytes;
    if (alone || (!current.params.empty() &&
                  (current.bytes + p->bytes > limit_bytes || current.dtype != p->dtype)))
      close();
    current.params.push_back(p->param);
    current.grads.push_back(p->grad);
    current.bytes += p->bytes;
    current.dtype = p->dtype;
    if (alone) close();
  }
  close();
  return buckets;
}

}  // namespace loom::transpiler
