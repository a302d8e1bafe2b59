// conv3d and conv3d_transpose on NCDHW volumes; on the CPU a column buffer (vol2col) and GEMMs.
// conv3d: Output [N, M, Do, Ho, Wo] with Output[n, m, o] = sum over the input channels c of m's
// group and the kernel offsets k of Input[n, c, o * s - p + k * dil] * Filter[m, c, k] (zero
// outside the input); Do = (D + 2 p - dil (kd - 1) - 1) / s + 1 per axis.
// conv3d_transpose is the input gradient of the conv3d whose input is the transpose's output
// (Filter [C, M / groups, kd, kh, kw]), so the three kernels below (forward, data gradient,
// filter gradient) serve both ops.
#include <algorithm>
#include <vector>

#include "operators/nn/nn_util.h"
#include "operators/nn/pads3d.h"

namespace loom::ops {
namespace {

// A conv3d whose input x is [n, c, in...] and output y is [n, m, out...], filter [m, c / groups,
// k...].
struct Conv3DGeom {
  int64_t n, c, m, groups, cg, mg;
  int64_t in[3], out[3], k[3], s[3], p[3], dil[3];
  int64_t InVolume() const { return in[0] * in[1] * in[2]; }
  int64_t OutVolume() const { return out[0] * out[1] * out[2]; }
  int64_t KVolume() const { return k[0] * k[1] * k[2]; }
};

// pads: the padding before plus the padding after.
int64_t ConvOutSize(int64_t in, int64_t k, int64_t pads, int64_t s, int64_t dil) {
  if (in < 0) return -1;
  return (in + pads - dil * (k - 1) - 1) / s + 1;
}

int64_t TransposeOutSize(int64_t in, int64_t k, int64_t pads, int64_t s, int64_t dil, int want) {
  if (in < 0) return -1;
  const int64_t o = (in - 1) * s - pads + dil * (k - 1) + 1;
  return want > 0 ? want : o;
}

// Calls f(x_offset_in_plane, y_offset_in_plane, k_offset) for every (output, kernel) pair whose
// input position lies inside the input.
template <typename F>
void ForEachTap(const Conv3DGeom& g, F&& f) {
  for (int64_t kd = 0; kd < g.k[0]; ++kd)
    for (int64_t kh = 0; kh < g.k[1]; ++kh)
      for (int64_t kw = 0; kw < g.k[2]; ++kw) {
        const int64_t ko = (kd * g.k[1] + kh) * g.k[2] + kw;
        for (int64_t od = 0; od < g.out[0]; ++od) {
          const int64_t id = od * g.s[0] - g.p[0] + kd * g.dil[0];
          if (id < 0 || id >= g.in[0]) continue;
          for (int64_t oh = 0; oh < g.out[1]; ++oh) {
            const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.dil[1];
            if (ih < 0 || ih >= g.in[1]) continue;
            for (int64_t ow = 0; ow < g.out[2]; ++ow) {
              const int64_t iw = ow * g.s[2] - g.p[2] + kw * g.dil[2];
              if (iw < 0 || iw >= g.in[2]) continue;
              f((id * g.in[1] + ih) * g.in[2] + iw, (od * g.out[1] + oh) * g.out[2] + ow, ko);
            }
          }
        }
      }
}

// The convolutions run as GEMMs over a column buffer per (sample, group):
// col[cc * kv + k][o] = x[cc][input position of output o under kernel offset k] (0 outside), a
// [cg * kv, ov] matrix, so that y_group [mg, ov] = w_group [mg, cg * kv] · col.

// col = the columns of the cg channels starting at x.
template <typename T>
void Vol2Col(const Conv3DGeom& g, const T* x, T* col) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), kv = g.KVolume();
  std::fill(col, col + g.cg * kv * ov, T(0));
  for (int64_t cc = 0; cc < g.cg; ++cc) {
    const T* xp = x + cc * iv;
    T* cp = col + cc * kv * ov;
    ForEachTap(g, [&](int64_t xi, int64_t yi, int64_t ki) { cp[ki * ov + yi] = xp[xi]; });
  }
}

// dx (the cg channels starting there) += the adjoint of Vol2Col applied to col.
template <typename T>
void Col2VolAdd(const Conv3DGeom& g, const T* col, T* dx) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), kv = g.KVolume();
  for (int64_t cc = 0; cc < g.cg; ++cc) {
    T* dxp = dx + cc * iv;
    const T* cp = col + cc * kv * ov;
    ForEachTap(g, [&](int64_t xi, int64_t yi, int64_t ki) { dxp[xi] += cp[ki * ov + yi]; });
  }
}

// Calls f(sample, group, col buffer) for every (sample, group) in turn: the GEMMs use BLAS's own
// threads (as conv2d's do), so no GEMM is issued from inside a ParallelFor.
template <typename T, typename F>
void ForEachSampleGroup(const Conv3DGeom& g, F&& f) {
  std::vector<T> col(g.cg * g.KVolume() * g.OutVolume());
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t grp = 0; grp < g.groups; ++grp) f(b, grp, col.data());
}

// y = conv(x, w).
template <typename T>
void Conv3DForward(const Conv3DGeom& g, const T* x, const T* w, T* y) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  ForEachSampleGroup<T>(g, [&](int64_t b, int64_t grp, T* col) {
    Vol2Col(g, x + (b * g.c + grp * g.cg) * iv, col);
    Gemm(false, false, g.mg, ov, k, w + grp * g.mg * k, col, y + (b * g.m + grp * g.mg) * ov);
  });
}

// dx = the input gradient of y = conv(x, w) for y's gradient dy.
template <typename T>
void Conv3DBackwardData(const Conv3DGeom& g, const T* dy, const T* w, T* dx) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  std::fill(dx, dx + g.n * g.c * iv, T(0));
  ForEachSampleGroup<T>(g, [&](int64_t b, int64_t grp, T* col) {
    Gemm(true, false, k, ov, g.mg, w + grp * g.mg * k, dy + (b * g.m + grp * g.mg) * ov, col);
    Col2VolAdd(g, col, dx + (b * g.c + grp * g.cg) * iv);
  });
}

// dw = the filter gradient of y = conv(x, w) for y's gradient dy (a sum over the samples).
template <typename T>
void Conv3DBackwardFilter(const Conv3DGeom& g, const T* x, const T* dy, T* dw) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  std::fill(dw, dw + g.m * k, T(0));
  ForEachSampleGroup<T>(g, [&](int64_t b, int64_t grp, T* col) {
    Vol2Col(g, x + (b * g.c + grp * g.cg) * iv, col);
    Gemm(false, true, g.mg, k, ov, dy + (b * g.m + grp * g.mg) * ov, col, dw + grp * g.mg * k,
         true);
  });
}

struct ConvAttrs {
  const std::vector<int>& strides;
  const std::vector<int>& paddings;  // 3 or 6 values (operators/nn/pads3d.h)
  const std::vector<int>& dilations;
  int groups;
  int64_t PadSum(int axis) const { return PadBefore(paddings, axis) + PadAfter(paddings, axis); }
};

template <typename Ctx>
ConvAttrs ReadConvAttrs(const Ctx& ctx) {
  return ConvAttrs{ctx.template Attr<std::vector<int>>("strides"),
                   ctx.template Attr<std::vector<int>>("paddings"),
                   ctx.template Attr<std::vector<int>>("dilations"),
                   ctx.template Attr<int>("groups")};
}

Status Conv3DInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), f = ctx->InputDim("Filter");
  if (in.size() != 5)
    return ctx->Error(ctx->DescribeInput("Input"), " must be 5-D [N, C, D, H, W]");
  if (f.size() != 5)
    return ctx->Error(ctx->DescribeInput("Filter"), " must be 5-D [M, C / groups, kd, kh, kw]");
  if (ctx->InputDtype("Input") != ctx->InputDtype("Filter"))
    return ctx->Error(ctx->DescribeInput("Input"), " and ", ctx->DescribeInput("Filter"),
                      " differ in dtype");
  ConvAttrs a = ReadConvAttrs(*ctx);
  if (in[1] >= 0 && in[1] % a.groups != 0)
    return ctx->Error("the channels (", in[1], ") of ", ctx->DescribeInput("Input"),
                      " are not divisible by groups (", a.groups, ")");
  if (in[1] >= 0 && f[1] >= 0 && in[1] / a.groups != f[1])
    return ctx->Error("channel mismatch: ", ctx->DescribeInput("Input"), " has ", in[1],
                      " channels, but ", ctx->DescribeInput("Filter"), " expects ", f[1],
                      " per group x ", a.groups, " groups");
  if (f[0] >= 0 && f[0] % a.groups != 0)
    return ctx->Error("the output channels (", f[0], ") of ", ctx->DescribeInput("Filter"),
                      " are not divisible by groups (", a.groups, ")");
  DDim out{in[0], f[0], -1, -1, -1};
  for (int ax = 0; ax < 3; ++ax) {
    const int64_t o =
        ConvOutSize(in[2 + ax], f[2 + ax], a.PadSum(ax), a.strides[ax], a.dilations[ax]);
    if (in[2 + ax] >= 0 && o < 1)
      return ctx->Error(
          "spatial dim ", ax, " of the output would be empty: ", ctx->DescribeInput("Input"),
          " padded by ", a.PadSum(ax), " is ", in[2 + ax] + a.PadSum(ax),
          " long, less than the dilated kernel ", a.dilations[ax] * (f[2 + ax] - 1) + 1, " of ",
          ctx->DescribeInput("Filter"));
    out[2 + ax] = o;
  }
  ctx->SetOutputDim("Output", out);
  ctx->SetOutputDtype("Output", ctx->InputDtype("Input"));
  return Status::OK();
}

Conv3DGeom MakeConvGeom(const KernelContext& ctx, const DDim& in, const DDim& f) {
  ConvAttrs a = ReadConvAttrs(ctx);
  Conv3DGeom g;
  g.n = in[0], g.c = in[1], g.m = f[0], g.groups = a.groups;
  g.cg = g.c / g.groups, g.mg = g.m / g.groups;
  for (int ax = 0; ax < 3; ++ax) {
    g.in[ax] = in[2 + ax], g.k[ax] = f[2 + ax];
    g.s[ax] = a.strides[ax], g.p[ax] = PadBefore(a.paddings, ax), g.dil[ax] = a.dilations[ax];
    g.out[ax] = ConvOutSize(g.in[ax], g.k[ax], a.PadSum(ax), g.s[ax], g.dil[ax]);
  }
  return g;
}

template <typename T>
Status Conv3DKernel(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Conv3DGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  Conv3DForward(g, input.data<T>(), filter.data<T>(),
                ctx.Output("Output")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

template <typename T>
Status Conv3DGradKernel(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  Conv3DGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  if (dinput) Conv3DBackwardData(g, dout, filter.data<T>(), dinput->mutable_data<T>(ctx.place()));
  if (dfilter)
    Conv3DBackwardFilter(g, input.data<T>(), dout, dfilter->mutable_data<T>(ctx.place()));
  return Status::OK();
}

Status Conv3DTransposeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), f = ctx->InputDim("Filter");
  if (in.size() != 5)
    return ctx->Error(ctx->DescribeInput("Input"), " must be 5-D [N, C, D, H, W]");
  if (f.size() != 5)
    return ctx->Error(ctx->DescribeInput("Filter"), " must be 5-D [C, M / groups, kd, kh, kw]");
  if (ctx->InputDtype("Input") != ctx->InputDtype("Filter"))
    return ctx->Error(ctx->DescribeInput("Input"), " and ", ctx->DescribeInput("Filter"),
                      " differ in dtype");
  ConvAttrs a = ReadConvAttrs(*ctx);
  const auto& want = ctx->Attr<std::vector<int>>("output_size");
  if (in[1] >= 0 && f[0] >= 0 && in[1] != f[0])
    return ctx->Error("channel mismatch: ", ctx->DescribeInput("Input"), " has ", in[1],
                      " channels, ", ctx->DescribeInput("Filter"), " expects ", f[0]);
  if (in[1] >= 0 && in[1] % a.groups != 0)
    return ctx->Error("the channels (", in[1], ") of ", ctx->DescribeInput("Input"),
                      " are not divisible by groups (", a.groups, ")");
  if (!want.empty() && want.size() != 3)
    return ctx->Error("output_size must be empty or [depth, height, width], got ",
                      nn::IntsToString(want));
  DDim out{in[0], f[1] >= 0 ? f[1] * a.groups : -1, -1, -1, -1};
  for (int ax = 0; ax < 3; ++ax) {
    const int w = want.empty() ? 0 : want[ax];
    const int64_t o =
        TransposeOutSize(in[2 + ax], f[2 + ax], a.PadSum(ax), a.strides[ax], a.dilations[ax], 0);
    if (o >= 0 && o < 1)
      return ctx->Error("spatial dim ", ax, " of the output would be ", o, " (input ", in[2 + ax],
                        ", kernel ", f[2 + ax], ", padding ", a.PadSum(ax), " in all)");
    if (o >= 0 && w > 0 && (w < o || w >= o + a.strides[ax]))
      return ctx->Error("output_size[", ax, "] = ", w, " is not in [", o, ", ", o + a.strides[ax],
                        ") for ", ctx->DescribeInput("Input"), " and ",
                        ctx->DescribeInput("Filter"), " (stride ", a.strides[ax], ")");
    out[2 + ax] =
        TransposeOutSize(in[2 + ax], f[2 + ax], a.PadSum(ax), a.strides[ax], a.dilations[ax], w);
  }
  ctx->SetOutputDim("Output", out);
  ctx->SetOutputDtype("Output", ctx->InputDtype("Input"));
  return Status::OK();
}

// The conv3d whose input gradient is this transpose: its x is the transpose's Output, its y the
// transpose's Input.
Conv3DGeom MakeTransposeGeom(const KernelContext& ctx, const DDim& in, const DDim& f) {
  ConvAttrs a = ReadConvAttrs(ctx);
  const auto& want = ctx.Attr<std::vector<int>>("output_size");
  Conv3DGeom g;
  g.groups = a.groups;
  g.n = in[0], g.m = in[1], g.c = f[1] * a.groups;
  g.cg = g.c / g.groups, g.mg = g.m / g.groups;
  for (int ax = 0; ax < 3; ++ax) {
    g.k[ax] = f[2 + ax];
    g.s[ax] = a.strides[ax], g.p[ax] = PadBefore(a.paddings, ax), g.dil[ax] = a.dilations[ax];
    g.out[ax] = in[2 + ax];
    g.in[ax] = TransposeOutSize(in[2 + ax], g.k[ax], a.PadSum(ax), g.s[ax], g.dil[ax],
                                want.empty() ? 0 : want[ax]);
  }
  return g;
}

template <typename T>
Status Conv3DTransposeKernel(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  Conv3DGeom g = MakeTransposeGeom(ctx, input.dims(), filter.dims());
  Conv3DBackwardData(g, input.data<T>(), filter.data<T>(),
                     ctx.Output("Output")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

template <typename T>
Status Conv3DTransposeGradKernel(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  Conv3DGeom g = MakeTransposeGeom(ctx, input.dims(), filter.dims());
  if (dinput) Conv3DForward(g, dout, filter.data<T>(), dinput->mutable_data<T>(ctx.place()));
  if (dfilter)
    Conv3DBackwardFilter(g, dout, input.data<T>(), dfilter->mutable_data<T>(ctx.place()));
  return Status::OK();
}

Status ConvGradInferShape(InferShapeContext* ctx) { return GradInferShape(ctx); }

std::vector<proto::OpDesc> ConvGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Input", "Filter", "Output@GRAD"}, {"Input", "Filter"})};
}

}  // namespace

LOOM_REGISTER_OP(conv3d)
    .Doc(
        "Output [N, M, Do, Ho, Wo] = the grouped, dilated 3-D convolution of Input [N, C, D, H, "
        "W] with Filter [M, C / groups, kd, kh, kw]; Do = (D + the padding before and after - "
        "dilations[0] * "
        "(kd - 1) - 1) / strides[0] + 1.")
    .Input("Input", "input volumes [N, C, D, H, W]")
    .Input("Filter", "filters [M, C / groups, kd, kh, kw]")
    .Output("Output", "output feature volumes [N, M, Do, Ho, Wo]")
    .Attr<std::vector<int>>("strides", {1, 1, 1}, "stride along D, H and W", nn::IntsOf(3, 1))
    .Attr<std::vector<int>>("paddings", {0, 0, 0},
                            "zero padding on each side of D, H and W, or [before, after] of each",
                            Pads3D())
    .Attr<std::vector<int>>("dilations", {1, 1, 1}, "kernel dilation along D, H and W",
                            nn::IntsOf(3, 1))
    .Attr<int>("groups", 1, "channel groups; input and output channels split evenly",
               [](const int& v) {
                 return v >= 1 ? Status::OK() : InvalidArgument("must be >= 1, got ", v);
               })
    .InferShape(Conv3DInferShape)
    .GradMaker(ConvGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Conv3DKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv3DKernel<double>);

LOOM_REGISTER_OP(conv3d_grad)
    .Doc("Input@GRAD and Filter@GRAD of conv3d.")
    .Input("Input", "forward Input")
    .Input("Filter", "forward Filter")
    .Input("Output@GRAD", "gradient of Output")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .AttrsFrom("conv3d")
    .InferShape(ConvGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Conv3DGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv3DGradKernel<double>);

LOOM_REGISTER_OP(conv3d_transpose)
    .Doc(
        "Output [N, M, Do, Ho, Wo] = the transposed 3-D convolution (the input gradient of "
        "conv3d) of Input [N, C, D, H, W] with Filter [C, M / groups, kd, kh, kw]; Do = (D - 1) "
        "* strides[0] - the padding before and after + dilations[0] * (kd - 1) + 1, or "
        "output_size[0].")
    .Input("Input", "input volumes [N, C, D, H, W]")
    .Input("Filter", "filters [C, M / groups, kd, kh, kw]")
    .Output("Output", "output feature volumes [N, M, Do, Ho, Wo]")
    .Attr<std::vector<int>>("strides", {1, 1, 1}, "stride along D, H and W", nn::IntsOf(3, 1))
    .Attr<std::vector<int>>("paddings", {0, 0, 0},
                            "padding removed from each side of D, H and W, or [before, after] of "
                            "each",
                            Pads3D())
    .Attr<std::vector<int>>("dilations", {1, 1, 1}, "kernel dilation along D, H and W",
                            nn::IntsOf(3, 1))
    .Attr<int>("groups", 1, "channel groups",
               [](const int& v) {
                 return v >= 1 ? Status::OK() : InvalidArgument("must be >= 1, got ", v);
               })
    .Attr<std::vector<int>>("output_size", {},
                            "[Do, Ho, Wo] when larger than the computed size (by < stride)")
    .InferShape(Conv3DTransposeInferShape)
    .GradMaker(ConvGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Conv3DTransposeKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv3DTransposeKernel<double>);

LOOM_REGISTER_OP(conv3d_transpose_grad)
    .Doc("Input@GRAD and Filter@GRAD of conv3d_transpose.")
    .Input("Input", "forward Input")
    .Input("Filter", "forward Filter")
    .Input("Output@GRAD", "gradient of Output")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .AttrsFrom("conv3d_transpose")
    .InferShape(ConvGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Conv3DTransposeGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv3DTransposeGradKernel<double>);

}  // namespace loom::ops
