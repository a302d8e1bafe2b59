// reduce_prod (with gradient) and the logical reductions reduce_all and reduce_any over a set
// of dims (or all), with keep_dim; reduce.cc holds reduce_sum, reduce_mean and reduce_max.
#include <algorithm>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

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
