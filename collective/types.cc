#include "collective/types.h"

namespace loom::collective {

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  LOOM_CHECK(false, "unknown DataType ", static_cast<int>(dtype));
  return 0;
}

const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "fp32";
    case DataType::kFloat64: return "fp64";
    case DataType::kFloat16: return "fp16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

StatusOr<ReduceOp> ParseReduceOp(const std::string& name) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg})
    if (name == ReduceOpName(op)) return op;
  return InvalidArgument("reduce_type '", name, "' is not one of sum, prod, max, min, avg");
}

const char* AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kMultiTree: return "multi_tree";
    case Algorithm::kStar: return "star";
    case Algorithm::kNative: return "native";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kChannels: return "channels";
    case Algorithm::kRails: return "rails";
  }
  return "unknown";
}

StatusOr<DataType> ParseDataType(const std::string& name) {
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kInt32,
                     DataType::kInt64}) {
    const std::string short_name = DataTypeName(d);
    if (name == short_name || (short_name[0] == 'f' && name == "float" + short_name.substr(2)))
      return d;
  }
  return InvalidArgument("unknown data type '", name,
                         "' (expected fp32, fp64, fp16, int32, int64; or float32, float64, "
                         "float16)");
}

StatusOr<Algorithm> ParseAlgorithm(const std::string& name) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kTree, Algorithm::kMultiTree,
                      Algorithm::kStar, Algorithm::kDirect, Algorithm::kNative,
                      Algorithm::kChannels, Algorithm::kRails}) {
    if (name == AlgorithmName(a)) return a;
  }
  return InvalidArgument("unknown collective algorithm '", name,
                         "' (expected auto, ring, tree, multi_tree, star, direct, native, "
                         "channels or rails)");
}

bool IsCollective(Collective c) {
  for (Collective k : kCollectives)
    if (k == c) return true;
  return false;
}

namespace {
// Every Collective with its two spellings, in enum order.
struct CollectiveNames {
  Collective collective;
  const char* name;
  const char* call_name;
};
constexpr CollectiveNames kCollectiveNames[] = {
    {Collective::kAllReduce, "allreduce", "AllReduce"},
    {Collective::kReduce, "reduce", "Reduce"},
    {Collective::kBroadcast, "broadcast", "Broadcast"},
    {Collective::kAllGather, "allgather", "AllGather"},
    {Collective::kReduceScatter, "reducescatter", "ReduceScatter"},
    {Collective::kSend, "send", "Send"},
    {Collective::kRecv, "recv", "Recv"},
    {Collective::kBarrier, "barrier", "Barrier"},
};
}  // namespace

const char* CollectiveName(Collective c) {
  for (const auto& n : kCollectiveNames)
    if (n.collective == c) return n.name;
  return "unknown";
}

const char* CollectiveCallName(Collective c) {
  for (const auto& n : kCollectiveNames)
    if (n.collective == c) return n.call_name;
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
    case Algorithm::kRing: return IsCollective(c);
    case Algorithm::kTree:
    case Algorithm::kStar: return c == C::kAllReduce || c == C::kReduce || c == C::kBroadcast;
    case Algorithm::kRails: return c == C::kAllReduce;
    case Algorithm::kMultiTree:
      return c == C::kAllReduce || c == C::kReduce || c == C::kBroadcast || c == C::kReduceScatter;
    case Algorithm::kDirect:
    case Algorithm::kChannels:
      return c == C::kAllReduce || c == C::kAllGather || c == C::kReduceScatter;
    default: return false;
  }
}

}  // namespace loom::collective
