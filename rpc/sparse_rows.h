// Row-sparse values on the parameter-server wire: a SelectedRows (framework/selected_rows.h) is
// two payload frames, the row ids (int64, little-endian, n of them) and the rows (the header's
// dtype, dims [n] + row dims), so neither is serialized or copied on the way out. Messages
// SPARSE_INIT / SPARSE_PUSH carry both frames, SPARSE_GET the ids only, and its REPLY both
// (tensors "rows" and "value"). Decode (message.h) checks the frame counts and sizes and that
// every id lies in [0, height) before anything reads a row; CheckSparseReply checks a reply
// against the request. docs/FORMATS.md describes the frames.
#pragma once

#include <zmq.hpp>

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "rpc/message.h"

namespace loom::rpc {

inline constexpr int kInt64Dtype = 3;  // framework.proto's INT64

// The ids of a frame, copied (a frame need not be 8-byte aligned); nbytes a multiple of 8.
std::vector<int64_t> ReadRowIds(const void* data, size_t nbytes);

// Every id of an ids frame lies in [0, height).
Status CheckRowIds(const void* data, size_t nbytes, int64_t height);

// The ids frame of `ids`: the vector is kept alive by the payload until it is sent.
Payload RowIdsPayload(std::shared_ptr<const std::vector<int64_t>> ids);

// A REPLY to a SPARSE_GET: tensors "rows" (int64 [n]) and "value" (dtype, [n, width] flattened
// as any dims whose product per row is width), the rows being exactly `want`, in order.
Status CheckSparseReply(const Header& h, const std::vector<zmq::message_t>& payloads,
                        const std::vector<int64_t>& want, int dtype, int64_t width);

}  // namespace loom::rpc
