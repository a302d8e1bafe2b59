// LOOM_SKIP_WITHOUT_GPU(message): how a test that needs a CUDA device steps aside without one.
// Normally it skips with the message. With LOOM_REQUIRE_GPU=1 in the environment (the GPU kit's
// check.sh sets it) it fails instead, so a run on a GPU machine cannot pass by skipping.
#pragma once

#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace loom::testing {

inline bool GpuRequired() {
  const char* v = std::getenv("LOOM_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace loom::testing

// Use as a statement in a test body or SetUp(); it returns from the enclosing function.
#define LOOM_SKIP_WITHOUT_GPU(message)                                                 \
  do {                                                                                 \
    if (::loom::testing::GpuRequired()) {                                              \
      GTEST_FAIL() << "LOOM_REQUIRE_GPU is set and this test would skip: " << message; \
    } else {                                                                           \
      GTEST_SKIP() << message;                                                         \
    }                                                                                  \
  } while (0)
