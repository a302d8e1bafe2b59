// Row-major GEMM on the CPU through CBLAS (OpenBLAS): the one place kernels call BLAS from.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace loom::ops {

// C[m, n] = alpha · op(A) · op(B) + beta · C, all densely packed; op transposes when asked.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          const T* b, T beta, T* c) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m * n; ++i) c[i] = beta == T(0) ? T(0) : beta * c[i];
    return;
  }
  auto ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  int lda = static_cast<int>(trans_a ? m : k), ldb = static_cast<int>(trans_b ? k : n);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, lda, b, ldb, beta, c, static_cast<int>(n));
  }
}

// C = op(A) · op(B), or C += op(A) · op(B) when accumulate.
template <typename T>
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, const T* b, T* c,
          bool accumulate = false) {
  Gemm<T>(trans_a, trans_b, m, n, k, T(1), a, b, accumulate ? T(1) : T(0), c);
}

}  // namespace loom::ops
