// The geometry of one pool2d call (NCHW input), shared by shape inference and the CPU kernels
// (pool2d.cc) and the CUDA kernels (conv_pool_cuda.cu): the window in effect (global_pooling
// overrides ksize, strides and paddings) and the output extents. A plain struct, passed by value
// to device kernels. Host code only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/op_registry.h"

namespace loom::ops {

struct PoolGeom {
  int64_t planes, h, w;  // planes = N * C
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t ho, wo;
  bool max, exclusive;
};

// Output extent along one axis (-1 when the input extent is unknown).
inline int64_t PoolOutSize(int64_t in, int64_t k, int64_t pad, int64_t stride, bool ceil_mode) {
  if (in < 0) return -1;
  int64_t span = in + 2 * pad - k;
  if (span < 0) return 0;
  return (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
}

// Kernel size, strides and paddings in effect (global pooling overrides the attributes).
inline void EffectiveWindow(const AttributeMap& attrs, const DDim& x, int64_t k[2], int64_t s[2],
                            int64_t p[2]) {
  const auto& ksize = GetAttr<std::vector<int>>(attrs, "ksize");
  const auto& strides = GetAttr<std::vector<int>>(attrs, "strides");
  const auto& pads = GetAttr<std::vector<int>>(attrs, "paddings");
  bool global = GetAttr<bool>(attrs, "global_pooling");
  for (int a = 0; a < 2; ++a) {
    k[a] = global ? x[2 + a] : ksize[a];
    s[a] = global ? 1 : strides[a];
    p[a] = global ? 0 : pads[a];
  }
}

// The geometry of a call on input dims x (known at run time).
inline PoolGeom MakePoolGeom(const KernelContext& ctx, const DDim& x) {
  int64_t k[2], s[2], p[2];
  EffectiveWindow(ctx.Attrs(), x, k, s, p);
  bool global = ctx.Attr<bool>("global_pooling");
  bool ceil_mode = ctx.Attr<bool>("ceil_mode");
  PoolGeom g;
  g.planes = x[0] * x[1], g.h = x[2], g.w = x[3];
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1];
  g.ho = global ? 1 : PoolOutSize(g.h, g.kh, g.ph, g.sh, ceil_mode);
  g.wo = global ? 1 : PoolOutSize(g.w, g.kw, g.pw, g.sw, ceil_mode);
  g.max = ctx.Attr<std::string>("pooling_type") == "max";
  g.exclusive = ctx.Attr<bool>("exclusive");
  return g;
}

}  // namespace loom::ops
