// Helpers shared by the shape operators (reshape, transpose, concat, split, slice, squeeze,
// unsqueeze, flatten, stack, gather, cast, assign): axis normalization, dims formatting and the
// data-movement loops the kernels are built from. All loops work on row-major contiguous data.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "base/copy.h"
#include "operators/common.h"

namespace loom::ops {

// "[1, -1, 3]"
std::string IntsToString(const std::vector<int>& v);

// Maps axis in [-rank, rank) to [0, rank); returns -1 when out of range.
int NormalizeAxis(int axis, int rank);

// Row-major strides of dims (in elements).
std::vector<int64_t> Strides(const DDim& dims);

// Inverse of a permutation.
std::vector<int> InversePermutation(const std::vector<int>& perm);

// ---- geometry shared by the CPU kernels (*.cc) and their CUDA twins (*_cuda.cu)

// Stack inserts a new dim at axis in [-(rank + 1), rank]; maps it to [0, rank], -1 when out of
// range.
int StackAxis(int axis, int rank);

// transpose's attribute 'axis' with negative entries counted from the end.
std::vector<int> NormalizedPerm(const std::vector<int>& axis);

// Offsets and dims of the box slice selects: per axis, [start, end) with Python's rules for
// negative and out-of-range bounds. Dims of `in` may be -1 (compile time): a sliced unknown dim
// stays unknown.
struct SliceBox {
  std::vector<int64_t> offset;
  DDim dims;
};
SliceBox ComputeBox(const DDim& in, const std::vector<int>& axes, const std::vector<int>& starts,
                    const std::vector<int>& ends);

// Elements per outer row of each of split's `outputs` pieces of x along `axis` (normalized):
// from the attributes 'num' (equal pieces) or 'sections' (one -1 takes the rest), so pruned
// outputs keep their share of the axis (validated by shape inference).
std::vector<int64_t> SplitPieceSizes(const DDim& x, int axis, int num,
                                     const std::vector<int>& sections, int outputs);

// Elements per outer row of each input of slot X of concat along `axis` (normalized).
std::vector<int64_t> ConcatPieceSizes(const KernelContext& ctx, int axis, int rank);

// For every index i of the box `dims`: dst[sum(i * dst_strides)] = src[sum(i * src_strides)].
// Copies nothing for an empty box; a rank-0 box is one element.
template <typename T>
void StridedCopy(const DDim& dims, const T* src, const int64_t* src_strides, T* dst,
                 const int64_t* dst_strides) {
  int rank = dims.size();
  int64_t n = dims.numel();
  if (n <= 0) return;
  if (rank == 0) {
    *dst = *src;
    return;
  }
  int64_t inner = dims[rank - 1];
  int64_t si = src_strides[rank - 1], di = dst_strides[rank - 1];
  int64_t outer = n / inner;
  int64_t idx[DDim::kMaxRank] = {};
  int64_t so = 0, doff = 0;
  for (int64_t o = 0; o < outer; ++o) {
    if (si == 1 && di == 1) {
      CopyBytes(dst + doff, src + so, static_cast<size_t>(inner) * sizeof(T));
    } else {
      for (int64_t k = 0; k < inner; ++k) dst[doff + k * di] = src[so + k * si];
    }
    for (int d = rank - 2; d >= 0; --d) {
      ++idx[d];
      so += src_strides[d];
      doff += dst_strides[d];
      if (idx[d] < dims[d]) break;
      so -= src_strides[d] * dims[d];
      doff -= dst_strides[d] * dims[d];
      idx[d] = 0;
    }
  }
}

// Concatenates pieces along one axis of a [outer, sum(inner_i)] view: piece i is a
// [outer, inner[i]] block. Used by concat, stack and the gradients of split.
template <typename T>
void ConcatCompute(const std::vector<const T*>& pieces, const std::vector<int64_t>& inner,
                   int64_t outer, T* out) {
  int64_t total = 0;
  for (int64_t w : inner) total += w;
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (inner[i] > 0) {
      for (int64_t o = 0; o < outer; ++o)
        CopyBytes(out + o * total + offset, pieces[i] + o * inner[i],
                  static_cast<size_t>(inner[i]) * sizeof(T));
    }
    offset += inner[i];
  }
}

// The inverse of ConcatCompute; null pieces are skipped. Used by split, stack_grad, concat_grad.
template <typename T>
void SplitCompute(const T* in, int64_t outer, const std::vector<int64_t>& inner,
                  const std::vector<T*>& pieces) {
  int64_t total = 0;
  for (int64_t w : inner) total += w;
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i] && inner[i] > 0) {
      for (int64_t o = 0; o < outer; ++o)
        CopyBytes(pieces[i] + o * inner[i], in + o * total + offset,
                  static_cast<size_t>(inner[i]) * sizeof(T));
    }
    offset += inner[i];
  }
}

// Output grads "<Slot>@GRAD" take the dims and dtype of input "<Slot>" (each var, skipping
// pruned ones).
Status GradLikeInput(InferShapeContext* ctx, const std::string& slot);

// CPU kernels of a data-movement kernel template K<T> for float, double, int32 and int64.
#define LOOM_SHAPE_KERNELS_ALL(K)                    \
  Kernel(Place::kCPU, proto::FP32, K<float>)         \
      .Kernel(Place::kCPU, proto::FP64, K<double>)   \
      .Kernel(Place::kCPU, proto::INT32, K<int32_t>) \
      .Kernel(Place::kCPU, proto::INT64, K<int64_t>)
// CPU kernels for float and double (gradients).
#define LOOM_SHAPE_KERNELS_FLOAT(K) \
  Kernel(Place::kCPU, proto::FP32, K<float>).Kernel(Place::kCPU, proto::FP64, K<double>)

}  // namespace loom::ops
