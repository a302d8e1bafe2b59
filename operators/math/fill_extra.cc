// assign_value (Out = the values in the op's attributes: how a program holds a constant array,
// e.g. NumpyArrayInitializer) and truncated_gaussian_random (normal values, redrawn until
// they lie within two standard deviations of the mean).
#include <random>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status AssignValueInferShape(InferShapeContext* ctx) {
  const auto& shape = ctx->Attr<std::vector<int64_t>>("shape");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return ctx->Error("attribute 'shape' has negative dim ", d);
    n *= d;
  }
  const auto dtype = static_cast<DataType>(ctx->Attr<int>("dtype"));
  size_t have = 0;
  switch (dtype) {
    case proto::FP32:
    case proto::FP64: have = ctx->Attr<std::vector<float>>("fp32_values").size(); break;
    case proto::INT32: have = ctx->Attr<std::vector<int>>("int32_values").size(); break;
    case proto::INT64: have = ctx->Attr<std::vector<int64_t>>("int64_values").size(); break;
    default: return ctx->Error("dtype ", DataTypeName(dtype), " is not fp32, fp64, int32, int64");
  }
  if (static_cast<int64_t>(have) != n)
    return ctx->Error("shape holds ", n, " values, the attribute gives ", have);
  ctx->SetOutputDim("Out", DDim(shape));
  ctx->SetOutputDtype("Out", dtype);
  return Status::OK();
}

Status AssignValueKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim(ctx.Attr<std::vector<int64_t>>("shape")));
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  auto copy = [&](const auto& values, auto* o) {
    for (size_t i = 0; i < values.size(); ++i)
      o[i] = static_cast<std::remove_pointer_t<decltype(o)>>(values[i]);
    return Status::OK();
  };
  switch (dtype) {
    case proto::FP32:
      return copy(ctx.Attr<std::vector<float>>("fp32_values"),
                  out->mutable_data<float>(ctx.place()));
    case proto::FP64:
      return copy(ctx.Attr<std::vector<float>>("fp32_values"),
                  out->mutable_data<double>(ctx.place()));
    case proto::INT32:
      return copy(ctx.Attr<std::vector<int>>("int32_values"),
                  out->mutable_data<int32_t>(ctx.place()));
    case proto::INT64:
      return copy(ctx.Attr<std::vector<int64_t>>("int64_values"),
                  out->mutable_data<int64_t>(ctx.place()));
    default: return ctx.Error("dtype ", DataTypeName(dtype), " is not supported");
  }
}

Status TruncatedInferShape(InferShapeContext* ctx) {
  if (!(ctx->Attr<float>("std") > 0))
    return ctx->Error("attribute std (", ctx->Attr<float>("std"), ") must be > 0");
  const auto& shape = ctx->Attr<std::vector<int64_t>>("shape");
  for (int64_t d : shape)
    if (d < 0) return ctx->Error("attribute 'shape' has negative dim ", d);
  ctx->SetOutputDim("Out", DDim(shape));
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

template <typename T>
Status TruncatedKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim(ctx.Attr<std::vector<int64_t>>("shape")));
  T* o = out->mutable_data<T>(ctx.place());
  const int seed = ctx.Attr<int>("seed");
  std::mt19937_64 rng(seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}());
  const T mean = ctx.Attr<float>("mean"), std = ctx.Attr<float>("std");
  std::normal_distribution<T> dist(0, 1);
  for (int64_t i = 0, n = out->numel(); i < n; ++i) {
    T v;
    do {
      v = dist(rng);
    } while (v < T(-2) || v > T(2));
    o[i] = mean + std * v;
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(assign_value)
    .Doc("Out = the values of the attribute of its dtype (fp32_values also for fp64), shaped.")
    .Output("Out", "the tensor")
    .Attr<std::vector<int64_t>>("shape", {}, "dims of Out")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .Attr<std::vector<float>>("fp32_values", {}, "values of a float tensor")
    .Attr<std::vector<int>>("int32_values", {}, "values of an int32 tensor")
    .Attr<std::vector<int64_t>>("int64_values", {}, "values of an int64 tensor")
    .InferShape(AssignValueInferShape)
    .Kernel(Place::kCPU, proto::FP32, AssignValueKernel)
    .Kernel(Place::kCPU, proto::FP64, AssignValueKernel)
    .Kernel(Place::kCPU, proto::INT32, AssignValueKernel)
    .Kernel(Place::kCPU, proto::INT64, AssignValueKernel);

LOOM_REGISTER_OP(truncated_gaussian_random)
    .Doc("Out ~ N(mean, std^2) truncated to mean +- 2 std (redrawn), reproducible for a seed.")
    .Output("Out", "random tensor")
    .Attr<std::vector<int64_t>>("shape", {1}, "dims of Out")
    .Attr<float>("mean", 0.0f, "mean")
    .Attr<float>("std", 1.0f, "standard deviation")
    .Attr<int>("seed", 0, "random seed; 0 draws a fresh one")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape(TruncatedInferShape)
    .Kernel(Place::kCPU, proto::FP32, TruncatedKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, TruncatedKernel<double>);

}  // namespace loom::ops
