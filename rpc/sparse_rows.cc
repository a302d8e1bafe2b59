#include "rpc/sparse_rows.h"

#include <cstring>

namespace loom::rpc {

std::vector<int64_t> ReadRowIds(const void* data, size_t nbytes) {
  std::vector<int64_t> ids(nbytes / sizeof(int64_t));
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * sizeof(int64_t));
  return ids;
}

Status CheckRowIds(const void* data, size_t nbytes, int64_t height) {
  if (nbytes % sizeof(int64_t) != 0)
    return InvalidArgument("a row ids frame of ", nbytes, " bytes (not a multiple of 8)");
  const auto* p = static_cast<const char*>(data);
  for (size_t i = 0; i < nbytes / sizeof(int64_t); ++i) {
    int64_t id;
    std::memcpy(&id, p + i * sizeof(int64_t), sizeof(int64_t));
    if (id < 0 || id >= height)
      return InvalidArgument("row id ", id, " (entry ", i, ") is outside [0, ", height, ")");
  }
  return Status::OK();
}

Payload RowIdsPayload(std::shared_ptr<const std::vector<int64_t>> ids) {
  Payload p;
  p.data = ids->data();
  p.nbytes = ids->size() * sizeof(int64_t);
  p.keepalive = std::move(ids);
  return p;
}

Status CheckSparseReply(const Header& h, const std::vector<zmq::message_t>& payloads,
                        const std::vector<int64_t>& want, int dtype, int64_t width) {
  // Decode checked each tensor's dims and bytes against its frame; here: the roles.
  if (h.tensors_size() != 2 || payloads.size() != 2)
    return InvalidArgument("a row-sparse reply carries rows and value, this one ", h.tensors_size(),
                           " tensors");
  const auto& rows = h.tensors(0);
  const auto& value = h.tensors(1);
  const int64_t n = static_cast<int64_t>(want.size());
  if (rows.dtype() != kInt64Dtype || rows.dims_size() != 1 || rows.dims(0) != n)
    return InvalidArgument("a row-sparse reply's rows are not int64[", n, "]");
  if (value.dtype() != dtype || value.dims_size() < 1 || value.dims(0) != n ||
      static_cast<int64_t>(payloads[1].size()) != n * width * DtypeBytes(dtype))
    return InvalidArgument("a row-sparse reply's value is not ", n, " rows of ", width,
                           " elements of dtype ", dtype);
  std::vector<int64_t> got = ReadRowIds(payloads[0].data(), payloads[0].size());
  if (got != want) return InvalidArgument("a row-sparse reply returned other rows than asked");
  return Status::OK();
}

}  // namespace loom::rpc
