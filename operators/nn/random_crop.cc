// random_crop: crops the last k dims of X to `shape` at an offset drawn per instance (each index
// of the leading dims) uniformly from [0, X dim - shape dim]. The draws come from a minstd_rand
// engine seeded by Seed (an int64 [1] variable, usually persistable); SeedOut, normally the same
// variable, receives the engine's next value, so every run crops differently and a run is
// reproduced by restoring the seed. No gradient: a data augmentation, as in Fluid.
#include <algorithm>
#include <random>

#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status RandomCropInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  const auto& shape = ctx->Attr<std::vector<int>>("shape");
  if (shape.empty() || shape.size() > static_cast<size_t>(x.size()))
    return ctx->Error("shape ", nn::IntsToString(shape), " must name 1 to ", x.size(),
                      " trailing dims of ", ctx->DescribeInput("X"));
  DDim out = x;
  const int lead = x.size() - static_cast<int>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = x[lead + i];
    if (shape[i] < 1 || (d >= 0 && shape[i] > d))
      return ctx->Error("shape[", i, "] = ", shape[i], " must be in [1, ", d, "], dim ", lead + i,
                        " of ", ctx->DescribeInput("X"));
    out[lead + i] = shape[i];
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("SeedOut", DDim{1});
  ctx->SetOutputDtype("SeedOut", proto::INT64);
  return Status::OK();
}

template <typename T>
Status RandomCropKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const DDim x = xt.dims();
  const auto& shape = ctx.Attr<std::vector<int>>("shape");
  const int rank = x.size(), k = static_cast<int>(shape.size()), lead = rank - k;
  const Tensor& seed_t = ctx.Input("Seed");
  if (seed_t.numel() < 1 || seed_t.dtype() != proto::INT64)
    return InvalidArgument(ctx.Where(), ": Seed must hold one int64");
  std::minstd_rand engine(static_cast<uint32_t>(seed_t.data<int64_t>()[0]));
  // Strides of X and of Out over the cropped dims; instances are contiguous blocks of both.
  std::vector<int64_t> xs(k + 1, 1), os(k + 1, 1);
  for (int i = k - 1; i >= 0; --i) {
    xs[i] = xs[i + 1] * x[lead + i];
    os[i] = os[i + 1] * shape[i];
  }
  int64_t instances = 1;
  for (int i = 0; i < lead; ++i) instances *= x[i];
  const T* xp = xt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  std::vector<int64_t> offset(k);
  for (int64_t in = 0; in < instances; ++in) {
    for (int i = 0; i < k; ++i) {
      std::uniform_int_distribution<int64_t> dist(0, x[lead + i] - shape[i]);
      offset[i] = dist(engine);
    }
    const T* src = xp + in * xs[0];
    T* dst = out + in * os[0];
    // Walk the output block row by row (the last dim is copied whole).
    const int64_t rows = os[0] / shape[k - 1];
    for (int64_t r = 0; r < rows; ++r) {
      int64_t rem = r, from = offset[k - 1];
      for (int i = k - 2; i >= 0; --i) {
        const int64_t idx = rem % shape[i];
        rem /= shape[i];
        from += (idx + offset[i]) * xs[i + 1];
      }
      std::copy(src + from, src + from + shape[k - 1], dst + r * shape[k - 1]);
    }
  }
  const int64_t next = static_cast<int64_t>(engine());
  Tensor* seed_out = ctx.Output("SeedOut");
  seed_out->Resize(DDim{1});
  seed_out->mutable_data<int64_t>(Place::CPU())[0] = next;
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(random_crop)
    .Doc(
        "Out = X with its last len(shape) dims cropped to shape at an offset drawn uniformly "
        "per instance; SeedOut = the next seed of the engine seeded by Seed.")
    .Input("X", "input [..., d_1, ..., d_k]")
    .Input("Seed", "int64 [1]: the engine's seed")
    .Output("Out", "cropped input [..., shape]")
    .Output("SeedOut", "int64 [1]: the next seed (normally the Seed variable)")
    .RequiredAttr<std::vector<int>>("shape", "sizes of the trailing dims after cropping")
    .Attr<int>("startup_seed", 0, "the seed the layer initialised Seed with (informational)")
    .InferShape(RandomCropInferShape)
    .Kernel(Place::kCPU, proto::FP32, RandomCropKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, RandomCropKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, RandomCropKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, RandomCropKernel<int64_t>);

}  // namespace loom::ops
