// The geometry of one matmul call (operators/math/matmul.cc), shared by the CPU kernels and
// the CUDA kernels (matmul_reduce_cuda.cu) and by shape inference: 1-D operands promoted to a
// row (X) or column (Y), the transposes applied, batch dims matched. Host code only.
#pragma once

#include <cstdint>

#include "framework/op_registry.h"

namespace loom::ops {

struct MatmulGeom {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  bool x_batched = false, y_batched = false;
  DDim out;  // the output's dims
};

// Dims as [batch..., rows, cols] after promoting a 1-D operand.
inline DDim PromoteMatmulOperand(const DDim& d, bool is_x) {
  if (d.size() != 1) return d;
  return is_x ? DDim{1, d[0]} : DDim{d[0], 1};
}

// The geometry of op(X) · op(Y). Dims may be -1 (compile time): an unknown inner dim matches
// any other.
inline StatusOr<MatmulGeom> PlanMatmul(const DDim& xd, const DDim& yd, bool tx, bool ty) {
  if (xd.size() == 0 || yd.size() == 0) return InvalidArgument("operands must have rank >= 1");
  DDim x = PromoteMatmulOperand(xd, true), y = PromoteMatmulOperand(yd, false);
  MatmulGeom g;
  int64_t xr = x[x.size() - 2], xc = x[x.size() - 1], yr = y[y.size() - 2], yc = y[y.size() - 1];
  g.m = tx ? xc : xr;
  g.k = tx ? xr : xc;
  int64_t ky = ty ? yc : yr;
  g.n = ty ? yr : yc;
  if (g.k >= 0 && ky >= 0 && g.k != ky)
    return InvalidArgument("inner dims differ: X gives ", g.k, ", Y gives ", ky);
  DDim xb(x.begin(), x.end() - 2), yb(y.begin(), y.end() - 2);
  g.x_batched = xb.size() > 0;
  g.y_batched = yb.size() > 0;
  if (g.x_batched && g.y_batched && !DimsCompatible(xb, yb))
    return InvalidArgument("batch dims differ: ", xb.ToString(), " vs ", yb.ToString());
  DDim batch = g.x_batched ? xb : yb;
  g.batch = batch.numel();
  g.out = batch;
  if (xd.size() != 1) g.out.push_back(g.m);
  if (yd.size() != 1) g.out.push_back(g.n);
  if (g.out.size() == 0) g.out.push_back(1);
  return g;
}

}  // namespace loom::ops
