// Fluid's elementwise broadcasting: Y's dims (trailing 1s trimmed) must equal a contiguous run
// of X's dims starting at `axis` (axis = -1: rank(X) - rank(Y)); a one-element Y broadcasts
// onto any X. X is then viewed as [pre, n, post] and Y as [n]; Out has X's dims.
#pragma once

#include "operators/common.h"

namespace loom::ops {

struct BroadcastPlan {
  int64_t pre = 1, n = 1, post = 1;
  bool same_shape = false;
};

// Checks the dims; errors name the op, both vars and both dims.
Status ElementwiseInferShape(InferShapeContext* ctx);
StatusOr<BroadcastPlan> PlanBroadcast(const DDim& x, const DDim& y, int axis);

}  // namespace loom::ops
