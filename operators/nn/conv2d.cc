// conv2d: 2-D convolution over NCHW inputs with strides, zero padding, dilation and groups.
// CPU kernels: fp32 runs the direct AVX2 kernels of conv2d_direct.h where they apply; the rest
// lowers chunks of samples to one GEMM per (chunk, group) over an im2col buffer.
#include <memory>
#include <type_traits>
#include <vector>

#include "framework/parallel.h"
#include "operators/nn/conv2d_direct.h"
#include "operators/nn/conv_geom.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

using nn::Gemm;

Status Conv2DInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), f = ctx->InputDim("Filter");
  if (in.size() != 4) return ctx->Error(ctx->DescribeInput("Input"), " must be 4-D [N, C, H, W]");
  if (f.size() != 4)
    return ctx->Error(ctx->DescribeInput("Filter"), " must be 4-D [M, C / groups, kh, kw]");
  if (ctx->InputDtype("Input") != ctx->InputDtype("Filter"))
    return ctx->Error(ctx->DescribeInput("Input"), " is ", DataTypeName(ctx->InputDtype("Input")),
                      " but ", ctx->DescribeInput("Filter"), " is ",
                      DataTypeName(ctx->InputDtype("Filter")));
  const auto& strides = ctx->Attr<std::vector<int>>("strides");
  const auto& pads = ctx->Attr<std::vector<int>>("paddings");
  const auto& dils = ctx->Attr<std::vector<int>>("dilations");
  int groups = ctx->Attr<int>("groups");
  if (in[1] >= 0 && in[1] % groups != 0)
    return ctx->Error("the channels (", in[1], ") of ", ctx->DescribeInput("Input"),
                      " are not divisible by groups (", groups, ")");
  if (in[1] >= 0 && f[1] >= 0 && in[1] != f[1] * groups)
    return ctx->Error("channel mismatch: ", ctx->DescribeInput("Input"), " has ", in[1],
                      " channels, but ", ctx->DescribeInput("Filter"), " expects ", f[1],
                      " per group x ", groups, " groups = ", f[1] * groups);
  if (f[0] >= 0 && f[0] % groups != 0)
    return ctx->Error("the output channels (", f[0], ") of ", ctx->DescribeInput("Filter"),
                      " are not divisible by groups (", groups, ")");
  DDim out{in[0], f[0], -1, -1};
  for (int a = 0; a < 2; ++a) {
    int64_t o = ConvOutSize(in[2 + a], f[2 + a], pads[a], strides[a], dils[a]);
    if (o == 0)
      return ctx->Error("output ", a == 0 ? "height" : "width",
                        " would be empty: ", ctx->DescribeInput("Input"), " padded by ", pads[a],
                        " on each side is ", in[2 + a] + 2 * pads[a],
                        " wide, smaller than the kernel extent ",
                        static_cast<int64_t>(dils[a]) * (f[2 + a] - 1) + 1, " of ",
                        ctx->DescribeInput("Filter"), " (dilation ", dils[a], ")");
    out[2 + a] = o;
  }
  ctx->SetOutputDim("Output", out);
  ctx->SetOutputDtype("Output", ctx->InputDtype("Input"));
  return Status::OK();
}

// Output columns [lo, hi) whose input column ow * sw - pw + j * dw lies inside [0, w).
inline void ValidCols(const ConvGeom& g, int64_t j, int64_t* lo, int64_t* hi) {
  int64_t off = j * g.dw - g.pw;  // iw = ow * sw + off
  int64_t a = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
  int64_t b = g.w - off <= 0 ? 0 : (g.w - off + g.sw - 1) / g.sw;
  *lo = std::min(a, g.wo);
  *hi = std::max(*lo, std::min(b, g.wo));
}

// col[(c * kh + i) * kw + j][oh * wo + ow] = x[c][oh * sh - ph + i * dh][ow * sw - pw + j * dw]
// (0 outside the image), for the cg channels starting at x; rows of col are ld apart, so the
// columns of several samples can sit side by side and share one GEMM.
template <typename T>
void Im2Col(const ConvGeom& g, const T* x, T* col, int64_t ld) {
  for (int64_t c = 0; c < g.cg; ++c) {
    const T* plane = x + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        int64_t lo, hi;
        ValidCols(g, j, &lo, &hi);
        const int64_t off = j * g.dw - g.pw;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * g.sh - g.ph + i * g.dh;
          T* dst = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.w + off;
          std::fill(dst, dst + lo, T(0));
          if (g.sw == 1) {
            std::copy(src + lo, src + hi, dst + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = src[ow * g.sw];
          }
          std::fill(dst + hi, dst + g.wo, T(0));
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds every column entry back onto the pixel it was read from.
template <typename T>
void Col2ImAdd(const ConvGeom& g, const T* col, int64_t ld, T* dx) {
  for (int64_t c = 0; c < g.cg; ++c) {
    T* plane = dx + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * ld;
        int64_t lo, hi;
        ValidCols(g, j, &lo, &hi);
        const int64_t off = j * g.dw - g.pw;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* src = row + oh * g.wo;
          T* dst = plane + ih * g.w + off;
          for (int64_t ow = lo; ow < hi; ++ow) dst[ow * g.sw] += src[ow];
        }
      }
    }
  }
}

// Samples per GEMM: enough for a wide GEMM, few enough that the column buffer stays in L3
// (measured on conv 32->64 5x5 14x14: 4 MiB buffers run ~2x faster than 16 MiB ones).
int64_t SamplesPerChunk(const ConvGeom& g) {
  constexpr int64_t kColBudget = int64_t{1} << 20;  // elements (4 MiB fp32)
  int64_t per_sample = std::max<int64_t>(g.K() * g.P(), 1);
  return std::clamp<int64_t>(kColBudget / per_sample, 1, std::max<int64_t>(g.n, 1));
}

// Samples are lowered in chunks: the columns of a chunk's samples sit side by side in one
// buffer [K, chunk * P], so each (chunk, group) is one wide GEMM on OpenBLAS's threads, and
// im2col / col2im and the reordering between [M, chunk * P] and [chunk, M, P] are split over
// samples on Loom's threads.
// out = conv(x, w) over geometry g.
template <typename T>
void ConvForward(const ConvGeom& g, const T* x, const T* w, T* out) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv_direct::SupportedForward(g)) {
      conv_direct::Forward(g, x, w, out);
      return;
    }
  }
  const int64_t k = g.K(), p = g.P(), chunk = SamplesPerChunk(g);
  // Uninitialized: every element is written before it is read.
  std::unique_ptr<T[]> col(new T[k * p * chunk]), prod(new T[g.mg * p * chunk]);
  for (int64_t s0 = 0; s0 < g.n; s0 += chunk) {
    const int64_t cs = std::min(chunk, g.n - s0), ld = cs * p;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      ParallelFor(cs, 1, [&](int64_t b, int64_t e) {
        for (int64_t s = b; s < e; ++s)
          Im2Col(g, x + ((s0 + s) * g.c + gi * g.cg) * g.h * g.w, col.get() + s * p, ld);
      });
      Gemm(false, false, g.mg, ld, k, w + gi * g.mg * k, col.get(), prod.get(), false);
      ParallelFor(cs, 1, [&](int64_t b, int64_t e) {
        for (int64_t s = b; s < e; ++s)
          for (int64_t r = 0; r < g.mg; ++r) {
            const T* src = prod.get() + r * ld + s * p;
            std::copy(src, src + p, out + ((s0 + s) * g.m + gi * g.mg + r) * p);
          }
      });
    }
  }
}

template <typename T>
Status Conv2DKernel(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  ConvForward(g, input.data<T>(), filter.data<T>(),
              ctx.Output("Output")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

// Input@GRAD = col2im(W_gᵀ · dOut_g); Filter@GRAD = Σ_samples dOut_g · im2col(x)ᵀ, both over
// chunks of samples as in the forward kernel.
// dx = conv's input gradient and dw = its filter gradient (either may be null) from dout,
// over geometry g (x is read only for dw).
template <typename T>
void ConvBackward(const ConvGeom& g, const T* x, const T* w, const T* dout, T* dx, T* dw) {
  const int64_t k = g.K(), p = g.P(), chunk = SamplesPerChunk(g);
  if constexpr (std::is_same_v<T, float>) {
    if (dx && conv_direct::SupportedInputGrad(g)) {
      conv_direct::InputGrad(g, dout, w, dx);
      dx = nullptr;
    }
    if (dw && conv_direct::SupportedFilterGrad(g)) {
      conv_direct::FilterGrad(g, x, dout, dw);
      dw = nullptr;
    }
    if (!dx && !dw) return;
  }
  if (dw) std::fill(dw, dw + g.m * k, T(0));
  if (dx && g.n * k * p == 0) std::fill(dx, dx + g.n * g.c * g.h * g.w, T(0));
  std::unique_ptr<T[]> col(new T[k * p * chunk]), dprod(new T[g.mg * p * chunk]);
  for (int64_t s0 = 0; s0 < g.n; s0 += chunk) {
    const int64_t cs = std::min(chunk, g.n - s0), ld = cs * p;
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const int64_t plane0 = gi * g.cg * g.h * g.w;  // offset of the group in a sample
      ParallelFor(cs, 1, [&](int64_t b, int64_t e) {
        for (int64_t s = b; s < e; ++s) {
          for (int64_t r = 0; r < g.mg; ++r) {
            const T* src = dout + ((s0 + s) * g.m + gi * g.mg + r) * p;
            std::copy(src, src + p, dprod.get() + r * ld + s * p);
          }
          if (dw) Im2Col(g, x + (s0 + s) * g.c * g.h * g.w + plane0, col.get() + s * p, ld);
        }
      });
      if (dw) Gemm(false, true, g.mg, k, ld, dprod.get(), col.get(), dw + gi * g.mg * k, true);
      if (!dx) continue;
      Gemm(true, false, k, ld, g.mg, w + gi * g.mg * k, dprod.get(), col.get(), false);
      ParallelFor(cs, 1, [&](int64_t b, int64_t e) {
        for (int64_t s = b; s < e; ++s) {
          T* dxs = dx + (s0 + s) * g.c * g.h * g.w + plane0;
          std::fill(dxs, dxs + g.cg * g.h * g.w, T(0));
          Col2ImAdd(g, col.get() + s * p, ld, dxs);
        }
      });
    }
  }
}

// Input@GRAD = col2im(W_gᵀ · dOut_g); Filter@GRAD = Σ_samples dOut_g · im2col(x)ᵀ, both over
// chunks of samples as in the forward kernel.
template <typename T>
Status Conv2DGradKernel(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  if (!dinput && !dfilter) return Status::OK();
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeConvGeom(ctx, input.dims(), filter.dims());
  ConvBackward(g, input.data<T>(), filter.data<T>(), ctx.Input("Output@GRAD").data<T>(),
               dinput ? dinput->mutable_data<T>(ctx.place()) : nullptr,
               dfilter ? dfilter->mutable_data<T>(ctx.place()) : nullptr);
  return Status::OK();
}

std::vector<proto::OpDesc> Conv2DGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Input", "Filter", "Output@GRAD"}, {"Input", "Filter"})};
}

// ---- conv2d_transpose ----
// The transpose of conv2d: its forward is conv2d's input gradient, its input gradient is
// conv2d's forward and its filter gradient conv2d's filter gradient with Input and Output
// swapped, all over the geometry of the conv2d that maps Output [N, Cout, Ho, Wo] to Input
// [N, Cin, H, W] with Filter [Cin, Cout / groups, kh, kw].

// Ho along one axis: (H - 1) * stride - 2 * pad + dilation * (k - 1) + 1, or output_size
// when given (it may exceed that by up to stride - 1).
int64_t TransposeOutSize(int64_t in, int64_t k, int pad, int stride, int dilation, int want) {
  if (in < 0 || k < 0) return -1;
  const int64_t o = (in - 1) * stride - 2 * pad + static_cast<int64_t>(dilation) * (k - 1) + 1;
  return want > 0 ? want : o;
}

Status Conv2DTransposeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), f = ctx->InputDim("Filter");
  if (in.size() != 4) return ctx->Error(ctx->DescribeInput("Input"), " must be 4-D [N, C, H, W]");
  if (f.size() != 4)
    return ctx->Error(ctx->DescribeInput("Filter"), " must be 4-D [C, M / groups, kh, kw]");
  if (ctx->InputDtype("Input") != ctx->InputDtype("Filter"))
    return ctx->Error(ctx->DescribeInput("Input"), " and ", ctx->DescribeInput("Filter"),
                      " differ in dtype");
  const auto& strides = ctx->Attr<std::vector<int>>("strides");
  const auto& pads = ctx->Attr<std::vector<int>>("paddings");
  const auto& dils = ctx->Attr<std::vector<int>>("dilations");
  const auto& want = ctx->Attr<std::vector<int>>("output_size");
  const int groups = ctx->Attr<int>("groups");
  if (in[1] >= 0 && f[0] >= 0 && in[1] != f[0])
    return ctx->Error("channel mismatch: ", ctx->DescribeInput("Input"), " has ", in[1],
                      " channels, ", ctx->DescribeInput("Filter"), " expects ", f[0]);
  if (in[1] >= 0 && in[1] % groups != 0)
    return ctx->Error("the channels (", in[1], ") of ", ctx->DescribeInput("Input"),
                      " are not divisible by groups (", groups, ")");
  if (!want.empty() && want.size() != 2)
    return ctx->Error("output_size must be empty or [height, width], got ", want.size(), " values");
  DDim out{in[0], f[1] >= 0 ? f[1] * groups : -1, -1, -1};
  for (int a = 0; a < 2; ++a) {
    const int w = want.empty() ? 0 : want[a];
    const int64_t o = TransposeOutSize(in[2 + a], f[2 + a], pads[a], strides[a], dils[a], 0);
    if (o >= 0 && o < 1)
      return ctx->Error("output ", a == 0 ? "height" : "width", " would be ", o, " (input ",
                        in[2 + a], ", kernel ", f[2 + a], ", padding ", pads[a], ")");
    if (o >= 0 && w > 0 && (w < o || w >= o + strides[a]))
      return ctx->Error("output_size[", a, "] = ", w, " is not in [", o, ", ", o + strides[a],
                        ") for ", ctx->DescribeInput("Input"), " and ",
                        ctx->DescribeInput("Filter"), " (stride ", strides[a], ")");
    out[2 + a] = TransposeOutSize(in[2 + a], f[2 + a], pads[a], strides[a], dils[a], w);
  }
  ctx->SetOutputDim("Output", out);
  ctx->SetOutputDtype("Output", ctx->InputDtype("Input"));
  return Status::OK();
}

// The conv2d geometry whose input gradient is this transpose (see above).
ConvGeom TransposeGeom(const KernelContext& ctx, const DDim& in, const DDim& f) {
  const auto& strides = ctx.Attr<std::vector<int>>("strides");
  const auto& pads = ctx.Attr<std::vector<int>>("paddings");
  const auto& dils = ctx.Attr<std::vector<int>>("dilations");
  const auto& want = ctx.Attr<std::vector<int>>("output_size");
  ConvGeom g;
  g.groups = ctx.Attr<int>("groups");
  g.n = in[0], g.m = in[1], g.kh = f[2], g.kw = f[3];
  g.c = f[1] * g.groups;
  g.h = TransposeOutSize(in[2], f[2], pads[0], strides[0], dils[0], want.empty() ? 0 : want[0]);
  g.w = TransposeOutSize(in[3], f[3], pads[1], strides[1], dils[1], want.empty() ? 0 : want[1]);
  g.sh = strides[0], g.sw = strides[1], g.ph = pads[0], g.pw = pads[1];
  g.dh = dils[0], g.dw = dils[1];
  g.cg = g.c / g.groups, g.mg = g.m / g.groups;
  g.ho = in[2], g.wo = in[3];
  return g;
}

template <typename T>
Status Conv2DTransposeKernel(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = TransposeGeom(ctx, input.dims(), filter.dims());
  T* out = ctx.Output("Output")->mutable_data<T>(ctx.place());
  ConvBackward<T>(g, nullptr, filter.data<T>(), input.data<T>(), out, nullptr);
  return Status::OK();
}

template <typename T>
Status Conv2DTransposeGradKernel(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  if (!dinput && !dfilter) return Status::OK();
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  ConvGeom g = TransposeGeom(ctx, input.dims(), filter.dims());
  if (dinput) ConvForward(g, dout, filter.data<T>(), dinput->mutable_data<T>(ctx.place()));
  if (dfilter)
    ConvBackward<T>(g, dout, filter.data<T>(), input.data<T>(), nullptr,
                    dfilter->mutable_data<T>(ctx.place()));
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(conv2d)
    .Doc(
        "Output = 2-D convolution (cross-correlation) of Input [N, C, H, W] with Filter "
        "[M, C / groups, kh, kw]; Output is [N, M, Ho, Wo] with "
        "Ho = (H + 2 * paddings[0] - (dilations[0] * (kh - 1) + 1)) / strides[0] + 1.")
    .Input("Input", "input images [N, C, H, W]")
    .Input("Filter", "filters [M, C / groups, kh, kw]")
    .Output("Output", "output feature maps [N, M, Ho, Wo]")
    .Attr<std::vector<int>>("strides", {1, 1}, "stride along H and W", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("paddings", {0, 0}, "zero padding on each side of H and W",
                            nn::IntsOf(2, 0))
    .Attr<std::vector<int>>("dilations", {1, 1}, "kernel dilation along H and W", nn::IntsOf(2, 1))
    .Attr<int>("groups", 1, "channel groups; input and output channels split evenly",
               Positive("groups"))
    .InferShape(Conv2DInferShape)
    .GradMaker(Conv2DGradMaker)
    .Kernel(Place::kCPU, proto::FP32, Conv2DKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv2DKernel<double>);

LOOM_REGISTER_OP(conv2d_grad)
    .Doc("Input@GRAD and Filter@GRAD of conv2d from Output@GRAD.")
    .Input("Input", "forward Input")
    .Input("Filter", "forward Filter")
    .Input("Output@GRAD", "gradient of Output")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .AttrsFrom("conv2d")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Conv2DGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv2DGradKernel<double>);

LOOM_REGISTER_OP(conv2d_transpose)
    .Doc(
        "Output = the transpose of conv2d (a fractionally strided convolution) of Input "
        "[N, C, H, W] with Filter [C, M / groups, kh, kw]: Output is [N, M, Ho, Wo] with "
        "Ho = (H - 1) * strides[0] - 2 * paddings[0] + dilations[0] * (kh - 1) + 1, or "
        "output_size[0] (up to strides[0] - 1 more).")
    .Input("Input", "input feature maps [N, C, H, W]")
    .Input("Filter", "filters [C, M / groups, kh, kw]")
    .Output("Output", "output feature maps [N, M, Ho, Wo]")
    .Attr<std::vector<int>>("strides", {1, 1}, "stride along H and W", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("paddings", {0, 0}, "padding on each side of H and W", nn::IntsOf(2, 0))
    .Attr<std::vector<int>>("dilations", {1, 1}, "kernel dilation along H and W", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("output_size", {}, "[Ho, Wo]; empty: the smallest")
    .Attr<int>("groups", 1, "channel groups", Positive("groups"))
    .InferShape(Conv2DTransposeInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"Input", "Filter", "Output@GRAD"}, {"Input", "Filter"})};
    })
    .Kernel(Place::kCPU, proto::FP32, Conv2DTransposeKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv2DTransposeKernel<double>);

LOOM_REGISTER_OP(conv2d_transpose_grad)
    .Doc("Input@GRAD and Filter@GRAD of conv2d_transpose from Output@GRAD.")
    .Input("Input", "forward Input")
    .Input("Filter", "forward Filter")
    .Input("Output@GRAD", "gradient of Output")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .Output("Filter@GRAD", "gradient of Filter", false, true)
    .AttrsFrom("conv2d_transpose")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Conv2DTransposeGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv2DTransposeGradKernel<double>);

}  // namespace loom::ops
