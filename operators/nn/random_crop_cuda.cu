// CUDA kernel of random_crop (fp32, fp64, int32, int64) with the CPU kernel's draws
// (operators/nn/random_crop.cc): the seed is read back to the host, the offsets are drawn there
// from the same engine, uploaded, and one thread per output element copies its value; SeedOut
// gets the engine's next value. The same seed therefore crops alike on the CPU and the GPU.
#include <random>
#include <vector>

#include "framework/allocator.h"
#include "operators/cuda_util.cuh"

namespace loom::ops::cuda {
namespace {

constexpr int kMaxCropDims = 8;

struct CropGeom {
  int k;                        // cropped (trailing) dims
  int64_t in[kMaxCropDims];     // their extents in X
  int64_t out[kMaxCropDims];    // and in Out
  int64_t in_block, out_block;  // elements per instance in X and Out
};

template <typename T>
__global__ void RandomCropK(CropGeom g, int64_t n, const T* x, const int64_t* offsets, T* out) {
  LOOM_GRID_STRIDE(idx, n) {
    const int64_t inst = idx / g.out_block;
    int64_t rem = idx % g.out_block, from = 0, stride = 1;
    for (int i = g.k - 1; i >= 0; --i) {
      const int64_t pos = rem % g.out[i] + offsets[inst * g.k + i];
      rem /= g.out[i];
      from += pos * stride;
      stride *= g.in[i];
    }
    out[idx] = x[inst * g.in_block + from];
  }
}

template <typename T>
Status RandomCrop(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const DDim x = xt.dims();
  const auto& shape = ctx.Attr<std::vector<int>>("shape");
  const int rank = x.size(), k = static_cast<int>(shape.size()), lead = rank - k;
  if (k > kMaxCropDims)
    return ctx.Error("crops at most ", kMaxCropDims, " trailing dims on CUDA, got ", k);
  const Tensor& seed_t = ctx.Input("Seed");
  if (seed_t.numel() < 1 || seed_t.dtype() != proto::INT64)
    return ctx.Error("Seed must hold one int64");
  cudaStreamSynchronize(Stream(ctx));
  int64_t seed = 0;
  MemCopy(Place::CPU(), &seed, seed_t.place(), seed_t.data<int64_t>(), sizeof(seed));
  std::minstd_rand engine(static_cast<uint32_t>(seed));
  CropGeom g;
  g.k = k;
  g.in_block = g.out_block = 1;
  for (int i = 0; i < k; ++i) {
    g.in[i] = x[lead + i], g.out[i] = shape[i];
    g.in_block *= g.in[i], g.out_block *= g.out[i];
  }
  int64_t instances = 1;
  for (int i = 0; i < lead; ++i) instances *= x[i];
  std::vector<int64_t> offsets(instances * k);
  for (int64_t in = 0; in < instances; ++in)
    for (int i = 0; i < k; ++i) {
      std::uniform_int_distribution<int64_t> dist(0, g.in[i] - g.out[i]);
      offsets[in * k + i] = dist(engine);
    }
  Tensor staged(proto::INT64, DDim({std::max<int64_t>(instances * k, 1)}));
  int64_t* d_offsets = staged.mutable_data<int64_t>(ctx.place());
  MemCopy(ctx.place(), d_offsets, Place::CPU(), offsets.data(), offsets.size() * sizeof(int64_t));
  Tensor* outt = ctx.Output("Out");
  T* out = MutableDataOf<T>(outt, ctx.place());
  const int64_t n = outt->numel();
  if (n > 0)
    RandomCropK<T><<<Blocks(n), kThreads, 0, Stream(ctx)>>>(g, n, DataOf<T>(xt), d_offsets, out);
  LOOM_RETURN_IF_ERROR(LaunchStatus(ctx));
  // The offsets buffer is freed on return: let the copy finish first.
  cudaStreamSynchronize(Stream(ctx));
  const int64_t next = static_cast<int64_t>(engine());
  Tensor* seed_out = ctx.Output("SeedOut");
  seed_out->Resize(DDim{1});
  MemCopy(ctx.place(), seed_out->mutable_data<int64_t>(ctx.place()), Place::CPU(), &next,
          sizeof(next));
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_KERNEL(random_crop, kCUDA, FP32, RandomCrop<float>);
LOOM_REGISTER_KERNEL(random_crop, kCUDA, FP64, RandomCrop<double>);
LOOM_REGISTER_KERNEL(random_crop, kCUDA, INT32, RandomCrop<int32_t>);
LOOM_REGISTER_KERNEL(random_crop, kCUDA, INT64, RandomCrop<int64_t>);

}  // namespace loom::ops::cuda
