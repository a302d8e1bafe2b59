// Loop building blocks that the compiler vectorizes without -ffast-math: sums with eight
// independent accumulators (a dependent chain of float adds cannot be reordered otherwise), and
// a float exp built from range reduction and a polynomial (a few ulp) with no libm call, so
// exp-heavy loops (softmax) run on SIMD lanes. Pure functions, any thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace loom::ops {

// Forced inlining lets SIMD-cloned callers (vec_math.cc) compile these with their own ISA.
#if defined(__GNUC__)
#define LOOM_VEC_INLINE __attribute__((always_inline)) inline
#else
#define LOOM_VEC_INLINE inline
#endif

// Σ p[i].
template <typename T>
LOOM_VEC_INLINE T SumOf(const T* p, int64_t n) {
  T acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += p[i + k];
  T s = 0;
  for (; i < n; ++i) s += p[i];
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}

// max p[i] (n >= 1).
template <typename T>
LOOM_VEC_INLINE T MaxOf(const T* p, int64_t n) {
  T acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = p[0];
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = std::max(acc[k], p[i + k]);
  T m = p[0];
  for (; i < n; ++i) m = p[i] > m ? p[i] : m;
  for (int k = 0; k < 8; ++k) m = acc[k] > m ? acc[k] : m;
  return m;
}

// Σ (p[i] - c)^2.
template <typename T>
T SumSqDiff(const T* p, int64_t n, T c) {
  T acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += (p[i + k] - c) * (p[i + k] - c);
  T s = 0;
  for (; i < n; ++i) s += (p[i] - c) * (p[i] - c);
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}

// Σ a[i] and Σ a[i] * (b[i] - c), in one pass.
template <typename T>
void SumAndDotDiff(const T* a, const T* b, int64_t n, T c, T* sum, T* dot) {
  T sa[8] = {}, sd[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      sa[k] += a[i + k];
      sd[k] += a[i + k] * (b[i + k] - c);
    }
  T s = 0, d = 0;
  for (; i < n; ++i) {
    s += a[i];
    d += a[i] * (b[i] - c);
  }
  for (int k = 0; k < 8; ++k) s += sa[k], d += sd[k];
  *sum = s;
  *dot = d;
}

// exp(x) in float for x in [-87.3, 88.3] (callers clamp; see ExpShifted): x = n ln2 + r with
// |r| <= ln2 / 2, exp(r) by its Taylor series to r^7 (relative error < 5e-9 before rounding),
// times 2^n built in the exponent bits. n is clamped as an integer: a float select in this
// loop body stops GCC's vectorizer, an integer one does not.
LOOM_VEC_INLINE float ExpF(float x) {
  // Round x / ln2 to nearest with the 1.5 * 2^23 trick: the low bits of t hold n.
  const float t = x * 1.44269504f + 12582912.0f;
  const float n = t - 12582912.0f;
  int32_t ni;
  std::memcpy(&ni, &t, sizeof ni);
  ni -= 0x4B400000;
  ni = ni < -126 ? -126 : ni;
  ni = ni > 127 ? 127 : ni;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // Cody-Waite: ln2 = hi + lo
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (ni + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// y[i] = exp(x[i] - shift) for shift >= max x (softmax): float through ExpF after clamping
// the argument to >= -87.3 in its own loop (exp is below 1e-37 there), double through std::exp.
template <typename T>
LOOM_VEC_INLINE void ExpShifted(const T* x, T shift, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::max(x[i] - shift, -87.3f);
    for (int64_t i = 0; i < n; ++i) y[i] = ExpF(y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift);
  }
}

// One softmax row: y = exp(x - max) / Σ exp(x - max); *mx = max, *log_sum = log Σ exp(x - max).
// The float version is compiled twice (AVX2 and baseline x86-64) and picked at load time, so
// the build keeps running on any x86-64 while AVX2 machines get 8-wide exp.
void SoftmaxRowF32(const float* x, float* y, int64_t d, float* mx, float* log_sum);

template <typename T>
void SoftmaxRow(const T* x, T* y, int64_t d, T* mx, T* log_sum) {
  if constexpr (std::is_same_v<T, float>) {
    SoftmaxRowF32(x, y, d, mx, log_sum);
  } else {
    *mx = MaxOf(x, d);
    ExpShifted(x, *mx, y, d);
    const T s = SumOf(y, d);
    for (int64_t j = 0; j < d; ++j) y[j] /= s;
    *log_sum = std::log(s);
  }
}

}  // namespace loom::ops
