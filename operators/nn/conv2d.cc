// conv2d: 2-D convolution over NCHW inputs with strides, zero padding, dilation and groups.
// CPU kernels lower each (sample, group) pair to one GEMM over an im2col buffer; the samples
// are independent (each has its own column buffer and output slice), only Filter@GRAD
// accumulates across them.
#include <vector>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

using nn::Gemm;

// Everything the kernels need about one convolution, derived from the tensors and attributes.
struct ConvGeom {
  int64_t n, c, h, w;      // Input
  int64_t m, kh, kw;       // Filter [m, c / groups, kh, kw]
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t groups, cg, mg;  // channels per group (in, out)
  int64_t ho, wo;
  int64_t K() const { return cg * kh * kw; }  // rows of the column buffer
  int64_t P() const { return ho * wo; }       // output pixels per plane
  // 1x1, stride 1, no padding: the input planes already are the column buffer.
  bool Trivial() const {
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

// Output extent along one axis, or -1 when the input extent is unknown; < 1 means no output.
int64_t ConvOutSize(int64_t in, int64_t k, int pad, int stride, int dilation) {
  if (in < 0 || k < 0) return -1;
  int64_t eff = static_cast<int64_t>(dilation) * (k - 1) + 1;
  int64_t span = in + 2 * pad - eff;
  return span < 0 ? 0 : span / stride + 1;
}

Status Conv2DInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input"), f = ctx->InputDim("Filter");
  if (in.size() != 4)
    return ctx->Error(ctx->DescribeInput("Input"), " must be 4-D [N, C, H, W]");
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
      return ctx->Error("output ", a == 0 ? "height" : "width", " would be empty: ",
                        ctx->DescribeInput("Input"), " padded by ", pads[a], " on each side is ",
                        in[2 + a] + 2 * pads[a], " wide, smaller than the kernel extent ",
                        static_cast<int64_t>(dils[a]) * (f[2 + a] - 1) + 1, " of ",
                        ctx->DescribeInput("Filter"), " (dilation ", dils[a], ")");
    out[2 + a] = o;
  }
  ctx->SetOutputDim("Output", out);
  ctx->SetOutputDtype("Output", ctx->InputDtype("Input"));
  return Status::OK();
}

ConvGeom MakeGeom(const KernelContext& ctx, const DDim& in, const DDim& f) {
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

// col[(c * kh + i) * kw + j][oh * wo + ow] = x[c][oh * sh - ph + i * dh][ow * sw - pw + j * dw]
// (0 outside the image), for the cg channels starting at x.
template <typename T>
void Im2Col(const ConvGeom& g, const T* x, T* col) {
  const int64_t p = g.P();
  for (int64_t c = 0; c < g.cg; ++c) {
    const T* plane = x + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * p;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * g.sh - g.ph + i * g.dh;
          T* dst = row + oh * g.wo;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t iw = ow * g.sw - g.pw + j * g.dw;
            dst[ow] = iw >= 0 && iw < g.w ? src[iw] : T(0);
          }
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds every column entry back onto the pixel it was read from.
template <typename T>
void Col2ImAdd(const ConvGeom& g, const T* col, T* dx) {
  const int64_t p = g.P();
  for (int64_t c = 0; c < g.cg; ++c) {
    T* plane = dx + c * g.h * g.w;
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = col + ((c * g.kh + i) * g.kw + j) * p;
        for (int64_t oh = 0; oh < g.ho; ++oh) {
          int64_t ih = oh * g.sh - g.ph + i * g.dh;
          if (ih < 0 || ih >= g.h) continue;
          const T* src = row + oh * g.wo;
          T* dst = plane + ih * g.w;
          for (int64_t ow = 0; ow < g.wo; ++ow) {
            int64_t iw = ow * g.sw - g.pw + j * g.dw;
            if (iw >= 0 && iw < g.w) dst[iw] += src[ow];
          }
        }
      }
    }
  }
}

template <typename T>
Status Conv2DKernel(const KernelContext& ctx) {
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeGeom(ctx, input.dims(), filter.dims());
  const T* x = input.data<T>();
  const T* w = filter.data<T>();
  T* out = ctx.Output("Output")->mutable_data<T>(ctx.place());
  const int64_t k = g.K(), p = g.P();
  std::vector<T> col(g.Trivial() ? 0 : k * p);
  for (int64_t s = 0; s < g.n; ++s) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const T* xs = x + (s * g.c + gi * g.cg) * g.h * g.w;
      const T* cols = xs;
      if (!g.Trivial()) {
        Im2Col(g, xs, col.data());
        cols = col.data();
      }
      Gemm(false, false, g.mg, p, k, w + gi * g.mg * k, cols,
           out + (s * g.m + gi * g.mg) * p, false);
    }
  }
  return Status::OK();
}

// Input@GRAD = col2im(W_gᵀ · dOut_g); Filter@GRAD = Σ_samples dOut_g · im2col(x)ᵀ.
template <typename T>
Status Conv2DGradKernel(const KernelContext& ctx) {
  Tensor* dinput = ctx.OutputOrNull("Input@GRAD");
  Tensor* dfilter = ctx.OutputOrNull("Filter@GRAD");
  if (!dinput && !dfilter) return Status::OK();
  const Tensor& input = ctx.Input("Input");
  const Tensor& filter = ctx.Input("Filter");
  ConvGeom g = MakeGeom(ctx, input.dims(), filter.dims());
  const T* x = input.data<T>();
  const T* w = filter.data<T>();
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  const int64_t k = g.K(), p = g.P();
  T* dx = nullptr;
  T* dw = nullptr;
  if (dinput) {
    dx = dinput->mutable_data<T>(ctx.place());
    std::fill(dx, dx + dinput->numel(), T(0));
  }
  if (dfilter) {
    dw = dfilter->mutable_data<T>(ctx.place());
    std::fill(dw, dw + dfilter->numel(), T(0));
  }
  std::vector<T> col(k * p);
  for (int64_t s = 0; s < g.n; ++s) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const int64_t in_off = (s * g.c + gi * g.cg) * g.h * g.w;
      const T* dout_g = dout + (s * g.m + gi * g.mg) * p;
      if (dw) {
        const T* cols = x + in_off;
        if (!g.Trivial()) {
          Im2Col(g, x + in_off, col.data());
          cols = col.data();
        }
        Gemm(false, true, g.mg, k, p, dout_g, cols, dw + gi * g.mg * k, true);
      }
      if (dx) {
        if (g.Trivial()) {
          Gemm(true, false, k, p, g.mg, w + gi * g.mg * k, dout_g, dx + in_off, true);
        } else {
          Gemm(true, false, k, p, g.mg, w + gi * g.mg * k, dout_g, col.data(), false);
          Col2ImAdd(g, col.data(), dx + in_off);
        }
      }
    }
  }
  return Status::OK();
}

std::vector<proto::OpDesc> Conv2DGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Input", "Filter", "Output@GRAD"}, {"Input", "Filter"})};
}

}  // namespace

LOOM_REGISTER_OP(conv2d)
    .Doc("Output = 2-D convolution (cross-correlation) of Input [N, C, H, W] with Filter "
         "[M, C / groups, kh, kw]; Output is [N, M, Ho, Wo] with "
         "Ho = (H + 2 * paddings[0] - (dilations[0] * (kh - 1) + 1)) / strides[0] + 1.")
    .Input("Input", "input images [N, C, H, W]")
    .Input("Filter", "filters [M, C / groups, kh, kw]")
    .Output("Output", "output feature maps [N, M, Ho, Wo]")
    .Attr<std::vector<int>>("strides", {1, 1}, "stride along H and W", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("paddings", {0, 0}, "zero padding on each side of H and W",
                            nn::IntsOf(2, 0))
    .Attr<std::vector<int>>("dilations", {1, 1}, "kernel dilation along H and W",
                            nn::IntsOf(2, 1))
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
    .Attr<std::vector<int>>("strides", {1, 1}, "as in the forward op", nn::IntsOf(2, 1))
    .Attr<std::vector<int>>("paddings", {0, 0}, "as in the forward op", nn::IntsOf(2, 0))
    .Attr<std::vector<int>>("dilations", {1, 1}, "as in the forward op", nn::IntsOf(2, 1))
    .Attr<int>("groups", 1, "as in the forward op", Positive("groups"))
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Conv2DGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Conv2DGradKernel<double>);

}  // namespace loom::ops
