#include "rpc/message.h"

#include <cerrno>

#include "rpc/sparse_rows.h"

#include <limits>

namespace loom::rpc {
namespace {

Status CheckTensor(int dtype, const google::protobuf::RepeatedField<int64_t>& dims, int64_t nbytes,
                   int64_t payload_bytes) {
  int64_t elem = DtypeBytes(dtype);
  if (elem < 0) return InvalidArgument("dtype ", dtype, " is not a tensor type");
  if (dims.size() > kMaxDims) return InvalidArgument(dims.size(), " dims (at most ", kMaxDims, ")");
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0) return InvalidArgument("negative dim ", d);
    if (d != 0 && numel > std::numeric_limits<int64_t>::max() / elem / d)
      return InvalidArgument("dims overflow");
    numel *= d;
  }
  if (nbytes != numel * elem)
    return InvalidArgument("nbytes ", nbytes, " is not dims x dtype = ", numel * elem);
  if (payload_bytes != nbytes)
    return InvalidArgument("the payload has ", payload_bytes, " bytes, the header says ", nbytes);
  return Status::OK();
}

Status CheckName(const std::string& name, const char* what) {
  if (name.empty()) return InvalidArgument(what, " without a block name");
  if (name.size() > kMaxNameBytes) return InvalidArgument("name longer than ", kMaxNameBytes);
  return Status::OK();
}

// A row-sparse message's frames: SPARSE_INIT / SPARSE_PUSH carry the ids (dims[0] of them) and
// the rows (fp32 or fp64, dims = [n] + row dims, each row dim positive); SPARSE_GET carries the
// ids only (dims = [n]). Every one names a height >= 1.
Status CheckSparseFrames(const Header& h, const std::vector<int64_t>& payload_bytes) {
  const auto k = h.kind();
  const size_t n = payload_bytes.size();
  if (h.height() < 1)
    return InvalidArgument("a ", KindName(k), " of height ", h.height(), " (< 1)");
  if (h.dims_size() < 1) return InvalidArgument("a ", KindName(k), " without dims");
  if (h.dims(0) < 0) return InvalidArgument("a ", KindName(k), " of ", h.dims(0), " rows");
  if (h.dims(0) > std::numeric_limits<int64_t>::max() / 8)
    return InvalidArgument("a ", KindName(k), " of too many rows");
  if (k == Header::SPARSE_GET) {
    if (n != 1) return InvalidArgument("a SPARSE_GET carries one payload (its ids), this one ", n);
    if (h.dims_size() != 1) return InvalidArgument("a SPARSE_GET's dims are [n]");
    if (payload_bytes[0] != h.dims(0) * 8)
      return InvalidArgument("the ids frame has ", payload_bytes[0], " bytes for ", h.dims(0),
                             " ids");
    return Status::OK();
  }
  if (n != 2)
    return InvalidArgument("a ", KindName(k), " carries two payloads (ids, rows), this one ", n);
  if (h.dtype() != 5 && h.dtype() != 6)
    return InvalidArgument("a ", KindName(k), " of dtype ", h.dtype(), " (float32 or float64)");
  for (int i = 1; i < h.dims_size(); ++i)
    if (h.dims(i) < 1) return InvalidArgument("row dim ", h.dims(i), " is not positive");
  if (payload_bytes[0] != h.dims(0) * 8)
    return InvalidArgument("the ids frame has ", payload_bytes[0], " bytes for ", h.dims(0),
                           " rows");
  Status st = CheckTensor(h.dtype(), h.dims(), h.nbytes(), payload_bytes[1]);
  return st.ok() ? st : st.WithContext("the rows frame");
}

// The payload frames: a SEND carries exactly one (described by the header's own fields), a
// REPLY one per `tensors` entry (or none), nothing else carries any.
Status CheckPayloads(const Header& h, const std::vector<int64_t>& payload_bytes) {
  const auto k = h.kind();
  const size_t n = payload_bytes.size();
  if (k == Header::SEND || k == Header::INIT) {
    if (n != 1) return InvalidArgument("a ", KindName(k), " carries one payload, this one ", n);
    return CheckTensor(h.dtype(), h.dims(), h.nbytes(), payload_bytes[0]);
  }
  if (k == Header::SPARSE_INIT || k == Header::SPARSE_PUSH || k == Header::SPARSE_GET)
    return CheckSparseFrames(h, payload_bytes);
  if (n == 0) return Status::OK();
  if (k != Header::REPLY) return InvalidArgument("a ", KindName(k), " carries no payload");
  if (static_cast<size_t>(h.tensors_size()) != n)
    return InvalidArgument(n, " payloads for ", h.tensors_size(), " tensors");
  for (int i = 0; i < h.tensors_size(); ++i) {
    const auto& t = h.tensors(i);
    Status st = CheckTensor(t.dtype(), t.dims(), t.nbytes(), payload_bytes[i]);
    if (!st.ok()) return st.WithContext(StrCat("tensor ", i, " ('", t.name(), "')"));
  }
  return Status::OK();
}

Status CheckFields(const Header& h, const std::vector<int64_t>& payload_bytes) {
  const auto k = h.kind();
  if (h.name().size() > kMaxNameBytes) return InvalidArgument("name longer than ", kMaxNameBytes);
  if (h.step() < 0 || h.samples() < 0) return InvalidArgument("negative step or samples");
  if (h.tensors_size() > kMaxTensors)
    return InvalidArgument(h.tensors_size(), " tensors (at most ", kMaxTensors, ")");
  LOOM_RETURN_IF_ERROR(CheckPayloads(h, payload_bytes));
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
    case Header::INIT:
    case Header::SPARSE_PUSH:
    case Header::SPARSE_GET: return CheckName(h.name(), KindName(k));
    case Header::SPARSE_INIT:
      if (h.text().empty()) return InvalidArgument("SPARSE_INIT without a row initializer");
      return CheckName(h.name(), KindName(k));
    case Header::OPTIMIZER:
      if (h.text().empty()) return InvalidArgument("OPTIMIZER without a name");
      break;
    case Header::GET:
      if (h.tensors_size() == 0) return InvalidArgument("a GET of no blocks");
      for (const auto& t : h.tensors()) LOOM_RETURN_IF_ERROR(CheckName(t.name(), "GET"));
      break;
    case Header::BARRIER:
    case Header::FETCH_BARRIER:
      if (h.step() < 1) return InvalidArgument(KindName(k), " for step ", h.step(), " (< 1)");
      break;
    case Header::CHECKPOINT:
      if (h.text().empty()) return InvalidArgument("CHECKPOINT without a directory");
      break;
    case Header::ABORT:
      if (h.text().empty()) return InvalidArgument("ABORT without a reason");
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

StatusOr<Header> DecodeHeader(const void* data, size_t size,
                              const std::vector<int64_t>& payload_bytes) {
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
  if (frames->empty() || frames->size() > static_cast<size_t>(kMaxTensors) + 1)
    return InvalidArgument(frames->size(), " frames (a message has 1 to ", kMaxTensors + 1, ")");
  std::vector<int64_t> payload_bytes;
  for (size_t i = 1; i < frames->size(); ++i)
    payload_bytes.push_back(static_cast<int64_t>((*frames)[i].size()));
  Message m;
  LOOM_ASSIGN_OR_RETURN(m.header,
                        DecodeHeader((*frames)[0].data(), (*frames)[0].size(), payload_bytes));
  const auto k = m.header.kind();
  if (k == Header::SPARSE_INIT || k == Header::SPARSE_PUSH || k == Header::SPARSE_GET) {
    Status st = CheckRowIds((*frames)[1].data(), (*frames)[1].size(), m.header.height());
    if (!st.ok()) return st.WithContext(StrCat(KindName(k), " of '", m.header.name(), "'"));
  }
  for (size_t i = 1; i < frames->size(); ++i) m.payloads.push_back(std::move((*frames)[i]));
  return m;
}

std::vector<zmq::message_t> Encode(const Header& header, const std::vector<Payload>& payloads) {
  std::vector<zmq::message_t> frames;
  std::string bytes = header.SerializeAsString();
  frames.emplace_back(bytes.data(), bytes.size());
  for (const Payload& payload : payloads) {
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

void PollSockets(std::vector<zmq::pollitem_t>* items, std::chrono::milliseconds timeout) {
  try {
    zmq::poll(items->data(), items->size(), timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
    for (auto& item : *items) item.revents = 0;
  }
}

}  // namespace loom::rpc
