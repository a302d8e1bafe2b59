// pad2d: pads the H and W axes of a 4-D image batch (NCHW or NHWC) by paddings = [top, bottom,
// left, right]. Each output pixel reads one input pixel or, in constant mode, pad_value:
//   constant  outside the image -> pad_value
//   reflect   mirrored about the border pixel, which is not repeated (pads must be < the extent)
//   edge      the nearest border pixel
// pad2d_grad adds Out@GRAD of each output pixel into the input pixel it read. The paddings may
// come from an int32 [4] Paddings input read when the op runs (operators/nn/pad2d_paddings.h).
#include <algorithm>
#include <array>

#include "framework/parallel.h"
#include "operators/nn/nn_util.h"
#include "operators/nn/pad2d_paddings.h"

namespace loom::ops {
namespace {

enum class PadMode { kConstant, kReflect, kEdge };

PadMode ReadPadMode(const std::string& mode) {
  return mode == "reflect" ? PadMode::kReflect
         : mode == "edge"  ? PadMode::kEdge
                           : PadMode::kConstant;
}

struct Pad2DGeom {
  int64_t n, c, h, w, ho, wo;
  int64_t top, left;
  bool nhwc;
  PadMode mode;
};

Pad2DGeom MakePad2DGeom(const KernelContext& ctx, const DDim& x,
                        const std::array<int64_t, 4>& pads) {
  Pad2DGeom g;
  g.nhwc = ctx.Attr<std::string>("data_format") == "NHWC";
  g.n = x[0];
  g.c = g.nhwc ? x[3] : x[1];
  g.h = g.nhwc ? x[1] : x[2];
  g.w = g.nhwc ? x[2] : x[3];
  g.top = pads[0], g.left = pads[2];
  g.ho = g.h + pads[0] + pads[1];
  g.wo = g.w + pads[2] + pads[3];
  g.mode = ReadPadMode(ctx.Attr<std::string>("mode"));
  return g;
}

// The input index along an axis of extent n read by output index o (o - pad before clamping),
// or -1 for a constant-mode pixel outside the image.
inline int64_t SourceIndex(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return std::min(std::max<int64_t>(i, 0), n - 1);
    case PadMode::kReflect:
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return i;
  }
  return -1;
}

// Calls f(out_offset, in_offset or -1) for every output element of image b.
template <typename F>
void ForEachPixel(const Pad2DGeom& g, int64_t b, F&& f) {
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    const int64_t ih = SourceIndex(oh - g.top, g.h, g.mode);
    for (int64_t ow = 0; ow < g.wo; ++ow) {
      const int64_t iw = SourceIndex(ow - g.left, g.w, g.mode);
      const bool inside = ih >= 0 && iw >= 0;
      for (int64_t ch = 0; ch < g.c; ++ch) {
        int64_t o, i;
        if (g.nhwc) {
          o = ((b * g.ho + oh) * g.wo + ow) * g.c + ch;
          i = ((b * g.h + ih) * g.w + iw) * g.c + ch;
        } else {
          o = ((b * g.c + ch) * g.ho + oh) * g.wo + ow;
          i = ((b * g.c + ch) * g.h + ih) * g.w + iw;
        }
        f(o, inside ? i : -1);
      }
    }
  }
}

Status Pad2DInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() != 4) return ctx->Error(ctx->DescribeInput("X"), " must be 4-D");
  const auto& pads = ctx->Attr<std::vector<int>>("paddings");
  const bool nhwc = ctx->Attr<std::string>("data_format") == "NHWC";
  const int hax = nhwc ? 1 : 2;
  const bool reflect = ctx->Attr<std::string>("mode") == "reflect";
  DDim out = x;
  if (ctx->HasInput("Paddings")) {  // read when the op runs: H and W unknown until then
    DDim pd = ctx->InputDim("Paddings");
    if (pd.size() != 1 || (pd[0] >= 0 && pd[0] != 4) || ctx->InputDtype("Paddings") != proto::INT32)
      return ctx->Error(ctx->DescribeInput("Paddings"), " must be int32 [4]");
    out[hax] = out[hax + 1] = -1;
    ctx->SetOutputDim("Out", out);
    ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
    return Status::OK();
  }
  for (int a = 0; a < 2; ++a) {
    const int64_t in = x[hax + a];
    const int before = pads[2 * a], after = pads[2 * a + 1];
    if (in >= 0 && reflect && (before >= in || after >= in))
      return ctx->Error("reflect mode needs paddings smaller than the ",
                        a == 0 ? "height" : "width", " (", in, ") of ", ctx->DescribeInput("X"),
                        ", got paddings ", nn::IntsToString(pads));
    if (in == 0 && ctx->Attr<std::string>("mode") != "constant")
      return ctx->Error("mode '", ctx->Attr<std::string>("mode"), "' cannot pad an empty ",
                        a == 0 ? "height" : "width", " of ", ctx->DescribeInput("X"));
    out[hax + a] = in < 0 ? -1 : in + before + after;
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status Pad2DKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(auto pads, Pad2DPaddings(ctx, xt.dims()));
  Pad2DGeom g = MakePad2DGeom(ctx, xt.dims(), pads);
  const T value = static_cast<T>(ctx.Attr<float>("pad_value"));
  const T* x = xt.data<T>();
  Tensor* outt = ctx.Output("Out");
  outt->Resize(g.nhwc ? DDim{g.n, g.ho, g.wo, g.c} : DDim{g.n, g.c, g.ho, g.wo});
  T* out = outt->mutable_data<T>(ctx.place());
  ParallelFor(g.n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      ForEachPixel(g, b, [&](int64_t o, int64_t i) { out[o] = i >= 0 ? x[i] : value; });
  });
  return Status::OK();
}

template <typename T>
Status Pad2DGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(auto pads, Pad2DPaddings(ctx, xt.dims()));
  Pad2DGeom g = MakePad2DGeom(ctx, xt.dims(), pads);
  const T* dout = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt->mutable_data<T>(ctx.place());
  std::fill(dx, dx + dxt->numel(), T(0));
  ParallelFor(g.n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      ForEachPixel(g, b, [&](int64_t o, int64_t i) {
        if (i >= 0) dx[i] += dout[o];
      });
  });
  return Status::OK();
}

Status Pad2DGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> Pad2DGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Paddings", "Out@GRAD"}, {"X"})};
}

}  // namespace

LOOM_REGISTER_OP(pad2d)
    .Doc(
        "Out = X padded on H and W by paddings [top, bottom, left, right]: with pad_value "
        "(constant), the mirror image without the border pixel (reflect) or the border pixel "
        "(edge).")
    .Input("X", "input [N, C, H, W] (NCHW) or [N, H, W, C] (NHWC)")
    .Input("Paddings",
           "optional int32 [4]: [top, bottom, left, right], read when the op runs (overrides "
           "the attribute)",
           false, true)
    .Output("Out", "padded input, H + top + bottom high and W + left + right wide")
    .Attr<std::vector<int>>("paddings", {0, 0, 0, 0}, "[top, bottom, left, right]",
                            nn::IntsOf(4, 0))
    .Attr<std::string>("mode", "constant", "'constant', 'reflect' or 'edge'",
                       nn::OneOf({"constant", "reflect", "edge"}))
    .Attr<float>("pad_value", 0.0f, "value of the padding in constant mode")
    .Attr<std::string>("data_format", "NCHW", "'NCHW' or 'NHWC'", nn::OneOf({"NCHW", "NHWC"}))
    .InferShape(Pad2DInferShape)
    .GradMaker(Pad2DGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Pad2DKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Pad2DKernel<double>);

LOOM_REGISTER_OP(pad2d_grad)
    .Doc("X@GRAD of pad2d: Out@GRAD of each output pixel added into the input pixel it read.")
    .Input("X", "forward input (for its dims)")
    .Input("Paddings", "the forward op's Paddings, when it has them", false, true)
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("pad2d")
    .InferShape(Pad2DGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Pad2DGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Pad2DGradKernel<double>);

}  // namespace loom::ops
