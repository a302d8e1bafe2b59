// The two halves of a spatial transformer, as in Fluid 1.8 (corners aligned):
// affine_grid: Output [N, H, W, 2] with Output[n, h, w] = Theta[n] (2 x 3) applied to (x_w, y_h,
//   1), where x_w = -1 + 2 w / (W - 1) and y_h = -1 + 2 h / (H - 1) span [-1, 1]; H and W come
//   from output_shape or an OutputShape input read when the op runs (affine_grid_size.h).
// grid_sampler: Output [N, C, Ho, Wo] samples X [N, C, H, W] bilinearly at Grid [N, Ho, Wo, 2]
//   = (x, y) in [-1, 1], the pixel position being ((x + 1) / 2 (W - 1), (y + 1) / 2 (H - 1)).
//   Neighbours outside the image count as zero. Gradients flow to X and to Grid.
#include <algorithm>
#include <cmath>

#include "framework/parallel.h"
#include "operators/nn/affine_grid_size.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// -1 + 2 i / (n - 1) for i in [0, n).
template <typename T>
std::vector<T> UnitSpan(int64_t n) {
  std::vector<T> v(n);
  const T step = T(2) / static_cast<T>(n - 1);
  for (int64_t i = 0; i < n; ++i) v[i] = T(-1) + static_cast<T>(i) * step;
  return v;
}

Status AffineGridInferShape(InferShapeContext* ctx) {
  DDim theta = ctx->InputDim("Theta");
  if (theta.size() != 3 || (theta[1] >= 0 && theta[1] != 2) || (theta[2] >= 0 && theta[2] != 3))
    return ctx->Error(ctx->DescribeInput("Theta"), " must be [N, 2, 3]");
  if (ctx->HasInput("OutputShape")) {  // read when the op runs: H and W unknown until then
    DDim sd = ctx->InputDim("OutputShape");
    if (sd.size() != 1 || (sd[0] >= 0 && sd[0] != 4) ||
        ctx->InputDtype("OutputShape") != proto::INT32)
      return ctx->Error(ctx->DescribeInput("OutputShape"), " must be int32 [4]");
    ctx->SetOutputDim("Output", DDim{theta[0], -1, -1, 2});
    ctx->SetOutputDtype("Output", ctx->InputDtype("Theta"));
    return Status::OK();
  }
  const auto& shape = ctx->Attr<std::vector<int>>("output_shape");
  if (shape.size() != 4)
    return ctx->Error("output_shape must be [N, C, H, W], got ", nn::IntsToString(shape));
  if (shape[2] < 2 || shape[3] < 2)
    return ctx->Error("output_shape ", nn::IntsToString(shape),
                      " needs a height and width of at least 2");
  ctx->SetOutputDim("Output", DDim{theta[0], shape[2], shape[3], 2});
  ctx->SetOutputDtype("Output", ctx->InputDtype("Theta"));
  return Status::OK();
}

template <typename T>
Status AffineGridKernel(const KernelContext& ctx) {
  const Tensor& theta_t = ctx.Input("Theta");
  LOOM_ASSIGN_OR_RETURN(auto hw, AffineGridSize(ctx));
  const int64_t n = theta_t.dims()[0], h = hw.first, w = hw.second;
  const std::vector<T> xs = UnitSpan<T>(w), ys = UnitSpan<T>(h);
  const T* theta = theta_t.data<T>();
  Tensor* outt = ctx.Output("Output");
  outt->Resize(DDim{n, h, w, 2});
  T* out = outt->mutable_data<T>(ctx.place());
  for (int64_t b = 0; b < n; ++b) {
    const T* t = theta + b * 6;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        T* o = out + ((b * h + i) * w + j) * 2;
        for (int k = 0; k < 2; ++k) o[k] = xs[j] * t[3 * k] + ys[i] * t[3 * k + 1] + t[3 * k + 2];
      }
  }
  return Status::OK();
}

template <typename T>
Status AffineGridGradKernel(const KernelContext& ctx) {
  Tensor* dtheta_t = ctx.OutputOrNull("Theta@GRAD");
  if (!dtheta_t) return Status::OK();
  const DDim grid = ctx.Input("Output@GRAD").dims();  // [N, H, W, 2]
  const int64_t n = ctx.Input("Theta").dims()[0], h = grid[1], w = grid[2];
  const std::vector<T> xs = UnitSpan<T>(w), ys = UnitSpan<T>(h);
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  T* dtheta = dtheta_t->mutable_data<T>(ctx.place());
  std::fill(dtheta, dtheta + dtheta_t->numel(), T(0));
  for (int64_t b = 0; b < n; ++b) {
    T* t = dtheta + b * 6;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const T* g = dout + ((b * h + i) * w + j) * 2;
        for (int k = 0; k < 2; ++k) {
          t[3 * k] += g[k] * xs[j];
          t[3 * k + 1] += g[k] * ys[i];
          t[3 * k + 2] += g[k];
        }
      }
  }
  return Status::OK();
}

// Each "<Slot>@GRAD" output present takes the dims and dtype of input "<Slot>".
Status ShareGradShapes(InferShapeContext* ctx, std::initializer_list<const char*> slots) {
  for (const char* slot : slots)
    if (ctx->OutputSize(GradVarName(slot)) > 0 &&
        ctx->OutputVarName(GradVarName(slot), 0) != kEmptyVarName)
      ctx->ShareDimAndDtype(slot, GradVarName(slot));
  return Status::OK();
}

Status AffineGridGradInferShape(InferShapeContext* ctx) { return ShareGradShapes(ctx, {"Theta"}); }
Status GridSamplerGradInferShape(InferShapeContext* ctx) {
  return ShareGradShapes(ctx, {"X", "Grid"});
}

std::vector<proto::OpDesc> AffineGridGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"Theta", "Output@GRAD"}, {"Theta"})};
}

Status GridSamplerInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), grid = ctx->InputDim("Grid");
  if (x.size() != 4) return ctx->Error(ctx->DescribeInput("X"), " must be 4-D [N, C, H, W]");
  if (grid.size() != 4 || (grid[3] >= 0 && grid[3] != 2))
    return ctx->Error(ctx->DescribeInput("Grid"), " must be [N, Ho, Wo, 2]");
  if (x[0] >= 0 && grid[0] >= 0 && x[0] != grid[0])
    return ctx->Error("batch mismatch: ", ctx->DescribeInput("X"), " and ",
                      ctx->DescribeInput("Grid"));
  if (ctx->InputDtype("X") != ctx->InputDtype("Grid"))
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Grid"),
                      " differ in dtype");
  ctx->SetOutputDim("Output", DDim{x[0], x[1], grid[1], grid[2]});
  ctx->SetOutputDtype("Output", ctx->InputDtype("X"));
  return Status::OK();
}

// The four neighbours of a sample point and their bilinear weights.
template <typename T>
struct Sample {
  int64_t x0, y0;    // west / north pixel; east = x0 + 1, south = y0 + 1
  T dw, de, dn, ds;  // distances to the west, east, north and south neighbours
};

template <typename T>
Sample<T> SampleAt(T gx, T gy, int64_t h, int64_t w) {
  const T x = (gx + T(1)) * T(0.5) * static_cast<T>(w - 1);
  const T y = (gy + T(1)) * T(0.5) * static_cast<T>(h - 1);
  Sample<T> s;
  const T fx = std::floor(x), fy = std::floor(y);
  s.x0 = static_cast<int64_t>(fx), s.y0 = static_cast<int64_t>(fy);
  s.dw = x - fx, s.de = fx + T(1) - x;
  s.dn = y - fy, s.ds = fy + T(1) - y;
  return s;
}

// The pixel (yy, xx) of a plane, or 0 outside it.
template <typename T>
T PixelOrZero(const T* plane, int64_t yy, int64_t xx, int64_t h, int64_t w) {
  return yy >= 0 && yy < h && xx >= 0 && xx < w ? plane[yy * w + xx] : T(0);
}

template <typename T>
Status GridSamplerKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& gt = ctx.Input("Grid");
  const int64_t n = xt.dims()[0], c = xt.dims()[1], h = xt.dims()[2], w = xt.dims()[3];
  const int64_t ho = gt.dims()[1], wo = gt.dims()[2];
  const T* x = xt.data<T>();
  const T* grid = gt.data<T>();
  T* out = ctx.Output("Output")->mutable_data<T>(ctx.place());
  ParallelFor(n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t p = 0; p < ho * wo; ++p) {
        const T* g = grid + (b * ho * wo + p) * 2;
        const Sample<T> s = SampleAt(g[0], g[1], h, w);
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* plane = x + (b * c + ch) * h * w;
          const T wn = PixelOrZero(plane, s.y0, s.x0, h, w);
          const T en = PixelOrZero(plane, s.y0, s.x0 + 1, h, w);
          const T ws = PixelOrZero(plane, s.y0 + 1, s.x0, h, w);
          const T es = PixelOrZero(plane, s.y0 + 1, s.x0 + 1, h, w);
          out[(b * c + ch) * ho * wo + p] =
              wn * s.de * s.ds + en * s.dw * s.ds + ws * s.de * s.dn + es * s.dw * s.dn;
        }
      }
  });
  return Status::OK();
}

template <typename T>
Status GridSamplerGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dgt = ctx.OutputOrNull("Grid@GRAD");
  const Tensor& xt = ctx.Input("X");
  const Tensor& gt = ctx.Input("Grid");
  const int64_t n = xt.dims()[0], c = xt.dims()[1], h = xt.dims()[2], w = xt.dims()[3];
  const int64_t ho = gt.dims()[1], wo = gt.dims()[2];
  const T* x = xt.data<T>();
  const T* grid = gt.data<T>();
  const T* dout = ctx.Input("Output@GRAD").data<T>();
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dgrid = dgt ? dgt->mutable_data<T>(ctx.place()) : nullptr;
  if (dx) std::fill(dx, dx + dxt->numel(), T(0));
  auto add = [&](T* plane, int64_t yy, int64_t xx, T v) {
    if (yy >= 0 && yy < h && xx >= 0 && xx < w) plane[yy * w + xx] += v;
  };
  ParallelFor(n, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t p = 0; p < ho * wo; ++p) {
        const T* g = grid + (b * ho * wo + p) * 2;
        const Sample<T> s = SampleAt(g[0], g[1], h, w);
        T gx = 0, gy = 0;
        for (int64_t ch = 0; ch < c; ++ch) {
          const T go = dout[(b * c + ch) * ho * wo + p];
          const T* plane = x + (b * c + ch) * h * w;
          if (dx) {
            T* dplane = dx + (b * c + ch) * h * w;
            add(dplane, s.y0, s.x0, go * s.de * s.ds);
            add(dplane, s.y0, s.x0 + 1, go * s.dw * s.ds);
            add(dplane, s.y0 + 1, s.x0, go * s.de * s.dn);
            add(dplane, s.y0 + 1, s.x0 + 1, go * s.dw * s.dn);
          }
          if (dgrid) {
            const T wn = PixelOrZero(plane, s.y0, s.x0, h, w);
            const T en = PixelOrZero(plane, s.y0, s.x0 + 1, h, w);
            const T ws = PixelOrZero(plane, s.y0 + 1, s.x0, h, w);
            const T es = PixelOrZero(plane, s.y0 + 1, s.x0 + 1, h, w);
            gx += go * ((en - wn) * s.ds + (es - ws) * s.dn);
            gy += go * ((ws - wn) * s.de + (es - en) * s.dw);
          }
        }
        if (dgrid) {
          T* d = dgrid + (b * ho * wo + p) * 2;
          d[0] = gx * T(0.5) * static_cast<T>(w - 1);
          d[1] = gy * T(0.5) * static_cast<T>(h - 1);
        }
      }
  });
  return Status::OK();
}

std::vector<proto::OpDesc> GridSamplerGradMaker(const OpDesc& fwd) {
  return {nn::MakeGradOp(fwd, {"X", "Grid", "Output@GRAD"}, {"X", "Grid"})};
}

}  // namespace

LOOM_REGISTER_OP(affine_grid)
    .Doc(
        "Output [N, H, W, 2] = Theta [N, 2, 3] applied to (x, y, 1) on a grid spanning [-1, 1] "
        "in H x W steps (corners included).")
    .Input("Theta", "affine transforms [N, 2, 3]")
    .Input("OutputShape",
           "optional int32 [4]: [N, C, H, W], read when the op runs (overrides output_shape)",
           false, true)
    .Output("Output", "sampling grid [N, H, W, 2] of (x, y)")
    .Attr<std::vector<int>>("output_shape", {},
                            "[N, C, H, W] of the image to sample (without OutputShape)")
    .InferShape(AffineGridInferShape)
    .GradMaker(AffineGridGradMaker)
    .Kernel(Place::kCPU, proto::FP32, AffineGridKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AffineGridKernel<double>);

LOOM_REGISTER_OP(affine_grid_grad)
    .Doc("Theta@GRAD of affine_grid.")
    .Input("Theta", "forward Theta (for its dims)")
    .Input("Output@GRAD", "gradient of Output")
    .Output("Theta@GRAD", "gradient of Theta", false, true)
    .AttrsFrom("affine_grid")
    .InferShape(AffineGridGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, AffineGridGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, AffineGridGradKernel<double>);

LOOM_REGISTER_OP(grid_sampler)
    .Doc(
        "Output [N, C, Ho, Wo] = X [N, C, H, W] sampled bilinearly at Grid [N, Ho, Wo, 2] "
        "(x, y in [-1, 1] spanning the corner pixels; zeros outside the image).")
    .Input("X", "images [N, C, H, W]")
    .Input("Grid", "sample points [N, Ho, Wo, 2]")
    .Output("Output", "samples [N, C, Ho, Wo]")
    .InferShape(GridSamplerInferShape)
    .GradMaker(GridSamplerGradMaker)
    .Kernel(Place::kCPU, proto::FP32, GridSamplerKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, GridSamplerKernel<double>);

LOOM_REGISTER_OP(grid_sampler_grad)
    .Doc("X@GRAD and Grid@GRAD of grid_sampler.")
    .Input("X", "forward X")
    .Input("Grid", "forward Grid")
    .Input("Output@GRAD", "gradient of Output")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Grid@GRAD", "gradient of Grid", false, true)
    .AttrsFrom("grid_sampler")
    .InferShape(GridSamplerGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, GridSamplerGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, GridSamplerGradKernel<double>);

}  // namespace loom::ops
