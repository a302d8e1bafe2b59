// CUDA kernels of affine_grid and grid_sampler (fp32, fp64) with the math of the CPU kernels
// (operators/nn/grid_sample.cc). affine_grid: one thread per grid point; its Theta gradient one
// thread per Theta element summing over the grid. grid_sampler: one thread per sample point
// looping over the channels; the X gradient scatters with atomicAdd (sample points may share
// neighbours), the Grid gradient is written by the point's own thread.
#include <vector>

#include "operators/cuda_util.cuh"
#include "operators/nn/affine_grid_size.h"

namespace loom::ops::cuda {
namespace {

// -1 + 2 i / (n - 1), as UnitSpan on the CPU.
template <typename T>
__device__ T UnitAt(int64_t i, int64_t n) {
  const T step = T(2) / static_cast<T>(n - 1);
  return T(-1) + static_cast<T>(i) * step;
}

template <typename T>
__global__ void AffineGridK(int64_t n, int64_t h, int64_t w, const T* theta, T* out) {
  LOOM_GRID_STRIDE(idx, n * h * w) {
    const int64_t j = idx % w, i = (idx / w) % h, b = idx / (w * h);
    const T* t = theta + b * 6;
    const T x = UnitAt<T>(j, w), y = UnitAt<T>(i, h);
    for (int k = 0; k < 2; ++k) out[idx * 2 + k] = x * t[3 * k] + y * t[3 * k + 1] + t[3 * k + 2];
  }
}

template <typename T>
__global__ void AffineGridGradK(int64_t n, int64_t h, int64_t w, const T* dout, T* dtheta) {
  LOOM_GRID_STRIDE(idx, n * 6) {
    const int64_t b = idx / 6, k = (idx % 6) / 3, j = idx % 3;
    T acc = 0;
    for (int64_t i = 0; i < h; ++i)
      for (int64_t c = 0; c < w; ++c) {
        const T g = dout[((b * h + i) * w + c) * 2 + k];
        acc += j == 0 ? g * UnitAt<T>(c, w) : j == 1 ? g * UnitAt<T>(i, h) : g;
      }
    dtheta[idx] = acc;
  }
}

template <typename T>
Status AffineGrid(const KernelContext& ctx) {
  const Tensor& theta = ctx.Input("Theta");
  LOOM_ASSIGN_OR_RETURN(auto hw, AffineGridSize(ctx));
  const int64_t n = theta.dims()[0], h = hw.first, w = hw.second;
  Tensor* outt = ctx.Output("Output");
  outt->Resize(DDim{n, h, w, 2});
  T* out = MutableDataOf<T>(outt, ctx.place());
  if (n * h * w == 0) return Status::OK();
  AffineGridK<T><<<Blocks(n * h * w), kThreads, 0, Stream(ctx)>>>(n, h, w, DataOf<T>(theta), out);
  return LaunchStatus(ctx);
}

template <typename T>
Status AffineGridGrad(const KernelContext& ctx) {
  Tensor* dtheta = ctx.OutputOrNull("Theta@GRAD");
  if (!dtheta) return Status::OK();
  const DDim grid = ctx.Input("Output@GRAD").dims();  // [N, H, W, 2]
  const int64_t n = ctx.Input("Theta").dims()[0], h = grid[1], w = grid[2];
  T* d = MutableDataOf<T>(dtheta, ctx.place());
  if (n == 0) return Status::OK();
  AffineGridGradK<T><<<Blocks(n * 6), kThreads, 0, Stream(ctx)>>>(
      n, h, w, DataOf<T>(ctx.Input("Output@GRAD")), d);
  return LaunchStatus(ctx);
}

struct SamplerGeom {
  int64_t n, c, h, w, ho, wo;
};

// The west / north neighbour of a sample point and the distances to its four neighbours.
template <typename T>
struct Sample {
  int64_t x0, y0;
  T dw, de, dn, ds;
};

template <typename T>
__device__ Sample<T> SampleAt(T gx, T gy, int64_t h, int64_t w) {
  const T x = (gx + T(1)) * T(0.5) * static_cast<T>(w - 1);
  const T y = (gy + T(1)) * T(0.5) * static_cast<T>(h - 1);
  Sample<T> s;
  const T fx = floor(x), fy = floor(y);
  s.x0 = static_cast<int64_t>(fx), s.y0 = static_cast<int64_t>(fy);
  s.dw = x - fx, s.de = fx + T(1) - x;
  s.dn = y - fy, s.ds = fy + T(1) - y;
  return s;
}

template <typename T>
__device__ T PixelOrZero(const T* plane, int64_t yy, int64_t xx, int64_t h, int64_t w) {
  return yy >= 0 && yy < h && xx >= 0 && xx < w ? plane[yy * w + xx] : T(0);
}

template <typename T>
__global__ void GridSamplerK(SamplerGeom g, const T* x, const T* grid, T* out) {
  const int64_t p_count = g.ho * g.wo;
  LOOM_GRID_STRIDE(idx, g.n * p_count) {
    const int64_t b = idx / p_count, p = idx % p_count;
    const Sample<T> s = SampleAt(grid[idx * 2], grid[idx * 2 + 1], g.h, g.w);
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const T* plane = x + (b * g.c + ch) * g.h * g.w;
      const T wn = PixelOrZero(plane, s.y0, s.x0, g.h, g.w);
      const T en = PixelOrZero(plane, s.y0, s.x0 + 1, g.h, g.w);
      const T ws = PixelOrZero(plane, s.y0 + 1, s.x0, g.h, g.w);
      const T es = PixelOrZero(plane, s.y0 + 1, s.x0 + 1, g.h, g.w);
      out[(b * g.c + ch) * p_count + p] =
          wn * s.de * s.ds + en * s.dw * s.ds + ws * s.de * s.dn + es * s.dw * s.dn;
    }
  }
}

template <typename T>
__device__ void AddIfInside(T* plane, int64_t yy, int64_t xx, int64_t h, int64_t w, T v) {
  if (yy >= 0 && yy < h && xx >= 0 && xx < w) atomicAdd(plane + yy * w + xx, v);
}

template <typename T>
__global__ void GridSamplerGradK(SamplerGeom g, const T* x, const T* grid, const T* dout, T* dx,
                                 T* dgrid) {
  const int64_t p_count = g.ho * g.wo;
  LOOM_GRID_STRIDE(idx, g.n * p_count) {
    const int64_t b = idx / p_count, p = idx % p_count;
    const Sample<T> s = SampleAt(grid[idx * 2], grid[idx * 2 + 1], g.h, g.w);
    T gx = 0, gy = 0;
    for (int64_t ch = 0; ch < g.c; ++ch) {
      const T go = dout[(b * g.c + ch) * p_count + p];
      const T* plane = x + (b * g.c + ch) * g.h * g.w;
      if (dx) {
        T* dplane = dx + (b * g.c + ch) * g.h * g.w;
        AddIfInside(dplane, s.y0, s.x0, g.h, g.w, go * s.de * s.ds);
        AddIfInside(dplane, s.y0, s.x0 + 1, g.h, g.w, go * s.dw * s.ds);
        AddIfInside(dplane, s.y0 + 1, s.x0, g.h, g.w, go * s.de * s.dn);
        AddIfInside(dplane, s.y0 + 1, s.x0 + 1, g.h, g.w, go * s.dw * s.dn);
      }
      if (dgrid) {
        const T wn = PixelOrZero(plane, s.y0, s.x0, g.h, g.w);
        const T en = PixelOrZero(plane, s.y0, s.x0 + 1, g.h, g.w);
        const T ws = PixelOrZero(plane, s.y0 + 1, s.x0, g.h, g.w);
        const T es = PixelOrZero(plane, s.y0 + 1, s.x0 + 1, g.h, g.w);
        gx += go * ((en - wn) * s.ds + (es - ws) * s.dn);
        gy += go * ((ws - wn) * s.de + (es - en) * s.dw);
      }
    }
    if (dgrid) {
      dgrid[idx * 2] = gx * T(0.5) * static_cast<T>(g.w - 1);
      dgrid[idx * 2 + 1] = gy * T(0.5) * static_cast<T>(g.h - 1);
    }
  }
}

SamplerGeom MakeSamplerGeom(const DDim& x, const DDim& grid) {
  return SamplerGeom{x[0], x[1], x[2], x[3], grid[1], grid[2]};
}

template <typename T>
Status GridSampler(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& grid = ctx.Input("Grid");
  SamplerGeom g = MakeSamplerGeom(x.dims(), grid.dims());
  T* out = MutableDataOf<T>(ctx.Output("Output"), ctx.place());
  const int64_t n = g.n * g.ho * g.wo;
  if (n == 0) return Status::OK();
  GridSamplerK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, DataOf<T>(x), DataOf<T>(grid), out);
  return LaunchStatus(ctx);
}

template <typename T>
Status GridSamplerGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dgt = ctx.OutputOrNull("Grid@GRAD");
  const Tensor& x = ctx.Input("X");
  const Tensor& grid = ctx.Input("Grid");
  SamplerGeom g = MakeSamplerGeom(x.dims(), grid.dims());
  T* dx = dxt ? MutableDataOf<T>(dxt, ctx.place()) : nullptr;
  T* dgrid = dgt ? MutableDataOf<T>(dgt, ctx.place()) : nullptr;
  if (dx && dxt->numel() > 0) cudaMemsetAsync(dx, 0, dxt->nbytes(), Stream(ctx));
  const int64_t n = g.n * g.ho * g.wo;
  if (n > 0 && (dx || dgrid))
    GridSamplerGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(
        g, DataOf<T>(x), DataOf<T>(grid), DataOf<T>(ctx.Input("Output@GRAD")), dx, dgrid);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(affine_grid, kCUDA, FP32, AffineGrid<float>);
LOOM_REGISTER_KERNEL(affine_grid, kCUDA, FP64, AffineGrid<double>);
LOOM_REGISTER_KERNEL(affine_grid_grad, kCUDA, FP32, AffineGridGrad<float>);
LOOM_REGISTER_KERNEL(affine_grid_grad, kCUDA, FP64, AffineGridGrad<double>);
LOOM_REGISTER_KERNEL(grid_sampler, kCUDA, FP32, GridSampler<float>);
LOOM_REGISTER_KERNEL(grid_sampler, kCUDA, FP64, GridSampler<double>);
LOOM_REGISTER_KERNEL(grid_sampler_grad, kCUDA, FP32, GridSamplerGrad<float>);
LOOM_REGISTER_KERNEL(grid_sampler_grad, kCUDA, FP64, GridSamplerGrad<double>);

}  // namespace loom::ops::cuda
