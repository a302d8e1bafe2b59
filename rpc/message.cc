#include "rpc/message.h"

#include <limits>

namespace loom::rpc {
namespace {

bool NeedsTensor(Header::Kind k) { return k == Header::SEND; }
bool MayCarryTensor(Header::Kind k) { return k == Header::SEND || k == Header::REPLY; }

Status CheckTensor(const Header& h, int64_t payload_bytes) {
  int64_t elem = DtypeBytes(h.dtype());
  if (elem < 0) return InvalidArgument("dtype ", h.dtype(), " is not a tensor type");
  if (h.dims_size() > kMaxDims)
    return InvalidArgument(h.dims_size(), " dims (at most ", kMaxDims, ")");
  int64_t numel = 1;
  for (int64_t d : h.dims()) {
    if (d < 0) return InvalidArgument("negative dim ", d);
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / elem / d)
      return InvalidArgument("dims overflow");
    numel *= d;
  }
  if (h.nbytes() != numel * elem)
    return InvalidArgument("nbytes ", h.nbytes(), " is not dims x dtype = ", numel * elem);
  if (payload_bytes != h.nbytes())
    return InvalidArgument("the payload has ", payload_bytes, " bytes, the header says ",
                           h.nbytes());
  return Status::OK();
}

Status CheckFields(const Header& h, int64_t payload_bytes) {
  const auto k = h.kind();
  if (h.name().size() > kMaxNameBytes) return InvalidArgument("name longer than ", kMaxNameBytes);
  if (h.step() < 0 || h.samples() < 0) return InvalidArgument("negative step or samples");
  if (payload_bytes >= 0 && !MayCarryTensor(k))
    return InvalidArgument("a ", KindName(k), " carries no payload");
  if (NeedsTensor(k) && payload_bytes < 0) return InvalidArgument("a SEND without its payload");
  if (payload_bytes >= 0) LOOM_RETURN_IF_ERROR(CheckTensor(h, payload_bytes));
  switch (k) {
    case Header::HELLO:
      if (h.trainer_id() < 0) return InvalidArgument("HELLO without a trainer id");
      if (h.nonce().size() != 32) return InvalidArgument("HELLO nonce is not 32 bytes");
      break;
    case Header::CHALLENGE:
      if (h.nonce().size() != 32 || h.mac().size() != 32)
        return InvalidArgument("CHALLENGE nonce or proof is not 32 bytes");
      break;
    case Header::AUTH:
      if (h.mac().size() != 32) return InvalidArgument("AUTH proof is not 32 bytes");
      break;
    case Header::SEND:
    case Header::GET:
      if (h.name().empty()) return InvalidArgument(KindName(k), " without a block name");
      break;
    case Header::BARRIER:
    case Header::FETCH_BARRIER:
      if (h.step() < 1) return InvalidArgument(KindName(k), " for step ", h.step(), " (< 1)");
      break;
    case Header::CHECKPOINT:
      if (h.text().empty()) return InvalidArgument("CHECKPOINT without a directory");
      break;
    default: break;
  }
  return Status::OK();
}

}  // namespace

int64_t DtypeBytes(int dtype) {
  switch (dtype) {
    case 0: return 1;  // BOOL
    case 2: return 4;  // INT32
    case 3: return 8;  // INT64
    case 4: return 2;  // FP16
    case 5: return 4;  // FP32
    case 6: return 8;  // FP64
    default: return -1;
  }
}

const char* KindName(int kind) {
  if (!Header::Kind_IsValid(kind)) return "unknown kind";
  return Header::Kind_Name(static_cast<Header::Kind>(kind)).c_str();
}

StatusOr<Header> DecodeHeader(const void* data, size_t size, int64_t payload_bytes) {
  if (size == 0) return InvalidArgument("empty header frame");
  if (size > kMaxHeaderBytes)
    return InvalidArgument("header of ", size, " bytes (at most ", kMaxHeaderBytes, ")");
  Header h;
  if (!h.ParseFromArray(data, static_cast<int>(size)))
    return InvalidArgument("header is not a valid protobuf Header");
  LOOM_RETURN_IF_ERROR(CheckFields(h, payload_bytes));
  return h;
}

StatusOr<Message> Decode(std::vector<zmq::message_t>* frames) {
  if (frames->empty() || frames->size() > 2)
    return InvalidArgument(frames->size(), " frames (a message has 1 or 2)");
  Message m;
  int64_t payload = frames->size() == 2 ? static_cast<int64_t>((*frames)[1].size()) : -1;
  LOOM_ASSIGN_OR_RETURN(m.header, DecodeHeader((*frames)[0].data(), (*frames)[0].size(), payload));
  if (payload >= 0) {
    m.has_payload = true;
    m.payload = std::move((*frames)[1]);
  }
  return m;
}

std::vector<zmq::message_t> Encode(const Header& header, const Payload* p) {
  std::vector<zmq::message_t> frames;
  std::string bytes = header.SerializeAsString();
  frames.emplace_back(bytes.data(), bytes.size());
  if (p) {
    const Payload& payload = *p;
    if (payload.keepalive) {
      // Zero copy: ZeroMQ frees the holder (and with it the buffer's reference) once sent.
      auto* hold = new std::shared_ptr<const void>(payload.keepalive);
      frames.emplace_back(
          const_cast<void*>(payload.data), payload.nbytes,
          [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); }, hold);
    } else {
      frames.emplace_back(payload.data, payload.nbytes);
    }
  }
  return frames;
}

}  // namespace loom::rpc
