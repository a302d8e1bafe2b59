// Messages of the parameter-server transport: a protobuf Header frame and, for tensors, one raw
// payload frame that is sent without a serialization copy (the sender's buffer is handed to
// ZeroMQ and kept alive until it is on the wire). Every message is validated here, as it
// arrives, before anything reads its payload: frame count, header size and parse, kind, the
// fields the kind needs, dtype, dims and byte counts.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "rpc/rpc.pb.h"

namespace loom::rpc {

using proto::Header;

inline constexpr size_t kMaxHeaderBytes = 64 << 10;
inline constexpr int kMaxDims = 8;
inline constexpr size_t kMaxNameBytes = 1024;
inline constexpr int kMaxTensors = 65536;  // tensors of one message

// Bytes per element of a framework.proto DataType number; -1 when it is none.
int64_t DtypeBytes(int dtype);

struct Message {
  Header header;
  std::vector<zmq::message_t> payloads;  // one per tensor, in order
};

// A tensor to send: data stays valid while keepalive is held.
struct Payload {
  const void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<const void> keepalive;
};

// Parses and validates a header frame; payload_bytes are the sizes of the frames after it.
StatusOr<Header> DecodeHeader(const void* data, size_t size,
                              const std::vector<int64_t>& payload_bytes);

// Validates a multipart message (header, payloads) and takes its frames.
StatusOr<Message> Decode(std::vector<zmq::message_t>* frames);

// The frames of a message: the header, then one per payload (zero copy when it has a keepalive,
// else copied).
std::vector<zmq::message_t> Encode(const Header& header, const std::vector<Payload>& payloads = {});

const char* KindName(int kind);

// State compared at the handshake: name -> digest (framework/serialization.h TensorDigest), and
// each one's first value for the messages that name a difference.
struct StateDigests {
  std::map<std::string, uint64_t> digest;
  std::map<std::string, double> first;
  bool empty() const { return digest.empty(); }
};

// zmq::poll, except that a signal arriving meanwhile (EINTR: Ctrl-C, which the caller then
// checks for) returns as a timeout instead of throwing.
void PollSockets(std::vector<zmq::pollitem_t>* items, std::chrono::milliseconds timeout);

}  // namespace loom::rpc
