// Image resizing: bilinear_interp and nearest_interp (4-D, NCHW or NHWC) and trilinear_interp
// (5-D, NCDHW or NDHWC), with Fluid's index rules. Per resized axis of input extent in and output
// extent out, ratio = (in - 1) / (out - 1) with align_corners, else in / out (0 when out == 1).
//   nearest   output o reads int(ratio * o + 0.5) with align_corners, else int(ratio * o)
//   linear    with align_mode 0 and not align_corners the source is s = max(ratio * (o + 0.5) -
//             0.5, 0), else s = ratio * o; output o mixes lo = int(s) (clamped >= 0) and hi =
//             min(lo + 1, in - 1) with weights 1 - (s - lo) and s - lo.
// Ratios and weights are float, as in Fluid, so float64 runs pick the same source pixels. The
// output size: operators/nn/interp_size.h (an OutSize input sets it when the op runs).
// A resized image is the sum over the taps of each axis (one tap nearest, two linear) of
// x[taps] * weight_d * weight_h * weight_w; the gradient scatters Out@GRAD back with the same
// weights.
#include <algorithm>
#include <array>

#include "framework/parallel.h"
#include "operators/nn/interp_size.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

enum class InterpKind { kNearest, kLinear };

// Up to two source indices with weights per output index of one axis.
struct AxisTaps {
  std::vector<std::array<int64_t, 2>> index;
  std::vector<std::array<float, 2>> weight;
  int taps = 1;
};

float InterpRatio(int64_t in, int64_t out, bool align_corners) {
  if (out <= 1) return 0.f;
  return align_corners ? static_cast<float>(in - 1) / static_cast<float>(out - 1)
                       : static_cast<float>(in) / static_cast<float>(out);
}

AxisTaps MakeAxisTaps(int64_t in, int64_t out, InterpKind kind, bool align_corners,
                      int align_mode) {
  AxisTaps t;
  t.index.resize(out);
  t.weight.resize(out);
  const float ratio = InterpRatio(in, out, align_corners);
  if (kind == InterpKind::kNearest) {
    for (int64_t o = 0; o < out; ++o) {
      const float scaled = ratio * static_cast<float>(o);
      const double src = align_corners ? scaled + 0.5 : scaled;
      t.index[o] = {std::min<int64_t>(static_cast<int64_t>(src), in - 1), 0};
      t.weight[o] = {1.f, 0.f};
    }
    return t;
  }
  t.taps = 2;
  const bool half_pixel = align_mode == 0 && !align_corners;
  for (int64_t o = 0; o < out; ++o) {
    // Fluid mixes float and double here; the same mix picks the same pixels and weights.
    const double centre = static_cast<double>(ratio) * (o + 0.5) - 0.5;
    const float scaled = ratio * static_cast<float>(o);
    int64_t lo = half_pixel ? static_cast<int64_t>(centre) : static_cast<int64_t>(scaled);
    lo = std::max<int64_t>(lo, 0);
    const int64_t hi = std::min<int64_t>(lo + 1, in - 1);
    const float src = half_pixel ? std::max(static_cast<float>(centre), 0.f) : scaled;
    const float frac = src - static_cast<float>(lo);
    t.index[o] = {lo, hi};
    t.weight[o] = {1.f - frac, frac};
  }
  return t;
}

// A single-tap identity axis (the depth of a 2-D resize).
AxisTaps UnitAxis() {
  AxisTaps t;
  t.index = {{0, 0}};
  t.weight = {{1.f, 0.f}};
  return t;
}

struct InterpGeom {
  int64_t n, c, in[3], out[3];  // in / out: D, H, W (D = 1 for 2-D)
  bool channels_last;
  AxisTaps axis[3];
};

Status InterpInferShape(InferShapeContext* ctx, int rank) {
  DDim x = ctx->InputDim("X");
  if (x.size() != rank + 2) return ctx->Error(ctx->DescribeInput("X"), " must be ", rank + 2, "-D");
  const bool last = ChannelsLast(ctx->Attr<std::string>("data_layout"));
  const int first = last ? 1 : 2;
  std::vector<int64_t> in;
  for (int a = 0; a < rank; ++a) in.push_back(x[first + a]);
  const float scale = ctx->Attr<float>("scale");
  std::vector<int> want = WantedSize(*ctx, rank);
  DDim od = x;
  if (ctx->HasInput("OutSize")) {
    // The size is read when the op runs: the positive out_* attributes, if any, say what it
    // will be; otherwise the spatial dims are unknown until then.
    DDim sd = ctx->InputDim("OutSize");
    if (sd.size() != 1 || (sd[0] >= 0 && sd[0] != rank))
      return ctx->Error(ctx->DescribeInput("OutSize"), " must be 1-D [", rank, "]");
    if (ctx->InputDtype("OutSize") != proto::INT32)
      return ctx->Error(ctx->DescribeInput("OutSize"), " must be int32");
    for (int a = 0; a < rank; ++a) od[first + a] = !ctx->IsRuntime() && want[a] > 0 ? want[a] : -1;
    ctx->SetOutputDim("Out", od);
    ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
    return Status::OK();
  }
  if (scale <= 0)
    for (int a = 0; a < rank; ++a)
      if (want[a] <= 0)
        return ctx->Error("give a positive scale or positive output sizes, got scale ", scale,
                          " and output sizes ", nn::IntsToString(want));
  std::vector<int64_t> out = InterpOutSize(in, scale, want);
  for (int a = 0; a < rank; ++a)
    if (out[a] == 0)
      return ctx->Error("scale ", scale, " leaves spatial dim ", a, " of ", ctx->DescribeInput("X"),
                        " empty");
  for (int a = 0; a < rank; ++a) od[first + a] = out[a];
  ctx->SetOutputDim("Out", od);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// x: the input dims; y: the output dims (both in the op's layout).
InterpGeom MakeInterpGeom(const KernelContext& ctx, const DDim& x, const DDim& y, InterpKind kind) {
  const int rank = x.size() - 2;
  InterpGeom g;
  g.channels_last = ChannelsLast(ctx.Attr<std::string>("data_layout"));
  const int first = g.channels_last ? 1 : 2;
  g.n = x[0];
  g.c = g.channels_last ? x[x.size() - 1] : x[1];
  const bool align_corners = ctx.Attr<bool>("align_corners");
  const int align_mode = ctx.Attr<int>("align_mode");
  const int skip = 3 - rank;
  for (int a = 0; a < 3; ++a) {
    if (a < skip) {
      g.in[a] = g.out[a] = 1;
      g.axis[a] = UnitAxis();
      continue;
    }
    g.in[a] = x[first + a - skip];
    g.out[a] = y[first + a - skip];
    g.axis[a] = MakeAxisTaps(g.in[a], g.out[a], kind, align_corners, align_mode);
  }
  return g;
}

// Calls f(out_offset, in_offset, weight) for every tap of every output element of image b.
template <typename F>
void ForEachTap(const InterpGeom& g, int64_t b, F&& f) {
  const int64_t in_sp = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_sp = g.out[0] * g.out[1] * g.out[2];
  for (int64_t od = 0; od < g.out[0]; ++od) {
    for (int64_t oh = 0; oh < g.out[1]; ++oh) {
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        const int64_t osp = (od * g.out[1] + oh) * g.out[2] + ow;
        for (int td = 0; td < g.axis[0].taps; ++td) {
          const int64_t id = g.axis[0].index[od][td];
          const float wd = g.axis[0].weight[od][td];
          for (int th = 0; th < g.axis[1].taps; ++th) {
            const int64_t ih = g.axis[1].index[oh][th];
            const float wh = g.axis[1].weight[oh][th];
            for (int tw = 0; tw < g.axis[2].taps; ++tw) {
              const int64_t iw = g.axis[2].index[ow][tw];
              const float ww = g.axis[2].weight[ow][tw];
              const int64_t isp = (id * g.in[1] + ih) * g.in[2] + iw;
              for (int64_t ch = 0; ch < g.c; ++ch) {
                if (g.channels_last)
                  f((b * out_sp + osp) * g.c + ch, (b * in_sp + isp) * g.c + ch, wd, wh, ww);
                else
                  f((b * g.c + ch) * out_sp + osp, (b * g.c + ch) * in_sp + isp, wd, wh, ww);
              }
            }
          }
        }
      }
    }
  }
}

template <typename T, InterpKind kKind>
Status InterpKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(DDim y, InterpOutDims(ctx, xt.dims()));
  InterpGeom g = MakeInterpGeom(ctx, xt.dims(), y, kKind);
  const T* x = xt.data<T>();
  Tensor* outt = ctx.Output("Out");
  outt->Resize(y);
  T* out = outt->mutable_data<T>(ctx.place());
  std::fill(out, out + outt->numel(), T(0));
  ParallelFor(g.n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      ForEachTap(g, b, [&](int64_t o, int64_t i, float wd, float wh, float ww) {
        out[o] += x[i] * static_cast<T>(wd) * static_cast<T>(wh) * static_cast<T>(ww);
      });
  });
  return Status::OK();
}

template <typename T, InterpKind kKind>
Status InterpGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const Tensor& dout_t = ctx.Input("Out@GRAD");
  InterpGeom g = MakeInterpGeom(ctx, xt.dims(), dout_t.dims(), kKind);
  const T* dout = dout_t.data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  std::fill(dx, dx + dxt->numel(), T(0));
  ParallelFor(g.n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      ForEachTap(g, b, [&](int64_t o, int64_t i, float wd, float wh, float ww) {
        dx[i] += dout[o] * static_cast<T>(wd) * static_cast<T>(wh) * static_cast<T>(ww);
      });
  });
  return Status::OK();
}

Status InterpGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> InterpGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
}

Status Interp2DInferShape(InferShapeContext* ctx) { return InterpInferShape(ctx, 2); }
Status Interp3DInferShape(InferShapeContext* ctx) { return InterpInferShape(ctx, 3); }

}  // namespace

#define LOOM_INTERP_ATTRS(layouts)                                                         \
  Attr<int>("out_h", -1, "output height (used when scale <= 0)")                           \
      .Attr<int>("out_w", -1, "output width (used when scale <= 0)")                       \
      .Attr<float>("scale", 0.0f, "output size = int(input size * scale) when > 0")        \
      .Attr<bool>("align_corners", true,                                                   \
                  "map the corner pixels of input and output onto "                        \
                  "each other")                                                            \
      .Attr<int>("align_mode", 1,                                                          \
                 "without align_corners: 0 samples at pixel centres (ratio * (o + 0.5) - " \
                 "0.5), 1 at ratio * o",                                                   \
                 [](const int& v) {                                                        \
                   return v == 0 || v == 1 ? Status::OK()                                  \
                                           : InvalidArgument("must be 0 or 1, got ", v);   \
                 })                                                                        \
      .Attr<std::string>("data_layout", layouts[0], "layout of X and Out", nn::OneOf(layouts))

LOOM_REGISTER_OP(bilinear_interp)
    .Doc("Out = X [N, C, H, W] resized on H and W by bilinear interpolation (Fluid's rules).")
    .Input("X", "input [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC)")
    .Input("OutSize",
           "optional int32 [spatial rank]: the output size, read when the op runs (overrides "
           "out_* and scale)",
           false, true)
    .Output("Out", "resized input")
    .LOOM_INTERP_ATTRS(std::vector<std::string>({"NCHW", "NHWC"}))
    .InferShape(Interp2DInferShape)
    .GradMaker(InterpGradMaker)
    .Kernel(Place::kCPU, proto::FP32, InterpKernel<float, InterpKind::kLinear>)
    .Kernel(Place::kCPU, proto::FP64, InterpKernel<double, InterpKind::kLinear>);

LOOM_REGISTER_OP(bilinear_interp_grad)
    .Doc("X@GRAD of bilinear_interp: Out@GRAD scattered back with the interpolation weights.")
    .Input("X", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("bilinear_interp")
    .InferShape(InterpGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, InterpGradKernel<float, InterpKind::kLinear>)
    .Kernel(Place::kCPU, proto::FP64, InterpGradKernel<double, InterpKind::kLinear>);

LOOM_REGISTER_OP(nearest_interp)
    .Doc("Out = X [N, C, H, W] resized on H and W by nearest-neighbour sampling (Fluid's rules).")
    .Input("X", "input [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC)")
    .Input("OutSize",
           "optional int32 [spatial rank]: the output size, read when the op runs (overrides "
           "out_* and scale)",
           false, true)
    .Output("Out", "resized input")
    .LOOM_INTERP_ATTRS(std::vector<std::string>({"NCHW", "NHWC"}))
    .InferShape(Interp2DInferShape)
    .GradMaker(InterpGradMaker)
    .Kernel(Place::kCPU, proto::FP32, InterpKernel<float, InterpKind::kNearest>)
    .Kernel(Place::kCPU, proto::FP64, InterpKernel<double, InterpKind::kNearest>);

LOOM_REGISTER_OP(nearest_interp_grad)
    .Doc("X@GRAD of nearest_interp: Out@GRAD added into the pixel each output read.")
    .Input("X", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("nearest_interp")
    .InferShape(InterpGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, InterpGradKernel<float, InterpKind::kNearest>)
    .Kernel(Place::kCPU, proto::FP64, InterpGradKernel<double, InterpKind::kNearest>);

LOOM_REGISTER_OP(trilinear_interp)
    .Doc("Out = X [N, C, D, H, W] resized on D, H and W by trilinear interpolation.")
    .Input("X", "input [N, C, D, H, W] (NCDHW) or [N, D, H, W, C] (NDHWC)")
    .Input("OutSize",
           "optional int32 [spatial rank]: the output size, read when the op runs (overrides "
           "out_* and scale)",
           false, true)
    .Output("Out", "resized input")
    .Attr<int>("out_d", -1, "output depth (used when scale <= 0)")
    .LOOM_INTERP_ATTRS(std::vector<std::string>({"NCDHW", "NDHWC"}))
    .InferShape(Interp3DInferShape)
    .GradMaker(InterpGradMaker)
    .Kernel(Place::kCPU, proto::FP32, InterpKernel<float, InterpKind::kLinear>)
    .Kernel(Place::kCPU, proto::FP64, InterpKernel<double, InterpKind::kLinear>);

LOOM_REGISTER_OP(trilinear_interp_grad)
    .Doc("X@GRAD of trilinear_interp: Out@GRAD scattered back with the interpolation weights.")
    .Input("X", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("trilinear_interp")
    .InferShape(InterpGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, InterpGradKernel<float, InterpKind::kLinear>)
    .Kernel(Place::kCPU, proto::FP64, InterpGradKernel<double, InterpKind::kLinear>);

#undef LOOM_INTERP_ATTRS

}  // namespace loom::ops
