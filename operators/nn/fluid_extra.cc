// Ops Fluid's book models use beside the core set: sigmoid_cross_entropy_with_logits,
// fill_constant_batch_size_like, one_hot, shape, expand, cos_sim, argsort, where_index and
// clip_by_norm. Semantics are Fluid 1.x's (each op's Doc states them).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "operators/common.h"
#include "operators/math/fill_value.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// ---- sigmoid_cross_entropy_with_logits ----
// Out = max(x, 0) - x z + log(1 + exp(-|x|)) element-wise (0 where z == ignore_index); with
// normalize, divided by the count of labels that are not ignored.
Status SigmoidXentInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), z = ctx->InputDim("Label");
  if (!DimsCompatible(x, z))
    return ctx->Error(ctx->DescribeInput("Label"), " must have the dims of ",
                      ctx->DescribeInput("X"));
  if (ctx->InputDtype("X") != ctx->InputDtype("Label"))
    return ctx->Error(ctx->DescribeInput("Label"), " must have the dtype of ",
                      ctx->DescribeInput("X"), " (labels are probabilities in [0, 1])");
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
T KeptCount(const T* z, int64_t n, T ignore, bool normalize) {
  if (!normalize) return T(1);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += z[i] != ignore;
  return static_cast<T>(std::max<int64_t>(kept, 1));
}

template <typename T>
Status SigmoidXentKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* z = ctx.Input("Label").data<T>();
  const int64_t n = xt.numel();
  const T ignore = static_cast<T>(ctx.Attr<int>("ignore_index"));
  const T count = KeptCount(z, n, ignore, ctx.Attr<bool>("normalize"));
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    out[i] =
        z[i] == ignore
            ? T(0)
            : (std::max(x[i], T(0)) - x[i] * z[i] + std::log1p(std::exp(-std::abs(x[i])))) / count;
  return Status::OK();
}

template <typename T>
Status SigmoidXentGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* z = ctx.Input("Label").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const int64_t n = xt.numel();
  const T ignore = static_cast<T>(ctx.Attr<int>("ignore_index"));
  const T count = KeptCount(z, n, ignore, ctx.Attr<bool>("normalize"));
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i)
    o[i] = z[i] == ignore ? T(0) : g[i] * (T(1) / (T(1) + std::exp(-x[i])) - z[i]) / count;
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

// ---- one_hot ----
Status OneHotInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  if (x.size() < 1 || (x[x.size() - 1] >= 0 && x[x.size() - 1] != 1))
    return ctx->Error(ctx->DescribeInput("X"), " must end in a dim of 1 (ids [..., 1])");
  const int depth = ctx->Attr<int>("depth");
  if (depth < 1) return ctx->Error("depth must be >= 1, got ", depth);
  DDim out = x;
  out[x.size() - 1] = depth;
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

template <typename I>
Status OneHotKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t depth = ctx.Attr<int>("depth");
  const bool allow = ctx.Attr<bool>("allow_out_of_range");
  const I* ids = x.data<I>();
  Tensor* out = ctx.Output("Out");
  DDim d = x.dims();
  d[d.size() - 1] = depth;
  out->Resize(d);
  const int64_t n = x.numel();
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    std::fill(o, o + n * depth, T(0));
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] < 0 || ids[i] >= depth) {
        if (allow) continue;
        return ctx.Error("id ", static_cast<int64_t>(ids[i]), " at ", i,
                         " is outside [0, depth = ", depth, ")");
      }
      o[i * depth + static_cast<int64_t>(ids[i])] = T(1);
    }
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

// ---- shape ----
Status ShapeInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim({static_cast<int64_t>(ctx->InputDim("Input").size())}));
  ctx->SetOutputDtype("Out", proto::INT32);
  return Status::OK();
}

Status ShapeKernel(const KernelContext& ctx) {
  const DDim& d = ctx.Input("Input").dims();
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(d.size())}));
  int32_t* o = out->mutable_data<int32_t>(Place::CPU());
  for (int i = 0; i < d.size(); ++i) o[i] = static_cast<int32_t>(d[i]);
  return Status::OK();
}

// ---- expand ----
Status ExpandInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  const auto& times = ctx->Attr<std::vector<int>>("expand_times");
  if (static_cast<int>(times.size()) != x.size())
    return ctx->Error("expand_times has ", times.size(), " entries, ", ctx->DescribeInput("X"),
                      " has rank ", x.size());
  DDim out = x;
  for (int i = 0; i < x.size(); ++i) {
    if (times[i] < 1) return ctx->Error("expand_times[", i, "] = ", times[i], " is not >= 1");
    if (x[i] >= 0) out[i] = x[i] * times[i];
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

// Visits every (output index, input index) pair of a tiling of in (dims) by times.
template <typename F>
void ForEachTiled(const DDim& in, const std::vector<int>& times, F f) {
  const int rank = in.size();
  std::vector<int64_t> out_dims(rank), idx(rank, 0);
  int64_t total = 1;
  for (int i = 0; i < rank; ++i) total *= (out_dims[i] = in[i] * times[i]);
  for (int64_t o = 0; o < total; ++o) {
    int64_t src = 0;
    for (int i = 0; i < rank; ++i) src = src * in[i] + idx[i] % in[i];
    f(o, src);
    for (int i = rank - 1; i >= 0; --i) {
      if (++idx[i] < out_dims[i]) break;
      idx[i] = 0;
    }
  }
}

template <typename T>
Status ExpandKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const auto& times = ctx.Attr<std::vector<int>>("expand_times");
  const T* in = x.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  ForEachTiled(x.dims(), times, [&](int64_t o, int64_t i) { out[o] = in[i]; });
  return Status::OK();
}

template <typename T>
Status ExpandGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + x.numel(), T(0));
  ForEachTiled(x.dims(), ctx.Attr<std::vector<int>>("expand_times"),
               [&](int64_t out, int64_t in) { o[in] += g[out]; });
  return Status::OK();
}

// ---- cos_sim ----
// Out[i] = <X_i, Y_i> / (|X_i| |Y_i|) over rows; Y may be one row, compared with every X row.
Status CosSimInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X"), y = ctx->InputDim("Y");
  if (x.size() < 2 || y.size() != x.size())
    return ctx->Error(ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " must have one rank >= 2");
  const int64_t fx = x.numel() < 0 ? -1 : x.numel() / std::max<int64_t>(x[0], 1);
  const int64_t fy = y.numel() < 0 ? -1 : y.numel() / std::max<int64_t>(y[0], 1);
  if (fx >= 0 && fy >= 0 && fx != fy)
    return ctx->Error("rows of ", ctx->DescribeInput("X"), " and ", ctx->DescribeInput("Y"),
                      " differ in width (", fx, " vs ", fy, ")");
  if (x[0] >= 0 && y[0] >= 0 && y[0] != 1 && y[0] != x[0])
    return ctx->Error(ctx->DescribeInput("Y"), " must have one row or as many as ",
                      ctx->DescribeInput("X"));
  ctx->SetOutputDim("Out", DDim({x[0], 1}));
  ctx->SetOutputDim("XNorm", DDim({x[0], 1}));
  ctx->SetOutputDim("YNorm", DDim({y[0], 1}));
  for (const char* s : {"Out", "XNorm", "YNorm"}) ctx->SetOutputDtype(s, ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status CosSimKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const int64_t rows = xt.dims()[0], yrows = yt.dims()[0];
  const int64_t w = rows > 0 ? xt.numel() / rows : 0;
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  T* xn = ctx.Output("XNorm")->mutable_data<T>(ctx.place());
  T* yn = ctx.Output("YNorm")->mutable_data<T>(ctx.place());
  for (int64_t r = 0; r < yrows; ++r) {
    T s = 0;
    for (int64_t j = 0; j < w; ++j) s += y[r * w + j] * y[r * w + j];
    yn[r] = std::sqrt(s);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* yr = y + (yrows == 1 ? 0 : r) * w;
    T s = 0, dot = 0;
    for (int64_t j = 0; j < w; ++j) {
      s += x[r * w + j] * x[r * w + j];
      dot += x[r * w + j] * yr[j];
    }
    xn[r] = std::sqrt(s);
    out[r] = dot / (xn[r] * yn[yrows == 1 ? 0 : r]);
  }
  return Status::OK();
}

// d out / d x = y / (|x| |y|) - out x / |x|^2 (and symmetrically for y, summed over the rows
// when Y is one row).
template <typename T>
Status CosSimGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  Tensor* dyt = ctx.OutputOrNull("Y@GRAD");
  const Tensor& xt = ctx.Input("X");
  const Tensor& yt = ctx.Input("Y");
  const int64_t rows = xt.dims()[0], yrows = yt.dims()[0];
  const int64_t w = rows > 0 ? xt.numel() / rows : 0;
  const T* x = xt.data<T>();
  const T* y = yt.data<T>();
  const T* out = ctx.Input("Out").data<T>();
  const T* xn = ctx.Input("XNorm").data<T>();
  const T* yn = ctx.Input("YNorm").data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* dx = dxt ? dxt->mutable_data<T>(ctx.place()) : nullptr;
  T* dy = dyt ? dyt->mutable_data<T>(ctx.place()) : nullptr;
  if (dy) std::fill(dy, dy + yt.numel(), T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t yr = yrows == 1 ? 0 : r;
    const T nx = xn[r], ny = yn[yr];
    for (int64_t j = 0; j < w; ++j) {
      const T xv = x[r * w + j], yv = y[yr * w + j];
      if (dx) dx[r * w + j] = g[r] * (yv / (nx * ny) - out[r] * xv / (nx * nx));
      if (dy) dy[yr * w + j] += g[r] * (xv / (nx * ny) - out[r] * yv / (ny * ny));
    }
  }
  return Status::OK();
}

// ---- argsort ----
Status ArgsortInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  int axis = ctx->Attr<int>("axis");
  if (axis < 0) axis += x.size();
  if (axis < 0 || axis >= x.size())
    return ctx->Error("axis ", ctx->Attr<int>("axis"), " is not a dim of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Out");
  ctx->SetOutputDim("Indices", x);
  ctx->SetOutputDtype("Indices", proto::INT64);
  return Status::OK();
}

template <typename T>
Status ArgsortKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const DDim& d = xt.dims();
  int axis = ctx.Attr<int>("axis");
  if (axis < 0) axis += d.size();
  const bool desc = ctx.Attr<bool>("descending");
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= d[i];
  for (int i = axis + 1; i < d.size(); ++i) inner *= d[i];
  const int64_t len = d[axis];
  const T* x = xt.data<T>();
  T* out = ctx.Output("Out")->mutable_data<T>(ctx.place());
  int64_t* idx = ctx.Output("Indices")->mutable_data<int64_t>(ctx.place());
  std::vector<int64_t> order(static_cast<size_t>(len));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * len * inner + in;
      std::iota(order.begin(), order.end(), 0);
      // Stable: equal values keep their order, so the result is the same on every run.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const T va = x[base + a * inner], vb = x[base + b * inner];
        return desc ? va > vb : va < vb;
      });
      for (int64_t k = 0; k < len; ++k) {
        out[base + k * inner] = x[base + order[k] * inner];
        idx[base + k * inner] = order[k];
      }
    }
  return Status::OK();
}

// ---- where_index ----
Status WhereIndexInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim({-1, static_cast<int64_t>(ctx->InputDim("Condition").size())}));
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status WhereIndexKernel(const KernelContext& ctx) {
  const Tensor& c = ctx.Input("Condition");
  const DDim& d = c.dims();
  const T* v = c.data<T>();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < c.numel(); ++i)
    if (v[i] != T(0)) hits.push_back(i);
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(hits.size()), static_cast<int64_t>(d.size())}));
  int64_t* o = out->mutable_data<int64_t>(ctx.place());
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rest = hits[h];
    for (int a = d.size() - 1; a >= 0; --a) {
      o[h * d.size() + a] = rest % d[a];
      rest /= d[a];
    }
  }
  return Status::OK();
}

// ---- clip_by_norm ----
template <typename T>
Status ClipByNormKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const int64_t n = xt.numel();
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  const double norm = std::sqrt(s), max_norm = ctx.Attr<float>("max_norm");
  const T scale = norm > max_norm ? static_cast<T>(max_norm / norm) : T(1);
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] * scale;
  return Status::OK();
}

#define LOOM_FLOAT_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

}  // namespace

LOOM_REGISTER_OP(sigmoid_cross_entropy_with_logits)
    .Doc(
        "Out = max(X, 0) - X * Label + log(1 + exp(-|X|)) element-wise (the cross entropy of "
        "sigmoid(X) against Label); 0 where Label == ignore_index; with normalize, divided by "
        "the number of labels not ignored.")
    .Input("X", "logits")
    .Input("Label", "targets in [0, 1], the dims of X")
    .Output("Out", "element-wise loss")
    .Attr<int>("ignore_index", -100, "a label value whose loss (and gradient) is 0")
    .Attr<bool>("normalize", false, "divide by the count of labels not ignored")
    .InferShape(SigmoidXentInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Label", "Out@GRAD"}, {"X"})};
    })
    .LOOM_FLOAT_KERNELS(SigmoidXentKernel);

LOOM_REGISTER_OP(sigmoid_cross_entropy_with_logits_grad)
    .Doc("X@GRAD = Out@GRAD * (sigmoid(X) - Label) (0 where ignored; normalized alike).")
    .Input("X", "forward X")
    .Input("Label", "forward Label")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("sigmoid_cross_entropy_with_logits")
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(SigmoidXentGradKernel);

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

LOOM_REGISTER_OP(one_hot)
    .Doc(
        "Out[..., j] = 1 if X[..., 0] == j else 0, for j < depth (X holds int ids, last dim 1). "
        "An id outside [0, depth) is an error, or a row of zeros with allow_out_of_range.")
    .Input("X", "ids [..., 1], int32 or int64")
    .Output("Out", "[..., depth]")
    .Attr<int>("depth", 1, "the number of classes")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .Attr<bool>("allow_out_of_range", false, "zeros for ids outside [0, depth)")
    .InferShape(OneHotInferShape)
    .Kernel(Place::kCPU, proto::INT64, OneHotKernel<int64_t>)
    .Kernel(Place::kCPU, proto::INT32, OneHotKernel<int32_t>);

LOOM_REGISTER_OP(shape)
    .Doc("Out = the dims of Input (int32).")
    .Input("Input", "any tensor")
    .Output("Out", "its dims")
    .InferShape(ShapeInferShape)
    .Kernel(Place::kCPU, proto::FP32, ShapeKernel)
    .Kernel(Place::kCPU, proto::FP64, ShapeKernel)
    .Kernel(Place::kCPU, proto::INT32, ShapeKernel)
    .Kernel(Place::kCPU, proto::INT64, ShapeKernel)
    .Kernel(Place::kCPU, proto::BOOL, ShapeKernel);

LOOM_REGISTER_OP(expand)
    .Doc("Out = X tiled expand_times[i] times along each dim i.")
    .Input("X", "the tensor to tile")
    .Output("Out", "dims X.dims * expand_times")
    .Attr<std::vector<int>>("expand_times", {}, "repeats per dim (one per dim of X)")
    .InferShape(ExpandInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .LOOM_FLOAT_KERNELS(ExpandKernel)
    .Kernel(Place::kCPU, proto::INT32, ExpandKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ExpandKernel<int64_t>);

LOOM_REGISTER_OP(expand_grad)
    .Doc("X@GRAD = the sum of Out@GRAD over the tiles.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("expand")
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(ExpandGradKernel);

LOOM_REGISTER_OP(cos_sim)
    .Doc(
        "Out[i] = <X_i, Y_i> / (|X_i| |Y_i|) over rows (Y may be a single row compared with "
        "every row of X); XNorm, YNorm are the row norms.")
    .Input("X", "[N, ...]")
    .Input("Y", "[N or 1, ...]")
    .Output("Out", "[N, 1]")
    .Output("XNorm", "[N, 1]")
    .Output("YNorm", "[N or 1, 1]")
    .InferShape(CosSimInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{
          nn::MakeGradOp(fwd, {"X", "Y", "Out", "XNorm", "YNorm", "Out@GRAD"}, {"X", "Y"})};
    })
    .LOOM_FLOAT_KERNELS(CosSimKernel);

LOOM_REGISTER_OP(cos_sim_grad)
    .Doc("X@GRAD and Y@GRAD of cos_sim.")
    .Input("X", "forward X")
    .Input("Y", "forward Y")
    .Input("Out", "forward Out")
    .Input("XNorm", "forward XNorm")
    .Input("YNorm", "forward YNorm")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .Output("Y@GRAD", "gradient of Y", false, true)
    .InferShape(GradInferShape)
    .LOOM_FLOAT_KERNELS(CosSimGradKernel);

LOOM_REGISTER_OP(argsort)
    .Doc(
        "Out = X sorted along axis (stable; descending if asked), Indices = the positions the "
        "sorted values came from.")
    .Input("X", "the tensor to sort")
    .Output("Out", "sorted values")
    .Output("Indices", "int64 source positions along axis")
    .Attr<int>("axis", -1, "the dim to sort along (negative: from the end)")
    .Attr<bool>("descending", false, "largest first")
    .InferShape(ArgsortInferShape)
    .LOOM_FLOAT_KERNELS(ArgsortKernel)
    .Kernel(Place::kCPU, proto::INT32, ArgsortKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ArgsortKernel<int64_t>);

LOOM_REGISTER_OP(where_index)
    .Doc("Out = the coordinates [K, rank] of the K non-zero (true) elements of Condition.")
    .Input("Condition", "a bool (or numeric) tensor")
    .Output("Out", "int64 coordinates, one row per hit, in row-major order")
    .InferShape(WhereIndexInferShape)
    .Kernel(Place::kCPU, proto::BOOL, WhereIndexKernel<bool>)
    .Kernel(Place::kCPU, proto::INT32, WhereIndexKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, WhereIndexKernel<int64_t>)
    .LOOM_FLOAT_KERNELS(WhereIndexKernel);

LOOM_REGISTER_OP(clip_by_norm)
    .Doc("Out = X * max_norm / ||X|| when the L2 norm ||X|| exceeds max_norm, else X.")
    .Input("X", "input")
    .Output("Out", "X scaled to a norm of at most max_norm")
    .Attr<float>("max_norm", 1.0f, "the largest norm kept")
    .InferShape(SameShapeInferShape)
    .LOOM_FLOAT_KERNELS(ClipByNormKernel);

}  // namespace loom::ops
