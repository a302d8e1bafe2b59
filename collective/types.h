// Element types, reduction operators and algorithm names shared by every part of the collectives
// library. Plain value types; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace loom::collective {

// The most ranks a group may have (in-process worlds, topologies, the transpiler, the CLI and
// Python's place lists check it where the user gives the number).
inline constexpr int kMaxWorldSize = 64;

// fp16 buffers hold IEEE binary16 bit patterns (uint16_t); reductions go through float.
enum class DataType { kFloat32, kFloat64, kFloat16, kInt32, kInt64 };

// kAvg sums and then divides by the number of ranks (integer types: truncating division).
enum class ReduceOp { kSum, kProd, kMax, kMin, kAvg };

// kAuto lets the communicator choose; kNative asks for the transport's own implementation.
// kChannels: one ring per NIC across the nodes of a cluster, the buffer striped over them
// (channels.h); kRails: a node-local reduce-scatter, a ring across the nodes per local device
// (through that device's NIC), a node-local all-gather (allreduce). Both run the plain ring on a
// single machine.
enum class Algorithm {
  kAuto,
  kRing,
  kTree,
  kMultiTree,
  kStar,
  kNative,
  kDirect,
  kChannels,
  kRails
};

// What a communicator call does: the five collectives, then point-to-point and the barrier.
// The one spelling of a collective in Loom: the communicator's calls, the algorithms' schedules,
// the transports' native collectives, the selector, the transpiler and the CLI all use it.
enum class Collective {
  kAllReduce,
  kReduce,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kSend,
  kRecv,
  kBarrier
};
// The five collectives, in enum order.
inline constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kReduce,
                                              Collective::kBroadcast, Collective::kAllGather,
                                              Collective::kReduceScatter};
bool IsCollective(Collective c);  // one of kCollectives (not send, recv or barrier)
// "allreduce", "reduce", "broadcast", "allgather", "reducescatter", "send", "recv", "barrier":
// flags, op types and tables.
const char* CollectiveName(Collective c);
// "AllReduce", ...: the Communicator method, in call signatures and messages.
const char* CollectiveCallName(Collective c);
// Accepts CollectiveName's names of the five collectives.
StatusOr<Collective> ParseCollective(const std::string& name);
// The support table: whether `algorithm` has a schedule for collective `c` (kAuto always picks
// one that has; kNative depends on the transport: Transport::SupportsNative).
bool AlgorithmSupports(Algorithm algorithm, Collective c);

size_t DataTypeSize(DataType dtype);
const char* DataTypeName(DataType dtype);
// Accepts DataTypeName's names (fp32, ...) and the long ones of the floats (float32, ...).
StatusOr<DataType> ParseDataType(const std::string& name);
const char* ReduceOpName(ReduceOp op);
// Accepts ReduceOpName's names (sum, prod, max, min, avg).
StatusOr<ReduceOp> ParseReduceOp(const std::string& name);
const char* AlgorithmName(Algorithm algorithm);
// Accepts the names AlgorithmName prints ("ring", "multi_tree", ...).
StatusOr<Algorithm> ParseAlgorithm(const std::string& name);

}  // namespace loom::collective
