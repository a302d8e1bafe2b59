// CUDA kernels of dropout and dropout_grad (fp32, fp64; fp16 with float arithmetic), with the
// semantics of operators/nn/dropout.cc: each element is kept with probability 1 - dropout_prob;
// "downgrade_in_infer" trains with Out = X * Mask and tests with Out = X * (1 - p);
// "upscale_in_train" trains with Out = X * Mask / (1 - p) and tests with Out = X; Mask holds 1
// for kept and 0 for dropped elements (all 1 with is_test). The CPU kernel draws its mask from
// std::mt19937_64, a sequential stream a CUDA kernel cannot reproduce, so here element i's
// draw is a counter-based hash of (seed, i): for a non-zero seed the mask is still a pure
// function of the seed (and the element count), but it differs from the CPU kernel's mask for
// the same seed. Seed 0 draws a fresh seed on the host on every run, as on the CPU.
#include <random>

#include "operators/cuda_util.cuh"
#include "operators/nn/dropout_attrs.h"

namespace loom::ops::cuda {
namespace {

// splitmix64 finalizer of (seed, i): a uniform double in [0, 1).
__device__ inline double Uniform(uint64_t seed, int64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  z = (z ^ (z >> 33)) * 0xFF51AFD7ED558CCDull;  // extra round: consecutive i decorrelate
  z ^= z >> 33;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
__global__ void DropoutK(const T* x, T* out, T* mask, int64_t n, uint64_t seed, double keep,
                         Acc<T> keep_scale) {
  LOOM_GRID_STRIDE(i, n) {
    const bool k = Uniform(seed, i) < keep;
    if (mask) mask[i] = k ? static_cast<T>(1.0f) : static_cast<T>(0.0f);
    out[i] = k ? static_cast<T>(static_cast<Acc<T>>(x[i]) * keep_scale) : static_cast<T>(0.0f);
  }
}

template <typename T>
__global__ void ScaleK(const T* x, T* out, T* ones, int64_t n, Acc<T> factor) {
  LOOM_GRID_STRIDE(i, n) {
    out[i] = static_cast<T>(static_cast<Acc<T>>(x[i]) * factor);
    if (ones) ones[i] = static_cast<T>(1.0f);
  }
}

template <typename T>
__global__ void MaskGradK(const T* g, const T* mask, T* dx, int64_t n, Acc<T> keep_scale) {
  LOOM_GRID_STRIDE(i, n) {
    dx[i] = static_cast<T>(static_cast<Acc<T>>(g[i]) * static_cast<Acc<T>>(mask[i]) * keep_scale);
  }
}

template <typename T>
Status Dropout(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const int64_t n = xt.numel();
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscalesInTrain(ctx);
  T* out = MutableDataOf<T>(ctx.Output("Out"), ctx.place());
  Tensor* mt = ctx.OutputOrNull("Mask");
  T* mask = mt ? MutableDataOf<T>(mt, ctx.place()) : nullptr;
  if (n == 0) return Status::OK();
  if (ctx.Attr<bool>("is_test")) {
    const Acc<T> factor = upscale ? Acc<T>(1) : static_cast<Acc<T>>(1.0 - p);
    ScaleK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(xt), out, mask, n, factor);
    return LaunchStatus(ctx);
  }
  const Acc<T> keep_scale = upscale && p < 1.0 ? static_cast<Acc<T>>(1.0 / (1.0 - p)) : Acc<T>(1);
  const int seed = ctx.Attr<int>("seed");
  uint64_t s = static_cast<uint64_t>(seed);
  if (seed == 0) {
    std::random_device rd;
    s = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  DropoutK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(xt), out, mask, n, s, 1.0 - p,
                                                       keep_scale);
  return LaunchStatus(ctx);
}

// Training: X@GRAD = Out@GRAD * Mask (/ (1 - p) when upscaling); test: the forward factor.
template <typename T>
Status DropoutGrad(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& dout = ctx.Input("Out@GRAD");
  const int64_t n = dout.numel();
  const double p = ctx.Attr<float>("dropout_prob");
  const bool upscale = DropoutUpscalesInTrain(ctx);
  T* dx = MutableDataOf<T>(dxt, ctx.place());
  if (ctx.Attr<bool>("is_test")) {
    const Acc<T> factor = upscale ? Acc<T>(1) : static_cast<Acc<T>>(1.0 - p);
    if (n > 0)
      ScaleK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(dout), dx, nullptr, n, factor);
    return LaunchStatus(ctx);
  }
  const Tensor* mt = ctx.InputOrNull("Mask");
  if (!mt) return ctx.Error("training-mode dropout_grad needs the forward Mask");
  if (mt->numel() != n)
    return ctx.Error("Mask has dims ", mt->dims().ToString(), " but Out@GRAD has ",
                     dout.dims().ToString());
  const Acc<T> keep_scale = upscale && p < 1.0 ? static_cast<Acc<T>>(1.0 / (1.0 - p)) : Acc<T>(1);
  if (n > 0)
    MaskGradK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(DataOf<T>(dout), DataOf<T>(*mt), dx, n,
                                                          keep_scale);
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(dropout, kCUDA, FP32, Dropout<float>);
LOOM_REGISTER_KERNEL(dropout, kCUDA, FP64, Dropout<double>);
LOOM_REGISTER_KERNEL(dropout_grad, kCUDA, FP32, DropoutGrad<float>);
LOOM_REGISTER_KERNEL(dropout_grad, kCUDA, FP64, DropoutGrad<double>);
LOOM_REGISTER_KERNEL(dropout, kCUDA, FP16, Dropout<__half>);
LOOM_REGISTER_KERNEL(dropout_grad, kCUDA, FP16, DropoutGrad<__half>);

}  // namespace loom::ops::cuda
