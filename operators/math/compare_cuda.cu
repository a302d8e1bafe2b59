// CUDA kernels of the comparison ops (fp32, fp64, fp16 compared in float, int32, int64) and the
// logical ops (bool), with the CPU kernels' broadcast rule and functors (compare.h).
#include "operators/cuda_util.cuh"
#include "operators/math/compare.h"
#include "operators/math/elementwise.h"

namespace loom::ops::cuda {
namespace {

// Out[i] = F(X[i], Y[(i / post) % n]) (same shapes: n = total, post = 1).
template <typename Fn, typename T>
__global__ void PredicateK(const T* x, const T* y, bool* o, int64_t total, int64_t n,
                           int64_t post) {
  using A = Acc<T>;
  LOOM_GRID_STRIDE(i, total) {
    o[i] = Fn::F(static_cast<A>(x[i]), static_cast<A>(y[(i / post) % n]));
  }
}

template <typename Fn, typename T>
Status Predicate(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  auto plan = PlanBroadcast(x.dims(), y.dims(), ctx.Attr<int>("axis"));
  if (!plan.ok()) return ctx.Error(plan.status().message());
  const int64_t total = x.numel();
  const BroadcastPlan& p = plan.value();
  bool* o = ctx.Output("Out")->mutable_data<bool>(ctx.place());
  if (total == 0) return Status::OK();
  PredicateK<Fn, T><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      DataOf<T>(x), DataOf<T>(y), o, total, p.same_shape ? total : p.n, p.same_shape ? 1 : p.post);
  return LaunchStatus(ctx);
}

__global__ void NotK(const bool* x, bool* o, int64_t n) { LOOM_GRID_STRIDE(i, n) o[i] = !x[i]; }

Status LogicalNot(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  bool* o = ctx.Output("Out")->mutable_data<bool>(ctx.place());
  if (x.numel() == 0) return Status::OK();
  NotK<<<Blocks(x.numel()), kThreads, 0, Stream(ctx)>>>(x.data<bool>(), o, x.numel());
  return LaunchStatus(ctx);
}

#define LOOM_COMPARE_CUDA(NAME, FN)                                        \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP32, (Predicate<cmp::FN, float>));    \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP64, (Predicate<cmp::FN, double>));   \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, FP16, (Predicate<cmp::FN, __half>));   \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT32, (Predicate<cmp::FN, int32_t>)); \
  LOOM_REGISTER_KERNEL(NAME, kCUDA, INT64, (Predicate<cmp::FN, int64_t>))

LOOM_COMPARE_CUDA(less_than, LessThan);
LOOM_COMPARE_CUDA(less_equal, LessEqual);
LOOM_COMPARE_CUDA(greater_than, GreaterThan);
LOOM_COMPARE_CUDA(greater_equal, GreaterEqual);
LOOM_COMPARE_CUDA(equal, Equal);
LOOM_COMPARE_CUDA(not_equal, NotEqual);
LOOM_REGISTER_KERNEL(logical_and, kCUDA, BOOL, (Predicate<cmp::And, bool>));
LOOM_REGISTER_KERNEL(logical_or, kCUDA, BOOL, (Predicate<cmp::Or, bool>));
LOOM_REGISTER_KERNEL(logical_xor, kCUDA, BOOL, (Predicate<cmp::Xor, bool>));
LOOM_REGISTER_KERNEL(logical_not, kCUDA, BOOL, LogicalNot);

}  // namespace
}  // namespace loom::ops::cuda
