// pool2d: max / average pooling over the H and W axes of NCHW inputs.
// Window (oh, ow) covers rows [oh * s - p, oh * s - p + k) clipped to the image; padding never
// contributes to a max. Average pooling divides by the clipped window area when `exclusive`,
// otherwise by kh * kw. global_pooling pools each whole plane into one value.
#include <algorithm>
#include <limits>

#include "framework/parallel.h"
#include "operators/nn/nn_util.h"
#include "operators/nn/pool_geom.h"

namespace loom::ops {
namespace {

Status Pool2DInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() != 4) return ctx->Error(ctx->DescribeInput("X"), " must be 4-D [N, C, H, W]");
  bool global = ctx->Attr<bool>("global_pooling");
  bool ceil_mode = ctx->Attr<bool>("ceil_mode");
  int64_t k[2], s[2], p[2];
  EffectiveWindow(ctx->Attrs(), x, k, s, p);
  DDim out{x[0], x[1], -1, -1};
  for (int a = 0; a < 2; ++a) {
    const char* axis = a == 0 ? "height" : "width";
    if (global) {
      out[2 + a] = 1;
      continue;
    }
    if (k[a] < 1)
      return ctx->Error("ksize[", a, "] must be >= 1 without global_pooling, got ", k[a]);
    if (p[a] >= k[a])
      return ctx->Error("paddings[", a, "] (", p[a], ") must be smaller than ksize[", a, "] (",
                        k[a], ")");
    int64_t o = PoolOutSize(x[2 + a], k[a], p[a], s[a], ceil_mode);
    if (o == 0)
      return ctx->Error("output ", axis, " would be empty: ", ctx->DescribeInput("X"),
                        " padded by ", p[a], " on each side is ", x[2 + a] + 2 * p[a],
                        " wide, smaller than ksize[", a, "] = ", k[a]);
    out[2 + a] = o;
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// The clipped window [h0, h1) x [w0, w1) of output (oh, ow) and the average's divisor.
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t divisor;
};

Window WindowAt(const PoolGeom& g, int64_t oh, int64_t ow) {
  Window win;
  win.h0 = oh * g.sh - g.ph;
  win.w0 = ow * g.sw - g.pw;
  win.h1 = std::min(win.h0 + g.kh, g.h);
  win.w1 = std::min(win.w0 + g.kw, g.w);
  win.h0 = std::max<int64_t>(win.h0, 0);
  win.w0 = std::max<int64_t>(win.w0, 0);
  int64_t area = std::max<int64_t>(win.h1 - win.h0, 0) * std::max<int64_t>(win.w1 - win.w0, 0);
  win.divisor = g.exclusive ? area : g.kh * g.kw;
  return win;
}

// Planes per ParallelFor range: about 32K input elements, so small maps stay on one thread.
int64_t PlanesPerRange(const PoolGeom& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(g.h * g.w, 1));
}

// 2x2 windows at stride 2, no padding, every window inside the image: the usual CNN
// downsampling, where each input element is in at most one window. Runs without WindowAt.
bool IsTwoByTwo(const PoolGeom& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 &&
         2 * g.ho <= g.h && 2 * g.wo <= g.w;
}

template <typename T>
void TwoByTwoForward(const PoolGeom& g, const T* xp, T* op) {
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    const T* r0 = xp + 2 * oh * g.w;
    const T* r1 = r0 + g.w;
    T* o = op + oh * g.wo;
    if (g.max) {
      // Same order as the general path (from lowest(), row-major), so NaNs are treated alike.
      for (int64_t ow = 0; ow < g.wo; ++ow) {
        T acc = std::max(std::numeric_limits<T>::lowest(), r0[2 * ow]);
        acc = std::max(acc, r0[2 * ow + 1]);
        acc = std::max(acc, r1[2 * ow]);
        o[ow] = std::max(acc, r1[2 * ow + 1]);
      }
    } else {
      for (int64_t ow = 0; ow < g.wo; ++ow)
        o[ow] = (r0[2 * ow] + r0[2 * ow + 1] + r1[2 * ow] + r1[2 * ow + 1]) / T(4);
    }
  }
}

// dx of one plane, already zero: max sends the gradient to the first element of the window
// (row-major) equal to the output, avg a quarter to each.
template <typename T>
void TwoByTwoGrad(const PoolGeom& g, const T* xp, const T* op, const T* dop, T* dxp) {
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    const int64_t i0 = 2 * oh * g.w, i1 = i0 + g.w;
    for (int64_t ow = 0; ow < g.wo; ++ow) {
      const T gv = dop[oh * g.wo + ow];
      const int64_t c = 2 * ow;
      if (g.max) {
        const T t = op[oh * g.wo + ow];
        int64_t at = xp[i0 + c] == t       ? i0 + c
                     : xp[i0 + c + 1] == t ? i0 + c + 1
                     : xp[i1 + c] == t     ? i1 + c
                     : xp[i1 + c + 1] == t ? i1 + c + 1
                                           : -1;
        if (at >= 0) dxp[at] = gv;
      } else {
        const T share = gv / T(4);
        dxp[i0 + c] = dxp[i0 + c + 1] = dxp[i1 + c] = dxp[i1 + c + 1] = share;
      }
    }
  }
}

template <typename T>
Status Pool2DKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  PoolGeom g = MakePoolGeom(ctx, xt.dims());
  const T* x = xt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  ParallelFor(g.planes, PlanesPerRange(g), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      T* op = out + pl * g.ho * g.wo;
      if (IsTwoByTwo(g)) {
        TwoByTwoForward(g, xp, op);
        continue;
      }
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          Window win = WindowAt(g, oh, ow);
          T acc = g.max ? std::numeric_limits<T>::lowest() : T(0);
          bool any = false;
          for (int64_t ih = win.h0; ih < win.h1; ++ih) {
            for (int64_t iw = win.w0; iw < win.w1; ++iw) {
              T v = xp[ih * g.w + iw];
              acc = g.max ? std::max(acc, v) : acc + v;
              any = true;
            }
          }
          // A window lying entirely in the padding (possible with ceil_mode) yields 0.
          if (!any)
            acc = T(0);
          else if (!g.max)
            acc /= static_cast<T>(win.divisor);
          op[oh * g.wo + ow] = acc;
        }
      }
    }
  });
  return Status::OK();
}

// max: the gradient goes to the first element of the window equal to the output (the one the
// forward pass selected); avg: spread evenly over the window with the forward divisor.
template <typename T>
Status Pool2DGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  PoolGeom g = MakePoolGeom(ctx, xt.dims());
  const T* x = xt.data<T>();
  const T* out = ctx.Input("Out").data<T>();
  const T* dout = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  ParallelFor(g.planes, PlanesPerRange(g), [&](int64_t p0, int64_t p1) {
    std::fill(dx + p0 * g.h * g.w, dx + p1 * g.h * g.w, T(0));
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * g.h * g.w;
      T* dxp = dx + pl * g.h * g.w;
      const int64_t ooff = pl * g.ho * g.wo;
      if (IsTwoByTwo(g)) {
        TwoByTwoGrad(g, xp, out + ooff, dout + ooff, dxp);
        continue;
      }
      for (int64_t oh = 0; oh < g.ho; ++oh) {
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          Window win = WindowAt(g, oh, ow);
          if (win.h1 <= win.h0 || win.w1 <= win.w0) continue;
          T gv = dout[ooff + oh * g.wo + ow];
          if (g.max) {
            T target = out[ooff + oh * g.wo + ow];
            bool done = false;
            for (int64_t ih = win.h0; ih < win.h1 && !done; ++ih) {
              for (int64_t iw = win.w0; iw < win.w1; ++iw) {
                if (xp[ih * g.w + iw] == target) {
                  dxp[ih * g.w + iw] += gv;
                  done = true;
                  break;
                }
              }
            }
          } else {
            T share = gv / static_cast<T>(win.divisor);
            for (int64_t ih = win.h0; ih < win.h1; ++ih)
              for (int64_t iw = win.w0; iw < win.w1; ++iw) dxp[ih * g.w + iw] += share;
          }
        }
      }
    }
  });
  return Status::OK();
}

Status Pool2DGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> Pool2DGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Out", "Out@GRAD"}, {"X"})};
}

}  // namespace

LOOM_REGISTER_OP(pool2d)
    .Doc(
        "Out = max or average over sliding windows of the H and W axes of X [N, C, H, W]; "
        "Out is [N, C, Ho, Wo], Ho = (H + 2 * paddings[0] - ksize[0]) / strides[0] + 1 "
        "(rounded up with ceil_mode).")
    .Input("X", "input [N, C, H, W]")
    .Output("Out", "pooled [N, C, Ho, Wo]")
    .Attr<std::string>("pooling_type", "max", "'max' or 'avg'", nn::OneOf({"max", "avg"}))
    .Attr<std::vector<int>>("ksize", {1, 1},
                            "window size along H and W (any value with global_pooling)",
                            nn::IntsOfSize(2))
    .Attr<std::vector<int>>("strides", {1, 1}, "stride along H and W", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("paddings", {0, 0}, "padding on each side of H, W", nn::IntsOf(2, 0))
    .Attr<bool>("global_pooling", false,
                "pool each whole plane (ignores ksize, strides and paddings)")
    .Attr<bool>("ceil_mode", false, "round the output size up instead of down")
    .Attr<bool>("exclusive", true,
                "avg divides by the window area inside the image instead of kh * kw")
    .InferShape(Pool2DInferShape)
    .GradMaker(Pool2DGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Pool2DKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Pool2DKernel<double>);

LOOM_REGISTER_OP(pool2d_grad)
    .Doc(
        "X@GRAD of pool2d: max routes Out@GRAD to the selected element, avg spreads it over "
        "the window.")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("pool2d")
    .InferShape(Pool2DGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Pool2DGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Pool2DGradKernel<double>);

}  // namespace loom::ops
