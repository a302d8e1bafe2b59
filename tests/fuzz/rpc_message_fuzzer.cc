// libFuzzer target: the parameter-server message decoder (rpc/message.h), which every frame a
// server receives goes through before anything reads its payload. Input: a first byte choosing
// whether a payload frame follows and its size, then the header frame's bytes.
#include <cstddef>
#include <cstdint>

#include "rpc/message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int64_t payload = data[0] & 1 ? static_cast<int64_t>(data[1]) * 256 + data[2] : -1;
  auto h = loom::rpc::DecodeHeader(data + 3, size - 3, payload);
  if (h.ok()) (void)loom::rpc::KindName(h->kind());
  return 0;
}
