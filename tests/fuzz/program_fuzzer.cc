// libFuzzer target: arbitrary bytes through the program loader and verifier, then (when the
// program verifies) compile-time shape inference and preparation. Any crash, sanitizer report
// or hang is a bug: bad programs must only ever produce a Status.
#include <cstddef>
#include <cstdint>
#include <string>

#include "executor/executor.h"
#include "framework/serialization.h"
#include "framework/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto program = loom::ParseProgram(bytes, "fuzz");
  if (!program.ok()) return 0;
  if (!loom::VerifyProgram(program.value()).ok()) return 0;
  loom::Executor exe(loom::Place::CPU());
  auto prepared = exe.Prepare(program.value());
  (void)prepared.ok();
  return 0;
}
