// libFuzzer target: the parameter-server message decoder (rpc/message.h), which every frame a
// server receives goes through before anything reads its payloads. Input: a first byte giving
// the number of payload frames (0-3), then two bytes of size for each, then the header's bytes.
// The payload frames are then built too, filled from the input's bytes, and the whole message
// goes through Decode, which also reads the row ids of row-sparse messages (rpc/sparse_rows.h).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rpc/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t frames = data[0] & 3;
  if (size < 1 + 2 * frames) return 0;
  std::vector<int64_t> payloads;
  for (size_t i = 0; i < frames; ++i)
    payloads.push_back(static_cast<int64_t>(data[1 + 2 * i]) * 256 + data[2 + 2 * i]);
  const size_t skip = 1 + 2 * frames;
  auto h = loom::rpc::DecodeHeader(data + skip, size - skip, payloads);
  if (h.ok()) (void)loom::rpc::KindName(h->kind());
  std::vector<zmq::message_t> msg;
  msg.emplace_back(data + skip, size - skip);
  for (int64_t bytes : payloads) {
    zmq::message_t f(static_cast<size_t>(bytes));
    auto* p = static_cast<uint8_t*>(f.data());
    for (int64_t i = 0; i < bytes; ++i) p[i] = data[static_cast<size_t>(i) % size];
    msg.push_back(std::move(f));
  }
  auto m = loom::rpc::Decode(&msg);
  if (m.ok()) (void)m->payloads.size();
  return 0;
}
