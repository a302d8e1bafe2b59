// The geometry of one conv2d call (NCHW input, [M, C / groups, kh, kw] filter), shared by the
// CPU kernels (conv2d.cc) and the CUDA kernels (conv_pool_cuda.cu). A plain struct, passed by
// value to device kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/op_registry.h"

namespace loom::ops {

struct ConvGeom {
  int64_t n, c, h, w;  // Input
  int64_t m, kh, kw;   // Filter [m, c / groups, kh, kw]
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups, cg, mg;  // channels per group (in, out)
  int64_t ho, wo;
  int64_t K() const { return cg * kh * kw; }    // rows of one group's column block
  int64_t P() const { return ho * wo; }         // output pixels per plane
  int64_t Rows() const { return c * kh * kw; }  // rows of one sample's column buffer
};

// Output extent along one axis, or -1 when the input extent is unknown; < 1 means no output.
inline int64_t ConvOutSize(int64_t in, int64_t k, int pad, int stride, int dilation) {
  if (in < 0 || k < 0) return -1;
  int64_t eff = static_cast<int64_t>(dilation) * (k - 1) + 1;
  int64_t span = in + 2 * pad - eff;
  return span < 0 ? 0 : span / stride + 1;
}

// The geometry of a call from its input and filter dims and the op's attributes.
inline ConvGeom MakeConvGeom(const KernelContext& ctx, const DDim& in, const DDim& f) {
  const auto& strides = ctx.Attr<std::vector<int>>("strides");
  const auto& pads = ctx.Attr<std::vector<int>>("paddings");
  const auto& dils = ctx.Attr<std::vector<int>>("dilations");
  ConvGeom g;
  g.n = in[0], g.c = in[1], g.h = in[2], g.w = in[3];
  g.m = f[0], g.kh = f[2], g.kw = f[3];
  g.sh = strides[0], g.sw = strides[1], g.ph = pads[0], g.pw = pads[1];
  g.dh = dils[0], g.dw = dils[1];
  g.groups = ctx.Attr<int>("groups");
  g.cg = g.c / g.groups, g.mg = g.m / g.groups;
  g.ho = ConvOutSize(g.h, g.kh, pads[0], strides[0], dils[0]);
  g.wo = ConvOutSize(g.w, g.kw, pads[1], strides[1], dils[1]);
  return g;
}

}  // namespace loom::ops
