// pool3d: max / average pooling over D, H and W of NCDHW inputs, with pool2d's window rules per
// axis (window [o * s - p, o * s - p + k) clipped to the input; padding never joins a max;
// exclusive averages divide by the clipped volume, otherwise by kd * kh * kw).
// adaptive_pool2d / adaptive_pool3d: output o of an axis of input extent in and output extent
// out pools [floor(o * in / out), ceil((o + 1) * in / out)); averages divide by the window volume.
// All three run one kernel over [planes, D, H, W] (D = 1 for 2-D) from per-axis window tables.
// The max gradient goes to the first element of the window (row-major) equal to the output; the
// adaptive ops can also output that element's offset in its plane (Mask, Fluid's
// require_index).
#include <algorithm>
#include <limits>

#include "framework/parallel.h"
#include "operators/nn/nn_util.h"
#include "operators/nn/pads3d.h"

namespace loom::ops {
namespace {

// [start, end) of the window of every output index along one axis.
struct AxisWindows {
  std::vector<int64_t> start, end;
};

struct Pool3DGeom {
  int64_t planes, in[3], out[3];
  AxisWindows axis[3];
  int64_t fixed_divisor;  // > 0: divide every average by this; 0: by the window volume
  bool max;
};

AxisWindows SlidingWindows(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
  AxisWindows w;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t a = o * s - p;
    w.start.push_back(std::max<int64_t>(a, 0));
    w.end.push_back(std::min(a + k, in));
  }
  return w;
}

AxisWindows AdaptiveWindows(int64_t in, int64_t out) {
  AxisWindows w;
  for (int64_t o = 0; o < out; ++o) {
    w.start.push_back(o * in / out);
    w.end.push_back(((o + 1) * in + out - 1) / out);
  }
  return w;
}

// The window in effect along D, H, W for input dims x: kernel k, stride s, padding before p0 and
// after p1 (global pooling overrides the attributes).
void Pool3DWindow(const AttributeMap& attrs, const DDim& x, int64_t k[3], int64_t s[3],
                  int64_t p0[3], int64_t p1[3]) {
  const auto& ksize = GetAttr<std::vector<int>>(attrs, "ksize");
  const auto& strides = GetAttr<std::vector<int>>(attrs, "strides");
  const auto& pads = GetAttr<std::vector<int>>(attrs, "paddings");
  const bool global = GetAttr<bool>(attrs, "global_pooling");
  for (int a = 0; a < 3; ++a) {
    k[a] = global ? x[2 + a] : ksize[a];
    s[a] = global ? 1 : strides[a];
    p0[a] = global ? 0 : PadBefore(pads, a);
    p1[a] = global ? 0 : PadAfter(pads, a);
  }
}

// Output extent along one axis (-1 when the input extent is unknown, 0 when empty).
int64_t Pool3DOutSize(int64_t in, int64_t k, int64_t p0, int64_t p1, int64_t s, bool ceil_mode) {
  if (in < 0) return -1;
  const int64_t span = in + p0 + p1 - k;
  if (span < 0) return 0;
  return (ceil_mode ? (span + s - 1) / s : span / s) + 1;
}

Status Pool3DInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() != 5) return ctx->Error(ctx->DescribeInput("X"), " must be 5-D [N, C, D, H, W]");
  const bool global = ctx->Attr<bool>("global_pooling");
  const bool ceil_mode = ctx->Attr<bool>("ceil_mode");
  int64_t k[3], s[3], p0[3], p1[3];
  Pool3DWindow(ctx->Attrs(), x, k, s, p0, p1);
  DDim out{x[0], x[1], -1, -1, -1};
  for (int a = 0; a < 3; ++a) {
    if (global) {
      out[2 + a] = 1;
      continue;
    }
    if (k[a] < 1) return ctx->Error("ksize[", a, "] must be >= 1, got ", k[a]);
    if (p0[a] >= k[a] || p1[a] >= k[a])
      return ctx->Error("the paddings of spatial dim ", a, " (", p0[a], ", ", p1[a],
                        ") must be smaller than ksize[", a, "] (", k[a], ")");
    const int64_t o = Pool3DOutSize(x[2 + a], k[a], p0[a], p1[a], s[a], ceil_mode);
    if (o == 0)
      return ctx->Error("spatial dim ", a,
                        " of the output would be empty: ", ctx->DescribeInput("X"), " padded by ",
                        p0[a], " and ", p1[a], " is ", x[2 + a] + p0[a] + p1[a],
                        " long, smaller than ksize[", a, "] = ", k[a]);
    out[2 + a] = o;
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Pool3DGeom MakePool3DGeom(const KernelContext& ctx, const DDim& x) {
  int64_t k[3], s[3], p0[3], p1[3];
  Pool3DWindow(ctx.Attrs(), x, k, s, p0, p1);
  const bool global = ctx.Attr<bool>("global_pooling");
  const bool ceil_mode = ctx.Attr<bool>("ceil_mode");
  Pool3DGeom g;
  g.planes = x[0] * x[1];
  for (int a = 0; a < 3; ++a) {
    g.in[a] = x[2 + a];
    g.out[a] = global ? 1 : Pool3DOutSize(g.in[a], k[a], p0[a], p1[a], s[a], ceil_mode);
    g.axis[a] = SlidingWindows(g.in[a], g.out[a], k[a], s[a], p0[a]);
  }
  g.max = ctx.Attr<std::string>("pooling_type") == "max";
  g.fixed_divisor = ctx.Attr<bool>("exclusive") ? 0 : k[0] * k[1] * k[2];
  return g;
}

// Adaptive pooling of rank 2 (X [N, C, H, W]) or 3 (X [N, C, D, H, W]).
Status AdaptivePoolInferShape(InferShapeContext* ctx, int rank) {
  DDim x = ctx->InputDim("X");
  if (x.size() != rank + 2) return ctx->Error(ctx->DescribeInput("X"), " must be ", rank + 2, "-D");
  const auto& size = ctx->Attr<std::vector<int>>("pool_size");
  if (static_cast<int>(size.size()) != rank)
    return ctx->Error("pool_size must hold ", rank, " values, got ", nn::IntsToString(size));
  for (int v : size)
    if (v < 1) return ctx->Error("pool_size values must be >= 1, got ", nn::IntsToString(size));
  DDim out = x;
  for (int a = 0; a < rank; ++a) out[2 + a] = size[a];
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  if (ctx->HasOutput("Mask")) {
    if (ctx->Attr<std::string>("pooling_type") != "max")
      return ctx->Error("output Mask (the argmax) needs pooling_type 'max'");
    ctx->SetOutputDim("Mask", out);
    ctx->SetOutputDtype("Mask", proto::INT32);
  }
  return Status::OK();
}

Pool3DGeom MakeAdaptiveGeom(const KernelContext& ctx, const DDim& x) {
  const int rank = x.size() - 2;
  const auto& size = ctx.Attr<std::vector<int>>("pool_size");
  Pool3DGeom g;
  g.planes = x[0] * x[1];
  for (int a = 0; a < 3; ++a) {
    const int skip = 3 - rank;
    g.in[a] = a < skip ? 1 : x[2 + a - skip];
    g.out[a] = a < skip ? 1 : size[a - skip];
    g.axis[a] = AdaptiveWindows(g.in[a], g.out[a]);
  }
  g.max = ctx.Attr<std::string>("pooling_type") == "max";
  g.fixed_divisor = 0;
  return g;
}

// Calls f(out_index, d0, d1, h0, h1, w0, w1) for every output element of one plane.
template <typename F>
void ForEachWindow(const Pool3DGeom& g, F&& f) {
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow = 0; ow < g.out[2]; ++ow)
        f((od * g.out[1] + oh) * g.out[2] + ow, g.axis[0].start[od], g.axis[0].end[od],
          g.axis[1].start[oh], g.axis[1].end[oh], g.axis[2].start[ow], g.axis[2].end[ow]);
}

int64_t PlanesPerRange(const Pool3DGeom& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(g.in[0] * g.in[1] * g.in[2], 1));
}

// mask (may be null; max only): the offset in its plane of the element each output took.
template <typename T>
void PoolForward(const Pool3DGeom& g, const T* x, T* out, int32_t* mask) {
  const int64_t in_sp = g.in[0] * g.in[1] * g.in[2], out_sp = g.out[0] * g.out[1] * g.out[2];
  ParallelFor(g.planes, PlanesPerRange(g), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * in_sp;
      T* op = out + pl * out_sp;
      ForEachWindow(g, [&](int64_t o, int64_t d0, int64_t d1, int64_t h0, int64_t h1, int64_t w0,
                           int64_t w1) {
        T acc = g.max ? std::numeric_limits<T>::lowest() : T(0);
        int64_t count = 0, at = -1;
        for (int64_t d = d0; d < d1; ++d)
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const int64_t i = (d * g.in[1] + h) * g.in[2] + w;
              const T v = xp[i];
              if (g.max && (at < 0 || acc < v)) at = i;
              acc = g.max ? std::max(acc, v) : acc + v;
              ++count;
            }
        if (mask) mask[pl * out_sp + o] = static_cast<int32_t>(at);
        if (count == 0)
          acc = T(0);  // a window entirely in the padding (ceil_mode)
        else if (!g.max)
          acc /= static_cast<T>(g.fixed_divisor > 0 ? g.fixed_divisor : count);
        op[o] = acc;
      });
    }
  });
}

template <typename T>
void PoolBackward(const Pool3DGeom& g, const T* x, const T* out, const T* dout, T* dx) {
  const int64_t in_sp = g.in[0] * g.in[1] * g.in[2], out_sp = g.out[0] * g.out[1] * g.out[2];
  ParallelFor(g.planes, PlanesPerRange(g), [&](int64_t p0, int64_t p1) {
    std::fill(dx + p0 * in_sp, dx + p1 * in_sp, T(0));
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * in_sp;
      T* dxp = dx + pl * in_sp;
      ForEachWindow(g, [&](int64_t o, int64_t d0, int64_t d1, int64_t h0, int64_t h1, int64_t w0,
                           int64_t w1) {
        const int64_t count = std::max<int64_t>(d1 - d0, 0) * std::max<int64_t>(h1 - h0, 0) *
                              std::max<int64_t>(w1 - w0, 0);
        if (count == 0) return;
        const T gv = dout[pl * out_sp + o];
        if (g.max) {
          const T target = out[pl * out_sp + o];
          for (int64_t d = d0; d < d1; ++d)
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) {
                const int64_t i = (d * g.in[1] + h) * g.in[2] + w;
                if (xp[i] == target) {
                  dxp[i] += gv;
                  return;
                }
              }
          return;
        }
        const T share = gv / static_cast<T>(g.fixed_divisor > 0 ? g.fixed_divisor : count);
        for (int64_t d = d0; d < d1; ++d)
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) dxp[(d * g.in[1] + h) * g.in[2] + w] += share;
      });
    }
  });
}

// kMask: the op has the optional Mask output (the adaptive poolings).
template <typename T, Pool3DGeom (*kGeom)(const KernelContext&, const DDim&), bool kMask>
Status PoolKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  Pool3DGeom g = kGeom(ctx, xt.dims());
  Tensor* mask = kMask ? ctx.OutputOrNull("Mask") : nullptr;
  PoolForward(g, xt.data<T>(), ctx.Output("Out")->mutable_data<T>(ctx.place()),
              mask ? mask->mutable_data<int32_t>(ctx.place()) : nullptr);
  return Status::OK();
}

template <typename T, Pool3DGeom (*kGeom)(const KernelContext&, const DDim&)>
Status PoolGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  Pool3DGeom g = kGeom(ctx, xt.dims());
  PoolBackward(g, xt.data<T>(), ctx.Input("Out").data<T>(), ctx.Input("Out@GRAD").data<T>(),
               dxt->mutable_data<T>(ctx.place()));
  return Status::OK();
}

Status PoolGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("X", "X@GRAD");
  return Status::OK();
}

std::vector<proto::OpDesc> PoolGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Out", "Out@GRAD"}, {"X"})};
}

Status AdaptivePool2DInferShape(InferShapeContext* ctx) { return AdaptivePoolInferShape(ctx, 2); }
Status AdaptivePool3DInferShape(InferShapeContext* ctx) { return AdaptivePoolInferShape(ctx, 3); }

}  // namespace

LOOM_REGISTER_OP(pool3d)
    .Doc(
        "Out = max or average over sliding windows of the D, H and W axes of X [N, C, D, H, W]; "
        "Out is [N, C, Do, Ho, Wo], Do = (D + the padding before and after - ksize[0]) / "
        "strides[0] + 1 "
        "(rounded up with ceil_mode).")
    .Input("X", "input [N, C, D, H, W]")
    .Output("Out", "pooled [N, C, Do, Ho, Wo]")
    .Attr<std::string>("pooling_type", "max", "'max' or 'avg'", nn::OneOf({"max", "avg"}))
    .Attr<std::vector<int>>("ksize", {1, 1, 1},
                            "window size along D, H and W (any value with global_pooling)",
                            nn::IntsOfSize(3))
    .Attr<std::vector<int>>("strides", {1, 1, 1}, "stride along D, H and W", nn::IntsOf(3, 1))
    .Attr<std::vector<int>>("paddings", {0, 0, 0},
                            "padding on each side of D, H and W, or [before, after] of each",
                            Pads3D())
    .Attr<bool>("global_pooling", false,
                "pool each whole volume (ignores ksize, strides and paddings)")
    .Attr<bool>("ceil_mode", false, "round the output size up instead of down")
    .Attr<bool>("exclusive", true,
                "avg divides by the window volume inside the input instead of kd * kh * kw")
    .InferShape(Pool3DInferShape)
    .GradMaker(PoolGradMaker)
    .Kernel(Place::kCPU, proto::FP32, PoolKernel<float, MakePool3DGeom, false>)
    .Kernel(Place::kCPU, proto::FP64, PoolKernel<double, MakePool3DGeom, false>);

LOOM_REGISTER_OP(pool3d_grad)
    .Doc("X@GRAD of pool3d: max routes Out@GRAD to the selected element, avg spreads it.")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("pool3d")
    .InferShape(PoolGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, PoolGradKernel<float, MakePool3DGeom>)
    .Kernel(Place::kCPU, proto::FP64, PoolGradKernel<double, MakePool3DGeom>);

LOOM_REGISTER_OP(adaptive_pool2d)
    .Doc(
        "Out [N, C, pool_size[0], pool_size[1]] = max or average of X [N, C, H, W] over windows "
        "[floor(o * H / Ho), ceil((o + 1) * H / Ho)) per axis.")
    .Input("X", "input [N, C, H, W]")
    .Output("Out", "pooled [N, C, Ho, Wo]")
    .Output("Mask", "int32, Out's dims: the offset in its input plane of the element each max took",
            false, true)
    .Attr<std::string>("pooling_type", "max", "'max' or 'avg'", nn::OneOf({"max", "avg"}))
    .RequiredAttr<std::vector<int>>("pool_size", "output [Ho, Wo]")
    .InferShape(AdaptivePool2DInferShape)
    .GradMaker(PoolGradMaker)
    .Kernel(Place::kCPU, proto::FP32, PoolKernel<float, MakeAdaptiveGeom, true>)
    .Kernel(Place::kCPU, proto::FP64, PoolKernel<double, MakeAdaptiveGeom, true>);

LOOM_REGISTER_OP(adaptive_pool2d_grad)
    .Doc("X@GRAD of adaptive_pool2d.")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("adaptive_pool2d")
    .InferShape(PoolGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, PoolGradKernel<float, MakeAdaptiveGeom>)
    .Kernel(Place::kCPU, proto::FP64, PoolGradKernel<double, MakeAdaptiveGeom>);

LOOM_REGISTER_OP(adaptive_pool3d)
    .Doc(
        "Out [N, C, Do, Ho, Wo] (pool_size) = max or average of X [N, C, D, H, W] over windows "
        "[floor(o * D / Do), ceil((o + 1) * D / Do)) per axis.")
    .Input("X", "input [N, C, D, H, W]")
    .Output("Out", "pooled [N, C, Do, Ho, Wo]")
    .Output("Mask", "int32, Out's dims: the offset in its input plane of the element each max took",
            false, true)
    .Attr<std::string>("pooling_type", "max", "'max' or 'avg'", nn::OneOf({"max", "avg"}))
    .RequiredAttr<std::vector<int>>("pool_size", "output [Do, Ho, Wo]")
    .InferShape(AdaptivePool3DInferShape)
    .GradMaker(PoolGradMaker)
    .Kernel(Place::kCPU, proto::FP32, PoolKernel<float, MakeAdaptiveGeom, true>)
    .Kernel(Place::kCPU, proto::FP64, PoolKernel<double, MakeAdaptiveGeom, true>);

LOOM_REGISTER_OP(adaptive_pool3d_grad)
    .Doc("X@GRAD of adaptive_pool3d.")
    .Input("X", "forward input")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("adaptive_pool3d")
    .InferShape(PoolGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, PoolGradKernel<float, MakeAdaptiveGeom>)
    .Kernel(Place::kCPU, proto::FP64, PoolGradKernel<double, MakeAdaptiveGeom>);

}  // namespace loom::ops
