// The paddings of pad2d in effect, [top, bottom, left, right]: the "paddings" attribute, or the
// optional Paddings input (int32 [4], read when the op runs). Shared by the CPU kernels
// (pad2d.cc) and the CUDA kernels (pad_interp_cuda.cu). Host code.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "framework/allocator.h"
#include "framework/op_registry.h"

namespace loom::ops {

// x: X's dims, to check that reflect paddings stay below the extents they mirror.
inline StatusOr<std::array<int64_t, 4>> Pad2DPaddings(const KernelContext& ctx, const DDim& x) {
  std::array<int64_t, 4> p;
  const Tensor* t = ctx.InputOrNull("Paddings");
  if (!t) {
    const auto& attr = ctx.Attr<std::vector<int>>("paddings");
    for (int i = 0; i < 4; ++i) p[i] = attr[i];
    return p;
  }
  if (t->numel() != 4 || t->dtype() != proto::INT32)
    return InvalidArgument(ctx.Where(), ": Paddings must hold 4 int32 values, got ",
                           t->dims().ToString(), " ", DataTypeName(t->dtype()));
  int32_t host[4];
  MemCopy(Place::CPU(), host, t->place(), t->data<int32_t>(), sizeof(host));
  const bool nhwc = ctx.Attr<std::string>("data_format") == "NHWC";
  const bool reflect = ctx.Attr<std::string>("mode") == "reflect";
  for (int i = 0; i < 4; ++i) {
    const int64_t extent = x[(nhwc ? 1 : 2) + i / 2];
    if (host[i] < 0 || (reflect && host[i] >= extent))
      return InvalidArgument(
          ctx.Where(), ": Paddings ", host[0], ", ", host[1], ", ", host[2], ", ", host[3],
          " must be >= 0", reflect ? " and below the extent " : "",
          reflect ? std::to_string(extent) : "", " (mode '", ctx.Attr<std::string>("mode"), "')");
    p[i] = host[i];
  }
  return p;
}

}  // namespace loom::ops
