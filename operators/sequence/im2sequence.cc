// im2sequence: every image of X [N, C, H, W] becomes a sequence of its kernel-sized patches,
// read left to right and top to bottom with `strides` over the image zero-padded by
// `paddings` (up, left, down, right). Out is a LoD tensor [N * oh * ow, C * kh * kw] (patch
// element (c, i, j) at column (c * kh + i) * kw + j), one sequence of oh * ow rows per image.
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

struct PatchGeom {
  int64_t n, c, h, w, kh, kw, sh, sw, pu, pl, oh, ow;
};

// oh / ow are < 1 when the kernel does not fit the padded image.
PatchGeom MakePatchGeom(const DDim& x, const std::vector<int>& k, const std::vector<int>& s,
                        const std::vector<int>& p) {
  PatchGeom g{x[0], x[1], x[2], x[3], k[0], k[1], s[0], s[1], p[0], p[1], 0, 0};
  g.oh = x[2] < 0 ? -1 : (x[2] + p[0] + p[2] - k[0]) / s[0] + 1;
  g.ow = x[3] < 0 ? -1 : (x[3] + p[1] + p[3] - k[1]) / s[1] + 1;
  return g;
}

Status Im2SequenceInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() != 4) return ctx->Error(ctx->DescribeInput("X"), " must be NCHW [N, C, H, W]");
  const auto& k = ctx->Attr<std::vector<int>>("kernels");
  const auto& s = ctx->Attr<std::vector<int>>("strides");
  const auto& p = ctx->Attr<std::vector<int>>("paddings");
  if (k.size() != 2 || k[0] < 1 || k[1] < 1)
    return ctx->Error("attribute 'kernels' must be 2 ints >= 1");
  if (s.size() != 2 || s[0] < 1 || s[1] < 1)
    return ctx->Error("attribute 'strides' must be 2 ints >= 1");
  if (p.size() != 4 || *std::min_element(p.begin(), p.end()) < 0)
    return ctx->Error("attribute 'paddings' must be 4 ints >= 0 (up, left, down, right)");
  PatchGeom g = MakePatchGeom(x, k, s, p);
  if ((x[2] >= 0 && x[2] + p[0] + p[2] < k[0]) || (x[3] >= 0 && x[3] + p[1] + p[3] < k[1]))
    return ctx->Error("kernels ", k[0], "x", k[1], " do not fit the padded image of ",
                      ctx->DescribeInput("X"));
  const int64_t rows = x[0] < 0 || g.oh < 0 || g.ow < 0 ? -1 : x[0] * g.oh * g.ow;
  ctx->SetOutputDim("Out", DDim({rows, x[1] < 0 ? -1 : x[1] * k[0] * k[1]}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

PatchGeom KernelGeom(const KernelContext& ctx, const DDim& x) {
  return MakePatchGeom(x, ctx.Attr<std::vector<int>>("kernels"),
                       ctx.Attr<std::vector<int>>("strides"),
                       ctx.Attr<std::vector<int>>("paddings"));
}

// Calls f(out_index, x_index) for every patch element that lies inside the image.
template <typename F>
void ForEachPatchElement(const PatchGeom& g, F&& f) {
  const int64_t cols = g.c * g.kh * g.kw;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t y = 0; y < g.oh; ++y)
      for (int64_t x = 0; x < g.ow; ++x) {
        const int64_t row = (n * g.oh + y) * g.ow + x;
        for (int64_t c = 0; c < g.c; ++c)
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t iy = y * g.sh - g.pu + i;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t ix = x * g.sw - g.pl + j;
              if (ix < 0 || ix >= g.w) continue;
              f(row * cols + (c * g.kh + i) * g.kw + j, ((n * g.c + c) * g.h + iy) * g.w + ix);
            }
          }
      }
}

template <typename T>
Status Im2SequenceKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const PatchGeom g = KernelGeom(ctx, xt.dims());
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({g.n * g.oh * g.ow, g.c * g.kh * g.kw}));
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + out->numel(), T(0));
  const T* x = xt.data<T>();
  ForEachPatchElement(g, [&](int64_t oi, int64_t xi) { o[oi] = x[xi]; });
  std::vector<int64_t> off;
  for (int64_t n = 0; n <= g.n; ++n) off.push_back(n * g.oh * g.ow);
  out->set_lod({off});
  return Status::OK();
}

template <typename T>
Status Im2SequenceGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const PatchGeom g = KernelGeom(ctx, xt.dims());
  dxt->Resize(xt.dims());
  T* dx = dxt->mutable_data<T>(ctx.place());
  std::fill(dx, dx + xt.numel(), T(0));
  const T* go = ctx.Input("Out@GRAD").data<T>();
  ForEachPatchElement(g, [&](int64_t oi, int64_t xi) { dx[xi] += go[oi]; });
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(im2sequence)
    .Doc(
        "Out = the kernels-sized patches of every image of X [N, C, H, W] (zero-padded by "
        "paddings: up, left, down, right; stepped by strides), one row per patch "
        "[N * oh * ow, C * kh * kw], one LoD sequence per image.")
    .Input("X", "images [N, C, H, W]")
    .Output("Out", "a LoD tensor [N * oh * ow, C * kh * kw]")
    .Attr<std::vector<int>>("kernels", {1, 1}, "patch height and width")
    .Attr<std::vector<int>>("strides", {1, 1}, "steps between patches (height, width)")
    .Attr<std::vector<int>>("paddings", {0, 0, 0, 0}, "zero padding: up, left, down, right")
    .SetsLoD()
    .InferShape(Im2SequenceInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, Im2SequenceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Im2SequenceKernel<double>);

LOOM_REGISTER_OP(im2sequence_grad)
    .Doc("X@GRAD = Out@GRAD's patch elements added back to the pixels they came from.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("im2sequence")
    .SetsLoD()
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, Im2SequenceGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, Im2SequenceGradKernel<double>);

}  // namespace loom::ops
