#include "collective/types.h"

namespace loom::collective {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
  }
  LOOM_CHECK(false, "unknown DataType ", static_cast<int>(dtype));
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "fp32";
    case DataType::kFloat64:
      return "fp64";
    case DataType::kFloat16:
      return "fp16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "unknown";
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kMultiTree:
      return "multi_tree";
    case Algorithm::kStar:
      return "star";
    case Algorithm::kNative:
      return "native";
  }
  return "unknown";
}

StatusOr<Algorithm> ParseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                      Algorithm::kStar, Algorithm::kNative}) {
    if (name == AlgorithmName(a)) return a;
  }
  return InvalidArgument("unknown collective algorithm '", name,
                         "' (expected auto, ring, tree, multi_tree, star or native)");
}

bool IsCollective(Collective c) {
  for (Collective k : kCollectives)
    if (k == c) return true;
  return false;
}

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "allreduce";
    case Collective::kReduce:
      return "reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kAllGather:
      return "allgather";
    case Collective::kReduceScatter:
      return "reducescatter";
    case Collective::kSend:
      return "send";
    case Collective::kRecv:
      return "recv";
    case Collective::kBarrier:
      return "barrier";
  }
  return "unknown";
}

const char* CollectiveCallName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kReduce:
      return "Reduce";
    case Collective::kBroadcast:
      return "Broadcast";
    case Collective::kAllGather:
      return "AllGather";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kSend:
      return "Send";
    case Collective::kRecv:
      return "Recv";
    case Collective::kBarrier:
      return "Barrier";
  }
  return "unknown";
}

StatusOr<Collective> ParseCollective(const std::string& name) {
  for (Collective c : kCollectives)
    if (name == CollectiveName(c)) return c;
  return InvalidArgument("unknown collective '", name,
                         "' (expected allreduce, reduce, broadcast, allgather or reducescatter)");
}

bool AlgorithmSupports(Algorithm algorithm, Collective c) {
  using C = Collective;
  switch (algorithm) {
    case Algorithm::kRing:
      return IsCollective(c);
    case Algorithm::kTree:
    case Algorithm::kStar:
      return c == C::kAllReduce || c == C::kReduce || c == C::kBroadcast;
    case Algorithm::kMultiTree:
      return c == C::kAllReduce || c == C::kReduce || c == C::kBroadcast || c == C::kReduceScatter;
    default:
      return false;
  }
}

}  // namespace loom::collective
