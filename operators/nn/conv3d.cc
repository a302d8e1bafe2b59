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

// The convolutions run as GEMMs over column buffers, per (sample, group) and per chunk of output
// positions [p0, p1): col[(cc * kd + i) * kh * kw + ...][p - p0] = x[cc][the input position that
// kernel offset (i, j, l) puts under output position p] (0 outside), so that the group's outputs
// at those positions are w_group [mg, cg * kv] · col. Chunks keep a buffer within kColBudget
// elements, however large the volume.
constexpr int64_t kColBudget = int64_t{1} << 22;

int64_t PositionsPerChunk(const Conv3DGeom& g) {
  const int64_t rows = std::max<int64_t>(g.cg * g.KVolume(), 1);
  return std::clamp<int64_t>(kColBudget / rows, 1, std::max<int64_t>(g.OutVolume(), 1));
}

// Calls f(row of col, offset of x in its channel or -1) for every column entry of positions
// [p0, p1), row by row.
template <typename F>
void ForEachColumnEntry(const Conv3DGeom& g, int64_t p0, int64_t p1, F&& f) {
  const int64_t np = p1 - p0, plane = g.out[1] * g.out[2], iv = g.InVolume();
  const int64_t od0 = p0 / plane, oh0 = (p0 / g.out[2]) % g.out[1], ow0 = p0 % g.out[2];
  for (int64_t cc = 0; cc < g.cg; ++cc)
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t row = ((cc * g.k[0] + kd) * g.k[1] + kh) * g.k[2] + kw;
          const int64_t d_off = kd * g.dil[0] - g.p[0], h_off = kh * g.dil[1] - g.p[1];
          const int64_t w_off = kw * g.dil[2] - g.p[2];
          int64_t od = od0, oh = oh0, ow = ow0;  // walks the positions p0, p0 + 1, ...
          for (int64_t c = 0; c < np; ++c) {
            const int64_t id = od * g.s[0] + d_off, ih = oh * g.s[1] + h_off;
            const int64_t iw = ow * g.s[2] + w_off;
            const bool inside =
                id >= 0 && id < g.in[0] && ih >= 0 && ih < g.in[1] && iw >= 0 && iw < g.in[2];
            f(row * np + c, inside ? cc * iv + (id * g.in[1] + ih) * g.in[2] + iw : -1);
            if (++ow == g.out[2]) {
              ow = 0;
              if (++oh == g.out[1]) oh = 0, ++od;
            }
          }
        }
}

// col = the columns of positions [p0, p1) of the cg channels starting at x.
template <typename T>
void Vol2Col(const Conv3DGeom& g, const T* x, int64_t p0, int64_t p1, T* col) {
  ForEachColumnEntry(g, p0, p1, [&](int64_t c, int64_t i) { col[c] = i >= 0 ? x[i] : T(0); });
}

// dx (the cg channels starting there) += the adjoint of Vol2Col applied to col.
template <typename T>
void Col2VolAdd(const Conv3DGeom& g, const T* col, int64_t p0, int64_t p1, T* dx) {
  ForEachColumnEntry(g, p0, p1, [&](int64_t c, int64_t i) {
    if (i >= 0) dx[i] += col[c];
  });
}

// Buffers of one chunk: the columns and the group's rows of y (or dy) at the chunk's positions.
template <typename T>
struct ChunkBuffers {
  std::vector<T> col, rows;
  explicit ChunkBuffers(const Conv3DGeom& g, int64_t chunk)
      : col(g.cg * g.KVolume() * chunk), rows(g.mg * chunk) {}
};

// Calls f(sample, group, p0, p1, buffers) for every (sample, group, chunk) in turn: the GEMMs
// use BLAS's own threads (as conv2d's do), so no GEMM is issued from inside a ParallelFor.
template <typename T, typename F>
void ForEachChunk(const Conv3DGeom& g, F&& f) {
  const int64_t ov = g.OutVolume(), chunk = PositionsPerChunk(g);
  ChunkBuffers<T> buf(g, chunk);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t grp = 0; grp < g.groups; ++grp)
      for (int64_t p0 = 0; p0 < ov; p0 += chunk) f(b, grp, p0, std::min(p0 + chunk, ov), &buf);
}

// rows[r][p - p0] <-> y[r][p] for the mg rows of y starting at y (ov apart).
template <typename T>
void GatherRows(const T* y, int64_t mg, int64_t ov, int64_t p0, int64_t p1, T* rows) {
  for (int64_t r = 0; r < mg; ++r)
    std::copy(y + r * ov + p0, y + r * ov + p1, rows + r * (p1 - p0));
}

template <typename T>
void ScatterRows(const T* rows, int64_t mg, int64_t ov, int64_t p0, int64_t p1, T* y) {
  for (int64_t r = 0; r < mg; ++r)
    std::copy(rows + r * (p1 - p0), rows + (r + 1) * (p1 - p0), y + r * ov + p0);
}

// y = conv(x, w).
template <typename T>
void Conv3DForward(const Conv3DGeom& g, const T* x, const T* w, T* y) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  ForEachChunk<T>(g, [&](int64_t b, int64_t grp, int64_t p0, int64_t p1, ChunkBuffers<T>* buf) {
    Vol2Col(g, x + (b * g.c + grp * g.cg) * iv, p0, p1, buf->col.data());
    Gemm(false, false, g.mg, p1 - p0, k, w + grp * g.mg * k, buf->col.data(), buf->rows.data());
    ScatterRows(buf->rows.data(), g.mg, ov, p0, p1, y + (b * g.m + grp * g.mg) * ov);
  });
}

// dx = the input gradient of y = conv(x, w) for y's gradient dy.
template <typename T>
void Conv3DBackwardData(const Conv3DGeom& g, const T* dy, const T* w, T* dx) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  std::fill(dx, dx + g.n * g.c * iv, T(0));
  ForEachChunk<T>(g, [&](int64_t b, int64_t grp, int64_t p0, int64_t p1, ChunkBuffers<T>* buf) {
    GatherRows(dy + (b * g.m + grp * g.mg) * ov, g.mg, ov, p0, p1, buf->rows.data());
    Gemm(true, false, k, p1 - p0, g.mg, w + grp * g.mg * k, buf->rows.data(), buf->col.data());
    Col2VolAdd(g, buf->col.data(), p0, p1, dx + (b * g.c + grp * g.cg) * iv);
  });
}

// dw = the filter gradient of y = conv(x, w) for y's gradient dy (a sum over samples and chunks).
template <typename T>
void Conv3DBackwardFilter(const Conv3DGeom& g, const T* x, const T* dy, T* dw) {
  const int64_t iv = g.InVolume(), ov = g.OutVolume(), k = g.cg * g.KVolume();
  std::fill(dw, dw + g.m * k, T(0));
  ForEachChunk<T>(g, [&](int64_t b, int64_t grp, int64_t p0, int64_t p1, ChunkBuffers<T>* buf) {
    Vol2Col(g, x + (b * g.c + grp * g.cg) * iv, p0, p1, buf->col.data());
    GatherRows(dy + (b * g.m + grp * g.mg) * ov, g.mg, ov, p0, p1, buf->rows.data());
    Gemm(false, true, g.mg, k, p1 - p0, buf->rows.data(), buf->col.data(), dw + grp * g.mg * k,
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
