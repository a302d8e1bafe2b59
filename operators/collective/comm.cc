#include "operators/collective/comm.h"

#include "operators/collective/stats.h"

namespace loom::ops {

CollectiveOpStats& CollectiveOpStats::Get() {
  static auto* stats = new CollectiveOpStats;
  return *stats;
}

StatusOr<collective::Communicator*> CommOf(const KernelContext& ctx) {
  collective::Communicator* comm = CommunicatorIn(ctx.InputVariable("Comm"));
  if (!comm)
    return FailedPrecondition(ctx.Where(),
                              ": input 'Comm' holds no communicator (run comm_init first: it is "
                              "in the transpiled startup program)");
  return comm;
}

StatusOr<collective::ReduceOp> ReduceTypeAttr(const KernelContext& ctx) {
  StatusOr<collective::ReduceOp> op =
      collective::ParseReduceOp(ctx.Attr<std::string>("reduce_type"));
  if (!op.ok()) return op.status().WithContext(ctx.Where());
  return op;
}

std::function<Status(const std::string&)> ValidReduceType() {
  return [](const std::string& v) { return collective::ParseReduceOp(v).status(); };
}

std::function<Status(const std::string&)> ValidAlgorithm() {
  return [](const std::string& v) { return collective::ParseAlgorithm(v).status(); };
}

}  // namespace loom::ops
