// Ops along an axis of a tensor, as Fluid's layers use them: arg_min, cumsum (with gradient),
// reverse (with gradient) and argsort (stable).
#include <algorithm>
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

#define LOOM_FLOAT_KERNELS(fn) \
  Kernel(Place::kCPU, proto::FP32, fn<float>).Kernel(Place::kCPU, proto::FP64, fn<double>)

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

}  // namespace loom::ops
