// teacher_student_sigmoid_loss: a sigmoid cross entropy against a click label and, where
// present, a teacher's score, both read from one Label per row (as Fluid encodes them):
//   label < -1: no click, no teacher    Y = ce(x, 0)
//   -1 <= label < 0: click, no teacher  Y = ce(x, 1)
//   0 <= label < 1: no click, teacher z = label        Y = ce(x, 0) + ce(x, z)
//   label >= 1: click, teacher z = label - 1          Y = ce(x, 1) + ce(x, z)
// with ce(x, z) = max(x, 0) - x * z + log(1 + exp(-|x|)). The gradient uses sigmoid(x) with x
// clipped to [soft_max_lower_bound, soft_max_up_bound].
#include <algorithm>
#include <cmath>

#include "operators/common.h"
#include "operators/nn/nn_util.h"

namespace loom::ops {
namespace {

Status TeacherStudentInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X"), label = ctx->InputDim("Label");
  if (x.size() != 2 || (x[1] >= 0 && x[1] != 1))
    return ctx->Error(ctx->DescribeInput("X"), " must be [batch, 1]");
  if (label.size() != 2 || (label[1] >= 0 && label[1] != 1) ||
      (x[0] >= 0 && label[0] >= 0 && x[0] != label[0]))
    return ctx->Error(ctx->DescribeInput("Label"), " must be [batch, 1] as ",
                      ctx->DescribeInput("X"));
  if (ctx->InputDtype("Label") != ctx->InputDtype("X"))
    return ctx->Error(ctx->DescribeInput("Label"), " must have the dtype of ",
                      ctx->DescribeInput("X"));
  ctx->ShareDimAndDtype("X", "Y");
  return Status::OK();
}

template <typename T>
T Ce(T x, T z) {
  return std::max(x, T(0)) - x * z + std::log1p(std::exp(-std::abs(x)));
}

template <typename T>
Status TeacherStudentKernel(const KernelContext& ctx) {
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* label = ctx.Input("Label").data<T>();
  Tensor* yt = ctx.Output("Y");
  yt->Resize(xt.dims());
  T* y = yt->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < xt.numel(); ++i) {
    const T z = label[i];
    if (z < T(-1)) {
      y[i] = Ce(x[i], T(0));
    } else if (z < T(0)) {
      y[i] = Ce(x[i], T(1));
    } else if (z < T(1)) {
      y[i] = Ce(x[i], T(0)) + Ce(x[i], z);
    } else {
      y[i] = Ce(x[i], T(1)) + Ce(x[i], z - T(1));
    }
  }
  return Status::OK();
}

template <typename T>
Status TeacherStudentGradKernel(const KernelContext& ctx) {
  Tensor* dxt = ctx.OutputOrNull("X@GRAD");
  if (!dxt) return Status::OK();
  const Tensor& xt = ctx.Input("X");
  const T* x = xt.data<T>();
  const T* label = ctx.Input("Label").data<T>();
  const T* dy = ctx.Input("Y@GRAD").data<T>();
  const T up = static_cast<T>(ctx.Attr<float>("soft_max_up_bound"));
  const T low = static_cast<T>(ctx.Attr<float>("soft_max_lower_bound"));
  dxt->Resize(xt.dims());
  T* dx = dxt->mutable_data<T>(ctx.place());
  for (int64_t i = 0; i < xt.numel(); ++i) {
    const T pred = T(1) / (T(1) + std::exp(-std::min(std::max(x[i], low), up)));
    const T z = label[i];
    T d;
    if (z < T(-1)) {
      d = pred;
    } else if (z < T(0)) {
      d = pred - T(1);
    } else {
      d = T(2) * pred - z;  // both the click and the teacher's term
    }
    dx[i] = d * dy[i];
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(teacher_student_sigmoid_loss)
    .Doc(
        "Y = sigmoid cross entropy of X against the click and the teacher's score encoded in "
        "Label: < -1 no click; [-1, 0) click; [0, 1) no click + teacher score Label; >= 1 click "
        "+ teacher score Label - 1.")
    .Input("X", "[batch, 1] logits")
    .Input("Label", "[batch, 1] encoded click and teacher score")
    .Output("Y", "[batch, 1] losses")
    .Attr<float>("soft_max_up_bound", 15.0f, "upper clip of X in the gradient's sigmoid")
    .Attr<float>("soft_max_lower_bound", -15.0f, "lower clip of X in the gradient's sigmoid")
    .InferShape(TeacherStudentInferShape)
    .GradMaker([](const OpDesc& fwd) {
      return std::vector<proto::OpDesc>{nn::MakeGradOp(fwd, {"X", "Label", "Y@GRAD"}, {"X"})};
    })
    .Kernel(Place::kCPU, proto::FP32, TeacherStudentKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, TeacherStudentKernel<double>);

LOOM_REGISTER_OP(teacher_student_sigmoid_loss_grad)
    .Doc("X@GRAD of teacher_student_sigmoid_loss.")
    .Input("X", "forward X")
    .Input("Label", "forward Label")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("teacher_student_sigmoid_loss")
    .InferShape(GradInferShape)
    .Kernel(Place::kCPU, proto::FP32, TeacherStudentGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, TeacherStudentGradKernel<double>);

}  // namespace loom::ops
