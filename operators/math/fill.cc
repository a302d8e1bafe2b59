// Ops that create values: fill_constant, fill_zeros_like, uniform_random, gaussian_random,
// truncated_gaussian_random (normal values, redrawn until they lie within two standard
// deviations of the mean), assign_value (Out = the values in the op's attributes: how a program
// holds a constant array, e.g. NumpyArrayInitializer) and fill_constant_batch_size_like (its
// batch dim from another tensor).
#include <random>
#include <type_traits>

#include "operators/common.h"
#include "operators/math/fill_value.h"

namespace loom::ops {
namespace {

Status ShapeFromAttr(InferShapeContext* ctx) {
  const auto& shape = ctx->Attr<std::vector<int64_t>>("shape");
  if (shape.size() > static_cast<size_t>(DDim::kMaxRank))
    return ctx->Error("attribute 'shape' has rank ", shape.size(), " (max ", DDim::kMaxRank, ")");
  for (int64_t d : shape)
    if (d < 0) return ctx->Error("attribute 'shape' has negative dim ", d);
  ctx->SetOutputDim("Out", DDim(shape));
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

Status FillConstantInferShape(InferShapeContext* ctx) {
  auto v = ResolveFillValue(ctx->Attr<std::string>("str_value"), ctx->Attr<float>("value"),
                            static_cast<DataType>(ctx->Attr<int>("dtype")));
  if (!v.ok()) return ctx->Error(v.status().message());
  return ShapeFromAttr(ctx);
}

Status UniformInferShape(InferShapeContext* ctx) {
  float lo = ctx->Attr<float>("min"), hi = ctx->Attr<float>("max");
  if (!(lo <= hi)) return ctx->Error("attribute min (", lo, ") must not exceed max (", hi, ")");
  return ShapeFromAttr(ctx);
}

Status GaussianInferShape(InferShapeContext* ctx) {
  float std = ctx->Attr<float>("std");
  if (!(std >= 0)) return ctx->Error("attribute std (", std, ") must be >= 0");
  return ShapeFromAttr(ctx);
}

template <typename T>
Status FillConstantKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  auto value = ResolveFillValue(ctx.Attr<std::string>("str_value"), ctx.Attr<float>("value"),
                                static_cast<DataType>(ctx.Attr<int>("dtype")));
  if (!value.ok()) return ctx.Error(value.status().message());
  T* o = out->mutable_data<T>(ctx.place());
  T v = std::is_integral_v<T> ? static_cast<T>(value.value().integer)
                              : static_cast<T>(value.value().real);
  std::fill(o, o + out->numel(), v);
  return Status::OK();
}

template <typename T>
Status FillZerosLikeKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + out->numel(), T(0));
  return Status::OK();
}

// Seed 0 draws a fresh seed; otherwise the stream is a pure function of the seed.
uint64_t EffectiveSeed(int seed) {
  return seed != 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
}

template <typename T>
Status UniformRandomKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  std::mt19937_64 rng(EffectiveSeed(ctx.Attr<int>("seed")));
  std::uniform_real_distribution<T> dist(ctx.Attr<float>("min"), ctx.Attr<float>("max"));
  for (int64_t i = 0, i_end = out->numel(); i < i_end; ++i) o[i] = dist(rng);
  return Status::OK();
}

template <typename T>
Status GaussianRandomKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  T* o = out->mutable_data<T>(ctx.place());
  std::mt19937_64 rng(EffectiveSeed(ctx.Attr<int>("seed")));
  std::normal_distribution<T> dist(ctx.Attr<float>("mean"), ctx.Attr<float>("std"));
  for (int64_t i = 0, i_end = out->numel(); i < i_end; ++i) o[i] = dist(rng);
  return Status::OK();
}

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

// ---- fill_constant_batch_size_like ----
Status FillBatchLikeInferShape(InferShapeContext* ctx) {
  std::vector<int64_t> shape = ctx->Attr<std::vector<int64_t>>("shape");
  const int in_idx = ctx->Attr<int>("input_dim_idx"), out_idx = ctx->Attr<int>("output_dim_idx");
  DDim in = ctx->InputDim("Input");
  if (out_idx < 0 || out_idx >= static_cast<int>(shape.size()))
    return ctx->Error("output_dim_idx ", out_idx, " is not a dim of shape (rank ", shape.size(),
                      ")");
  if (in_idx < 0 || in_idx >= in.size())
    return ctx->Error("input_dim_idx ", in_idx, " is not a dim of ", ctx->DescribeInput("Input"));
  auto v = ResolveFillValue(ctx->Attr<std::string>("str_value"), ctx->Attr<float>("value"),
                            static_cast<DataType>(ctx->Attr<int>("dtype")));
  if (!v.ok()) return ctx->Error(v.status().message());
  shape[out_idx] = in[in_idx];
  ctx->SetOutputDim("Out", DDim(shape));
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

// One kernel for every dtype of Input: Out's dtype is the attribute's.
Status FillBatchLikeKernel(const KernelContext& ctx) {
  std::vector<int64_t> shape = ctx.Attr<std::vector<int64_t>>("shape");
  const Tensor& in = ctx.Input("Input");
  shape[ctx.Attr<int>("output_dim_idx")] = in.dims()[ctx.Attr<int>("input_dim_idx")];
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  auto value =
      ResolveFillValue(ctx.Attr<std::string>("str_value"), ctx.Attr<float>("value"), dtype);
  if (!value.ok()) return ctx.Error(value.status().message());
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim(shape));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    const T v = std::is_integral_v<T> ? static_cast<T>(value.value().integer)
                                      : static_cast<T>(value.value().real);
    std::fill(o, o + out->numel(), v);
    return Status::OK();
  };
  switch (dtype) {
    case proto::FP32: return fill(out->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(out->mutable_data<double>(ctx.place()));
    case proto::INT32: return fill(out->mutable_data<int32_t>(ctx.place()));
    case proto::INT64: return fill(out->mutable_data<int64_t>(ctx.place()));
    default: return ctx.Error("dtype ", DataTypeName(dtype), " is not float or int");
  }
}

}  // namespace

LOOM_REGISTER_OP(fill_constant)
    .Doc("Out = a tensor of the given shape and dtype filled with value.")
    .Output("Out", "the filled tensor")
    .Attr<std::vector<int64_t>>("shape", {1}, "dims of Out")
    .Attr<float>("value", 0.0f, "the fill value (exact for integers up to 2^24)")
    .Attr<std::string>("str_value", "",
                       "the fill value as text, used instead of value when set: exact for any "
                       "int64 and any double")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape(FillConstantInferShape)
    .Kernel(Place::kCPU, proto::FP32, FillConstantKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, FillConstantKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, FillConstantKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, FillConstantKernel<int64_t>)
    .Kernel(Place::kCPU, proto::BOOL, FillConstantKernel<bool>);

LOOM_REGISTER_OP(fill_zeros_like)
    .Doc("Out = zeros with the dims and dtype of X.")
    .Input("X", "the tensor whose dims and dtype Out takes")
    .Output("Out", "zeros")
    .InferShape(SameShapeInferShape)
    .Kernel(Place::kCPU, proto::FP32, FillZerosLikeKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, FillZerosLikeKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, FillZerosLikeKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, FillZerosLikeKernel<int64_t>);

LOOM_REGISTER_OP(uniform_random)
    .Doc("Out ~ U[min, max), reproducible for a non-zero seed.")
    .Output("Out", "random tensor")
    .Attr<std::vector<int64_t>>("shape", {1}, "dims of Out")
    .Attr<float>("min", -1.0f, "lower bound")
    .Attr<float>("max", 1.0f, "upper bound")
    .Attr<int>("seed", 0, "random seed; 0 draws a fresh one")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape(UniformInferShape)
    .Kernel(Place::kCPU, proto::FP32, UniformRandomKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, UniformRandomKernel<double>);

LOOM_REGISTER_OP(gaussian_random)
    .Doc("Out ~ N(mean, std^2), reproducible for a non-zero seed.")
    .Output("Out", "random tensor")
    .Attr<std::vector<int64_t>>("shape", {1}, "dims of Out")
    .Attr<float>("mean", 0.0f, "mean")
    .Attr<float>("std", 1.0f, "standard deviation")
    .Attr<int>("seed", 0, "random seed; 0 draws a fresh one")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape(GaussianInferShape)
    .Kernel(Place::kCPU, proto::FP32, GaussianRandomKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, GaussianRandomKernel<double>);

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

LOOM_REGISTER_OP(fill_constant_batch_size_like)
    .Doc(
        "Out = a tensor of `shape`, with dim output_dim_idx taken from dim input_dim_idx of "
        "Input (its batch size), filled with value.")
    .Input("Input", "the tensor whose batch size Out takes")
    .Output("Out", "the filled tensor")
    .Attr<std::vector<int64_t>>("shape", {1}, "dims of Out (one of them replaced)")
    .Attr<float>("value", 0.0f, "the fill value")
    .Attr<std::string>("str_value", "", "the fill value as text (exact), used when set")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .Attr<int>("input_dim_idx", 0, "the dim of Input to copy")
    .Attr<int>("output_dim_idx", 0, "the dim of Out it replaces")
    .Attr<bool>("force_cpu", false, "accepted (Out is on the op's place)")
    .InferShape(FillBatchLikeInferShape)
    .Kernel(Place::kCPU, proto::FP32, FillBatchLikeKernel)
    .Kernel(Place::kCPU, proto::FP64, FillBatchLikeKernel)
    .Kernel(Place::kCPU, proto::INT32, FillBatchLikeKernel)
    .Kernel(Place::kCPU, proto::INT64, FillBatchLikeKernel);

}  // namespace loom::ops
