// Small tensor ops Fluid's layers use: arg_min, cumsum (with gradient), reverse (with
// gradient), range, linspace, eye, diag, reduce_prod (with gradient), reduce_all, reduce_any.
#include <cmath>
#include <numeric>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

// [outer, len, inner] around `axis` of dims.
void Around(const DDim& d, int axis, int64_t* outer, int64_t* len, int64_t* inner) {
  *outer = 1, *inner = 1;
  for (int i = 0; i < axis; ++i) *outer *= d[i];
  *len = d[axis];
  for (int i = axis + 1; i < d.size(); ++i) *inner *= d[i];
}

StatusOr<int> AxisOf(const KernelContext& ctx, const DDim& d, const char* attr = "axis") {
  int axis = ctx.Attr<int>(attr);
  if (axis < 0) axis += d.size();
  if (axis < 0 || axis >= d.size())
    return ctx.Error(attr, " ", ctx.Attr<int>(attr), " is not a dim of ", d.ToString());
  return axis;
}

// ---- arg_min ----
Status ArgMinInferShape(InferShapeContext* ctx) {
  DDim d = ctx->InputDim("X");
  int axis = ctx->Attr<int>("axis");
  if (axis < 0) axis += d.size();
  if (axis < 0 || axis >= d.size()) return ctx->Error("axis is not a dim of X");
  std::vector<int64_t> out;
  for (int i = 0; i < d.size(); ++i)
    if (i != axis) out.push_back(d[i]);
  if (out.empty()) out.push_back(1);
  ctx->SetOutputDim("Out", DDim(out));
  ctx->SetOutputDtype("Out", proto::INT64);
  return Status::OK();
}

template <typename T>
Status ArgMinKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(int axis, AxisOf(ctx, x.dims()));
  int64_t outer, len, inner;
  Around(x.dims(), axis, &outer, &len, &inner);
  std::vector<int64_t> out_dims;
  for (int i = 0; i < x.dims().size(); ++i)
    if (i != axis) out_dims.push_back(x.dims()[i]);
  if (out_dims.empty()) out_dims.push_back(1);
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim(out_dims));
  int64_t* o = out->mutable_data<int64_t>(ctx.place());
  const T* v = x.data<T>();
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      int64_t best = 0;
      for (int64_t k = 1; k < len; ++k)
        if (v[(a * len + k) * inner + b] < v[(a * len + best) * inner + b]) best = k;
      o[a * inner + b] = best;
    }
  return Status::OK();
}

// ---- cumsum ----
template <typename T>
void CumSum(const T* in, T* out, int64_t outer, int64_t len, int64_t inner, bool exclusive,
            bool reverse) {
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      T acc = 0;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = reverse ? len - 1 - s : s;
        const int64_t i = (a * len + k) * inner + b;
        if (exclusive) {
          out[i] = acc;
          acc += in[i];
        } else {
          acc += in[i];
          out[i] = acc;
        }
      }
    }
}

template <typename T, bool kGrad>
Status CumSumKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input(kGrad ? "Out@GRAD" : "X");
  Tensor* out = kGrad ? ctx.OutputOrNull("X@GRAD") : ctx.Output("Out");
  if (!out) return Status::OK();
  const bool flatten = ctx.Attr<bool>("flatten");
  DDim d = flatten ? DDim({x.numel()}) : x.dims();
  int axis = flatten ? 0 : ctx.Attr<int>("axis");
  if (axis < 0) axis += d.size();
  if (axis < 0 || axis >= d.size()) return ctx.Error("axis is not a dim of X");
  int64_t outer, len, inner;
  Around(d, axis, &outer, &len, &inner);
  out->Resize(x.dims());
  // The gradient of a cumulative sum is the cumulative sum the other way.
  CumSum(x.data<T>(), out->mutable_data<T>(ctx.place()), outer, len, inner,
         ctx.Attr<bool>("exclusive"), ctx.Attr<bool>("reverse") != kGrad);
  return Status::OK();
}

// ---- reverse ----
template <typename T, bool kGrad>
Status ReverseKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input(kGrad ? "Out@GRAD" : "X");
  Tensor* out = kGrad ? ctx.OutputOrNull("X@GRAD") : ctx.Output("Out");
  if (!out) return Status::OK();
  out->Resize(x.dims());
  T* o = out->mutable_data<T>(ctx.place());
  const T* v = x.data<T>();
  std::vector<bool> flip(static_cast<size_t>(x.dims().size()), false);
  for (int a : ctx.Attr<std::vector<int>>("axis")) {
    const int ax = a < 0 ? a + x.dims().size() : a;
    if (ax < 0 || ax >= x.dims().size())
      return ctx.Error("axis ", a, " is not a dim of ", x.dims().ToString());
    flip[static_cast<size_t>(ax)] = true;
  }
  const int rank = x.dims().size();
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    int64_t src = 0;
    for (int a = 0; a < rank; ++a)
      src = src * x.dims()[a] + (flip[a] ? x.dims()[a] - 1 - idx[a] : idx[a]);
    o[i] = v[src];
    for (int a = rank - 1; a >= 0; --a) {
      if (++idx[a] < x.dims()[a]) break;
      idx[a] = 0;
    }
  }
  return Status::OK();
}

// ---- range / linspace / eye / diag ----
template <typename T>
Status RangeKernel(const KernelContext& ctx) {
  const T start = ctx.Input("Start").data<T>()[0], end = ctx.Input("End").data<T>()[0];
  const T step = ctx.Input("Step").data<T>()[0];
  if (step == T(0)) return ctx.Error("Step is 0");
  const double n = std::ceil(static_cast<double>(end - start) / static_cast<double>(step));
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({count}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < count; ++i) o[i] = start + static_cast<T>(i) * step;
  return Status::OK();
}

template <typename T>
Status LinspaceKernel(const KernelContext& ctx) {
  const T start = ctx.Input("Start").data<T>()[0], stop = ctx.Input("Stop").data<T>()[0];
  const Tensor& nt = ctx.Input("Num");
  const int64_t num = nt.dtype() == proto::INT64 ? nt.data<int64_t>()[0] : nt.data<int32_t>()[0];
  if (num < 1) return ctx.Error("Num must be >= 1, got ", num);
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({num}));
  T* o = out->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < num; ++i)
    o[i] = num == 1 ? start
                    : static_cast<T>(start + (stop - start) * static_cast<double>(i) /
                                                 static_cast<double>(num - 1));
  return Status::OK();
}

Status EyeKernel(const KernelContext& ctx) {
  const int64_t rows = ctx.Attr<int64_t>("num_rows");
  int64_t cols = ctx.Attr<int64_t>("num_columns");
  if (cols < 0) cols = rows;
  if (rows < 0) return ctx.Error("num_rows must be >= 0");
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({rows, cols}));
  auto fill = [&](auto* o) {
    using T = std::remove_pointer_t<decltype(o)>;
    for (int64_t i = 0; i < rows * cols; ++i) o[i] = T(0);
    for (int64_t i = 0; i < std::min(rows, cols); ++i) o[i * cols + i] = T(1);
    return Status::OK();
  };
  switch (static_cast<DataType>(ctx.Attr<int>("dtype"))) {
    case proto::FP32: return fill(out->mutable_data<float>(ctx.place()));
    case proto::FP64: return fill(out->mutable_data<double>(ctx.place()));
    case proto::INT32: return fill(out->mutable_data<int32_t>(ctx.place()));
    case proto::INT64: return fill(out->mutable_data<int64_t>(ctx.place()));
    default: return ctx.Error("dtype is not float or int");
  }
}

template <typename T>
Status DiagKernel(const KernelContext& ctx) {
  const Tensor& d = ctx.Input("Diagonal");
  const int64_t n = d.numel();
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({n, n}));
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + n * n, T(0));
  for (int64_t i = 0; i < n; ++i) o[i * n + i] = d.data<T>()[i];
  return Status::OK();
}

// ---- reduce_prod / reduce_all / reduce_any ----
StatusOr<std::vector<bool>> ReducedAxes(const KernelContext& ctx, const DDim& d) {
  std::vector<bool> red(static_cast<size_t>(d.size()), ctx.Attr<bool>("reduce_all"));
  if (!ctx.Attr<bool>("reduce_all"))
    for (int a : ctx.Attr<std::vector<int>>("dim")) {
      const int ax = a < 0 ? a + d.size() : a;
      if (ax < 0 || ax >= d.size()) return ctx.Error("dim ", a, " is not a dim of ", d.ToString());
      red[static_cast<size_t>(ax)] = true;
    }
  return red;
}

DDim ReducedDims(const DDim& d, const std::vector<bool>& red, bool keep) {
  std::vector<int64_t> out;
  for (int i = 0; i < d.size(); ++i)
    if (!red[static_cast<size_t>(i)])
      out.push_back(d[i]);
    else if (keep)
      out.push_back(1);
  if (out.empty()) out.push_back(1);
  return DDim(out);
}

// The output index of every input element.
std::vector<int64_t> OutIndex(const DDim& d, const std::vector<bool>& red) {
  std::vector<int64_t> map(static_cast<size_t>(d.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(d.size()), 0);
  for (int64_t i = 0; i < d.numel(); ++i) {
    int64_t o = 0;
    for (int a = 0; a < d.size(); ++a)
      if (!red[static_cast<size_t>(a)]) o = o * d[a] + idx[a];
    map[static_cast<size_t>(i)] = o;
    for (int a = d.size() - 1; a >= 0; --a) {
      if (++idx[a] < d[a]) break;
      idx[a] = 0;
    }
  }
  return map;
}

Status ReduceInferShape(InferShapeContext* ctx) {
  DDim d = ctx->InputDim("X");
  std::vector<bool> red(static_cast<size_t>(d.size()), ctx->Attr<bool>("reduce_all"));
  if (!ctx->Attr<bool>("reduce_all"))
    for (int a : ctx->Attr<std::vector<int>>("dim")) {
      const int ax = a < 0 ? a + d.size() : a;
      if (ax < 0 || ax >= d.size()) return ctx->Error("dim ", a, " is not a dim of X");
      red[static_cast<size_t>(ax)] = true;
    }
  ctx->SetOutputDim("Out", ReducedDims(d, red, ctx->Attr<bool>("keep_dim")));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status ReduceProdKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> red, ReducedAxes(ctx, x.dims()));
  Tensor* out = ctx.Output("Out");
  out->Resize(ReducedDims(x.dims(), red, ctx.Attr<bool>("keep_dim")));
  T* o = out->mutable_data<T>(ctx.place());
  std::fill(o, o + out->numel(), T(1));
  const auto map = OutIndex(x.dims(), red);
  for (int64_t i = 0; i < x.numel(); ++i) o[map[i]] *= x.data<T>()[i];
  return Status::OK();
}

// d prod / d x_i = the product of the others (computed directly: exact with zeros).
template <typename T>
Status ReduceProdGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> red, ReducedAxes(ctx, x.dims()));
  const auto map = OutIndex(x.dims(), red);
  const T* g = ctx.Input("Out@GRAD").data<T>();
  const T* v = x.data<T>();
  dx->Resize(x.dims());
  T* o = dx->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < x.numel(); ++i) {
    T others = 1;
    for (int64_t j = 0; j < x.numel(); ++j)
      if (j != i && map[j] == map[i]) others *= v[j];
    o[i] = g[map[i]] * others;
  }
  return Status::OK();
}

template <bool kAll>
Status ReduceBoolKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  LOOM_ASSIGN_OR_RETURN(std::vector<bool> red, ReducedAxes(ctx, x.dims()));
  Tensor* out = ctx.Output("Out");
  out->Resize(ReducedDims(x.dims(), red, ctx.Attr<bool>("keep_dim")));
  bool* o = out->mutable_data<bool>(ctx.place());
  std::fill(o, o + out->numel(), kAll);
  const auto map = OutIndex(x.dims(), red);
  for (int64_t i = 0; i < x.numel(); ++i)
    o[map[i]] = kAll ? (o[map[i]] && x.data<bool>()[i]) : (o[map[i]] || x.data<bool>()[i]);
  return Status::OK();
}

#define LOOM_REDUCE_ATTRS                                                       \
  Attr<std::vector<int>>("dim", {0}, "dims to reduce (negative: from the end)") \
      .Attr<bool>("keep_dim", false, "keep reduced dims as 1")                  \
      .Attr<bool>("reduce_all", false, "reduce every dim")

}  // namespace

LOOM_REGISTER_OP(arg_min)
    .Doc("Index of the smallest element along axis (first one on ties), int64.")
    .Input("X", "input")
    .Output("Out", "int64 indices; X's dims without axis")
    .Attr<int>("axis", -1, "axis to search (negative counts from the end)")
    .InferShape(ArgMinInferShape)
    .Kernel(Place::kCPU, proto::FP32, ArgMinKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ArgMinKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, ArgMinKernel<int64_t>);

LOOM_REGISTER_OP(cumsum)
    .Doc("Out = the running sum of X along axis (exclusive: before each element; reverse).")
    .Input("X", "input")
    .Output("Out", "X's dims")
    .Attr<int>("axis", -1, "the axis")
    .Attr<bool>("exclusive", false, "sum the elements before each one")
    .Attr<bool>("reverse", false, "sum from the end")
    .Attr<bool>("flatten", false, "over all elements in order")
    .InferShape(SameShapeInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, CumSumKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, CumSumKernel<double, false>)
    .Kernel(Place::kCPU, proto::INT64, CumSumKernel<int64_t, false>);

LOOM_REGISTER_OP(cumsum_grad)
    .Doc("X@GRAD = the running sum of Out@GRAD the other way.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("cumsum")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, CumSumKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, CumSumKernel<double, true>);

LOOM_REGISTER_OP(reverse)
    .Doc("Out = X with the order along each of `axis` reversed.")
    .Input("X", "input")
    .Output("Out", "X's dims")
    .Attr<std::vector<int>>("axis", {0}, "axes to reverse")
    .InferShape(SameShapeInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, ReverseKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, ReverseKernel<double, false>)
    .Kernel(Place::kCPU, proto::INT64, ReverseKernel<int64_t, false>);

LOOM_REGISTER_OP(reverse_grad)
    .Doc("X@GRAD = Out@GRAD reversed back.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("reverse")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, ReverseKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, ReverseKernel<double, true>);

LOOM_REGISTER_OP(range)
    .Doc("Out = start, start + step, ... up to (not including) end.")
    .Input("Start", "one element")
    .Input("End", "one element")
    .Input("Step", "one element")
    .Output("Out", "the values")
    .InferShape([](InferShapeContext* ctx) {
      ctx->SetOutputDim("Out", DDim({-1}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Start"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, RangeKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, RangeKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, RangeKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, RangeKernel<int64_t>);

LOOM_REGISTER_OP(linspace)
    .Doc("Out = Num values evenly spaced from Start to Stop (both included).")
    .Input("Start", "one element")
    .Input("Stop", "one element")
    .Input("Num", "one int element")
    .Output("Out", "the values")
    .InferShape([](InferShapeContext* ctx) {
      ctx->SetOutputDim("Out", DDim({-1}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Start"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, LinspaceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LinspaceKernel<double>);

LOOM_REGISTER_OP(eye)
    .Doc("Out = the num_rows x num_columns identity (num_columns < 0: square).")
    .Output("Out", "the matrix")
    .Attr<int64_t>("num_rows", 1, "rows")
    .Attr<int64_t>("num_columns", -1, "columns; < 0: num_rows")
    .Attr<int>("dtype", proto::FP32, "DataType code of Out", ValidDtype())
    .InferShape([](InferShapeContext* ctx) {
      const int64_t r = ctx->Attr<int64_t>("num_rows"), c = ctx->Attr<int64_t>("num_columns");
      if (r < 0) return ctx->Error("num_rows must be >= 0, got ", r);
      ctx->SetOutputDim("Out", DDim({r, c < 0 ? r : c}));
      ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, EyeKernel)
    .Kernel(Place::kCPU, proto::FP64, EyeKernel)
    .Kernel(Place::kCPU, proto::INT32, EyeKernel)
    .Kernel(Place::kCPU, proto::INT64, EyeKernel);

LOOM_REGISTER_OP(diag)
    .Doc("Out = the square matrix with Diagonal on its diagonal.")
    .Input("Diagonal", "a vector")
    .Output("Out", "[n, n]")
    .InferShape([](InferShapeContext* ctx) {
      const int64_t n = ctx->InputDim("Diagonal").numel();
      ctx->SetOutputDim("Out", DDim({n, n}));
      ctx->SetOutputDtype("Out", ctx->InputDtype("Diagonal"));
      return Status::OK();
    })
    .Kernel(Place::kCPU, proto::FP32, DiagKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, DiagKernel<double>)
    .Kernel(Place::kCPU, proto::INT64, DiagKernel<int64_t>);

LOOM_REGISTER_OP(reduce_prod)
    .Doc("Out = the product of X over dim (or every dim with reduce_all).")
    .Input("X", "input")
    .Output("Out", "the products")
    .LOOM_REDUCE_ATTRS.InferShape(ReduceInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Out@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, ReduceProdKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ReduceProdKernel<double>);

LOOM_REGISTER_OP(reduce_prod_grad)
    .Doc("X@GRAD = Out@GRAD times the product of the other reduced elements.")
    .Input("X", "forward X")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("reduce_prod")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, ReduceProdGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, ReduceProdGradKernel<double>);

LOOM_REGISTER_OP(reduce_all)
    .Doc("Out = logical and of bool X over dim.")
    .Input("X", "bool input")
    .Output("Out", "bool")
    .LOOM_REDUCE_ATTRS.InferShape(ReduceInferShape)
    .Kernel(Place::kCPU, proto::BOOL, ReduceBoolKernel<true>);

LOOM_REGISTER_OP(reduce_any)
    .Doc("Out = logical or of bool X over dim.")
    .Input("X", "bool input")
    .Output("Out", "bool")
    .LOOM_REDUCE_ATTRS.InferShape(ReduceInferShape)
    .Kernel(Place::kCPU, proto::BOOL, ReduceBoolKernel<false>);

}  // namespace loom::ops
