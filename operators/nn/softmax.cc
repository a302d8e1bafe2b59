// softmax and log_softmax over any axis (a [pre, D, post] view), with gradients.
#include <cmath>
#include <vector>

#include "framework/parallel.h"
#include "operators/common.h"
#include "operators/math/vec_math.h"
#include "operators/nn/softmax_geom.h"

namespace loom::ops {
namespace {

Status SoftmaxInferShape(InferShapeContext* ctx) {
  int rank = ctx->InputDim("X").size();
  int axis = ctx->Attr<int>("axis");
  if (rank == 0) return ctx->Error(ctx->DescribeInput("X"), " must have rank >= 1");
  if (axis < -rank || axis >= rank)
    return ctx->Error("axis ", axis, " is out of range [", -rank, ", ", rank, ") for ",
                      ctx->DescribeInput("X"));
  return SameShapeInferShape(ctx);
}

// One [d, post] block: out[j][k] = softmax (or log_softmax) over j of x[j][k]; the loops run
// along k, which is contiguous. post == 1 is a plain row.
template <typename T, bool kLog>
void SoftmaxBlock(const T* x, T* o, int64_t d, int64_t post, T* mx, T* sum) {
  if (post == 1 && !kLog) {
    T m, log_sum;
    SoftmaxRow(x, o, d, &m, &log_sum);
    return;
  }
  if (post == 1) {
    const T m = MaxOf(x, d);
    ExpShifted(x, m, o, d);
    const T log_sum = std::log(SumOf(o, d));
    if (kLog) {
      for (int64_t j = 0; j < d; ++j) o[j] = x[j] - m - log_sum;
    } else {
      const T inv = std::exp(-log_sum);
      for (int64_t j = 0; j < d; ++j) o[j] *= inv;
    }
    return;
  }
  std::copy(x, x + post, mx);
  for (int64_t j = 1; j < d; ++j)
    for (int64_t k = 0; k < post; ++k) mx[k] = std::max(mx[k], x[j * post + k]);
  std::fill(sum, sum + post, T(0));
  for (int64_t j = 0; j < d; ++j)
    for (int64_t k = 0; k < post; ++k) sum[k] += std::exp(x[j * post + k] - mx[k]);
  for (int64_t k = 0; k < post; ++k) sum[k] = mx[k] + std::log(sum[k]);  // log-sum-exp
  for (int64_t j = 0; j < d; ++j)
    for (int64_t k = 0; k < post; ++k) {
      T v = x[j * post + k] - sum[k];
      o[j * post + k] = kLog ? v : std::exp(v);
    }
}

template <typename T, bool kLog>
Status SoftmaxKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  AxisView v = ViewAt(x.dims(), ctx.Attr<int>("axis"));
  const T* in = x.data<T>();
  T* o = ctx.Output("Out")->mutable_data<T>(ctx.place());
  if (v.d == 0) return Status::OK();
  ParallelFor(v.pre, std::max<int64_t>(1, 32768 / std::max<int64_t>(v.d * v.post, 1)),
              [&](int64_t begin, int64_t end) {
                std::vector<T> mx(v.post), sum(v.post);
                for (int64_t i = begin; i < end; ++i)
                  SoftmaxBlock<T, kLog>(in + i * v.d * v.post, o + i * v.d * v.post, v.d, v.post,
                                        mx.data(), sum.data());
              });
  return Status::OK();
}

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g); sums over the axis.
template <typename T, bool kLog>
Status SoftmaxGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  const Tensor& out = ctx.Input("Out");
  AxisView v = ViewAt(out.dims(), ctx.Attr<int>("axis"));
  const T* y = out.data<T>();
  const T* g = ctx.Input("Out@GRAD").data<T>();
  T* o = dx->mutable_data<T>(ctx.place());
  ParallelFor(v.pre, std::max<int64_t>(1, 32768 / std::max<int64_t>(v.d * v.post, 1)),
              [&](int64_t begin, int64_t end) {
                std::vector<T> acc(v.post);
                for (int64_t i = begin; i < end; ++i) {
                  const int64_t off = i * v.d * v.post;
                  const T* yb = y + off;
                  const T* gb = g + off;
                  T* ob = o + off;
                  std::fill(acc.begin(), acc.end(), T(0));
                  for (int64_t j = 0; j < v.d; ++j)
                    for (int64_t k = 0; k < v.post; ++k) {
                      const int64_t e = j * v.post + k;
                      acc[k] += kLog ? gb[e] : gb[e] * yb[e];
                    }
                  for (int64_t j = 0; j < v.d; ++j)
                    for (int64_t k = 0; k < v.post; ++k) {
                      const int64_t e = j * v.post + k;
                      ob[e] = kLog ? gb[e] - std::exp(yb[e]) * acc[k] : yb[e] * (gb[e] - acc[k]);
                    }
                }
              });
  return Status::OK();
}

Status SoftmaxGradInferShape(InferShapeContext* ctx) {
  ctx->ShareDimAndDtype("Out", "X@GRAD");
  return Status::OK();
}

template <const char* kGradType>
std::vector<proto::OpDesc> SoftmaxGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType(kGradType);
  op.SetInput("Out", fwd.Output("Out"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  op.SetAttr("axis", fwd.Attr<int>("axis", -1));
  return {g};
}

constexpr char kSoftmaxGrad[] = "softmax_grad";
constexpr char kLogSoftmaxGrad[] = "log_softmax_grad";

}  // namespace

LOOM_REGISTER_OP(softmax)
    .Doc("Out = exp(X) / sum(exp(X)) along axis.")
    .Input("X", "input [..., D]")
    .Output("Out", "probabilities, same dims")
    .Attr<int>("axis", -1, "the axis to normalize over (negative: from the end)")
    .InferShape(SoftmaxInferShape)
    .GradMaker(SoftmaxGradMaker<kSoftmaxGrad>)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxKernel<double, false>);

LOOM_REGISTER_OP(softmax_grad)
    .Doc("X@GRAD = Out * (Out@GRAD - sum(Out@GRAD * Out)).")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("softmax")
    .InferShape(SoftmaxGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxGradKernel<float, false>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxGradKernel<double, false>);

LOOM_REGISTER_OP(log_softmax)
    .Doc("Out = X - log(sum(exp(X))) along axis.")
    .Input("X", "input [..., D]")
    .Output("Out", "log-probabilities, same dims")
    .Attr<int>("axis", -1, "the axis to normalize over (negative: from the end)")
    .InferShape(SoftmaxInferShape)
    .GradMaker(SoftmaxGradMaker<kLogSoftmaxGrad>)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxKernel<double, true>);

LOOM_REGISTER_OP(log_softmax_grad)
    .Doc("X@GRAD = Out@GRAD - exp(Out) * sum(Out@GRAD).")
    .Input("Out", "forward output")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("log_softmax")
    .InferShape(SoftmaxGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, SoftmaxGradKernel<float, true>)
    .Kernel(Place::kCPU, proto::FP64, SoftmaxGradKernel<double, true>);

}  // namespace loom::ops
