// CUDA kernels of the random initializers uniform_random and gaussian_random
// (operators/math/fill.cc), fp32 and fp64.
#include <random>

#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

// Counter-based generator: element i of stream `seed` is a hash of (seed, i), so results do
// not depend on the launch geometry.
__device__ inline uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__device__ inline double Unit(uint64_t seed, uint64_t i) {
  return (Mix(seed ^ Mix(i)) >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
__global__ void UniformK(T* o, int64_t n, uint64_t seed, double lo, double hi) {
  LOOM_GRID_STRIDE(i, n) o[i] = static_cast<T>(lo + (hi - lo) * Unit(seed, i));
}

template <typename T>
__global__ void GaussianK(T* o, int64_t n, uint64_t seed, double mean, double std) {
  LOOM_GRID_STRIDE(i, n) {
    double u1 = Unit(seed, 2 * i) + 1e-300, u2 = Unit(seed, 2 * i + 1);
    o[i] = static_cast<T>(mean + std * sqrt(-2.0 * log(u1)) * cospi(2.0 * u2));
  }
}

uint64_t SeedOf(const KernelContext& ctx) {
  int seed = ctx.Attr<int>("seed");
  return seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
}

template <typename T>
Status Uniform(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  UniformK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(
      out->mutable_data<T>(ctx.place()), out->numel(), SeedOf(ctx), ctx.Attr<float>("min"),
      ctx.Attr<float>("max"));
  return LaunchStatus(ctx);
}

template <typename T>
Status Gaussian(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  GaussianK<T><<<Blocks(out->numel()), kThreads, 0, Stream(ctx)>>>(
      out->mutable_data<T>(ctx.place()), out->numel(), SeedOf(ctx), ctx.Attr<float>("mean"),
      ctx.Attr<float>("std"));
  return LaunchStatus(ctx);
}

}  // namespace

LOOM_REGISTER_KERNEL(uniform_random, kCUDA, FP32, Uniform<float>);
LOOM_REGISTER_KERNEL(uniform_random, kCUDA, FP64, Uniform<double>);
LOOM_REGISTER_KERNEL(gaussian_random, kCUDA, FP32, Gaussian<float>);
LOOM_REGISTER_KERNEL(gaussian_random, kCUDA, FP64, Gaussian<double>);

}  // namespace loom::ops::cuda
