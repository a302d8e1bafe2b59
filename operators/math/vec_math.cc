#include "operators/math/vec_math.h"

namespace loom::ops {

// GCC makes an AVX2 clone and a baseline one and picks at load time (ifunc).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define LOOM_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LOOM_SIMD_CLONES
#endif

LOOM_SIMD_CLONES void SoftmaxRowF32(const float* x, float* y, int64_t d, float* mx,
                                    float* log_sum) {
  const float m = MaxOf(x, d);
  ExpShifted(x, m, y, d);
  const float s = SumOf(y, d);
  const float inv = 1.0f / s;
  for (int64_t j = 0; j < d; ++j) y[j] *= inv;
  *mx = m;
  *log_sum = std::log(s);
}

}  // namespace loom::ops
