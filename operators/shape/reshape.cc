// reshape, squeeze, unsqueeze and flatten: ops that change dims but not the data order. The
// forward kernels copy X into Out; each gradient copies Out@GRAD into X@GRAD with X's dims.
#include "base/copy.h"
#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

// Out = X with different dims (same number of elements, same order).
template <typename T>
Status CopyReshaped(const Tensor& x, Tensor* out, const Place& place) {
  if (out->numel() != x.numel())
    return InvalidArgument("output dims ", out->dims().ToString(), " hold ", out->numel(),
                           " elements, input dims ", x.dims().ToString(), " hold ", x.numel());
  T* o = out->mutable_data<T>(place);
  if (x.numel() > 0) CopyBytes(o, x.data<T>(), static_cast<size_t>(x.numel()) * sizeof(T));
  return Status::OK();
}

template <typename T>
Status ReshapeLikeKernel(const KernelContext& ctx) {
  Status st = CopyReshaped<T>(ctx.Input("X"), ctx.Output("Out"), ctx.place());
  return st.ok() ? st : ctx.Error(st.message());
}

template <typename T>
Status ReshapeLikeGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  Status st = CopyReshaped<T>(ctx.Input("Out@GRAD"), dx, ctx.place());
  return st.ok() ? st : ctx.Error(st.message());
}

Status ReshapeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  const auto& shape = ctx->Attr<std::vector<int>>("shape");
  std::string attr = StrCat("attribute 'shape' ", IntsToString(shape));
  if (shape.empty()) return ctx->Error("attribute 'shape' is empty");
  if (shape.size() > static_cast<size_t>(DDim::kMaxRank))
    return ctx->Error(attr, " has rank ", shape.size(), " (max ", DDim::kMaxRank, ")");
  DDim out;
  int infer = -1;
  std::vector<bool> copied(in.size(), false);
  int64_t known = 1;  // product of the output dims other than the -1 and the copies
  for (size_t i = 0; i < shape.size(); ++i) {
    int s = shape[i];
    if (s == -1) {
      if (infer >= 0) return ctx->Error(attr, " has more than one -1");
      infer = static_cast<int>(i);
      out.push_back(-1);
    } else if (s == 0) {
      if (static_cast<int>(i) >= in.size())
        return ctx->Error(attr, ": 0 at position ", i, " copies that dim of ",
                          ctx->DescribeInput("X"), ", which has rank ", in.size());
      out.push_back(in[i]);
      copied[i] = true;
    } else if (s < 0) {
      return ctx->Error(attr, " has invalid dim ", s, " (dims are > 0, 0 to copy, or -1)");
    } else {
      out.push_back(s);
      known *= s;
    }
  }
  // Elements of X outside the copied dims (unknown when one of those dims is -1): the -1 and
  // the explicit dims must account for exactly these. Copied dims may be unknown.
  int64_t rest = 1;
  for (int d = 0; d < in.size() && rest >= 0; ++d)
    if (!copied[d]) rest = in[d] < 0 ? -1 : rest * in[d];
  if (rest >= 0) {
    std::string what = in.known()
                           ? StrCat(" with ", in.numel(), " elements")
                           : StrCat(" (its dims not copied by a 0 hold ", rest, " elements)");
    if (infer >= 0) {
      if (known == 0 || rest % known != 0)
        return ctx->Error("cannot reshape ", ctx->DescribeInput("X"), what, " to ", attr,
                          ": the -1 cannot be inferred");
      out[infer] = rest / known;
    } else if (known != rest) {
      int64_t total = known;
      for (int d = 0; d < in.size(); ++d)
        if (copied[d]) total = in[d] < 0 || total < 0 ? -1 : total * in[d];
      return ctx->Error("cannot reshape ", ctx->DescribeInput("X"), what, " to ", attr,
                        total >= 0 ? StrCat(" with ", total, " elements") : std::string());
    }
  }
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status SqueezeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  const auto& axes = ctx->Attr<std::vector<int>>("axes");
  std::vector<bool> drop(in.size(), false);
  if (axes.empty()) {
    for (int d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
  }
  for (int a : axes) {
    int n = NormalizeAxis(a, in.size());
    if (n < 0)
      return ctx->Error("axis ", a, " of attribute 'axes' ", IntsToString(axes),
                        " is out of range for ", ctx->DescribeInput("X"));
    if (in[n] >= 0 && in[n] != 1)
      return ctx->Error("cannot squeeze axis ", a, " of ", ctx->DescribeInput("X"),
                        ": its size is ", in[n], ", not 1");
    drop[n] = true;
  }
  DDim out;
  for (int d = 0; d < in.size(); ++d)
    if (!drop[d]) out.push_back(in[d]);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status UnsqueezeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  const auto& axes = ctx->Attr<std::vector<int>>("axes");
  if (axes.empty()) return ctx->Error("attribute 'axes' is empty");
  if (in.size() + axes.size() > static_cast<size_t>(DDim::kMaxRank))
    return ctx->Error("unsqueezing ", ctx->DescribeInput("X"), " at ", axes.size(),
                      " axes exceeds the max rank ", DDim::kMaxRank);
  std::vector<int64_t> out = in.vec();
  for (int a : axes) {
    int size = static_cast<int>(out.size());
    int cur = a < 0 ? a + size + 1 : a;
    if (cur < 0 || cur > size)
      return ctx->Error("axis ", a, " of attribute 'axes' ", IntsToString(axes),
                        " is out of range [", -size - 1, ", ", size, "] for ",
                        ctx->DescribeInput("X"));
    out.insert(out.begin() + cur, 1);
  }
  ctx->SetOutputDim("Out", DDim(out));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status FlattenInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  int axis = ctx->Attr<int>("axis");
  if (axis > in.size())
    return ctx->Error("attribute 'axis' (", axis, ") must be in [0, ", in.size(), "] for ",
                      ctx->DescribeInput("X"));
  ctx->SetOutputDim("Out", DDim{in.product(0, axis), in.product(axis, in.size())});
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status ReshapeLikeGradInferShape(InferShapeContext* ctx) { return GradLikeInput(ctx, "X"); }

// <type>_grad: X (for its dims), Out@GRAD -> X@GRAD.
std::vector<proto::OpDesc> ReshapeLikeGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType(fwd.Type() + "_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  return {g};
}

// Declares NAME_grad: X, Out@GRAD -> X@GRAD.
#define LOOM_RESHAPE_LIKE_GRAD(NAME)                                      \
  LOOM_REGISTER_OP(NAME##_grad)                                           \
      .Doc("gradient of " #NAME ": X@GRAD = Out@GRAD with the dims of X") \
      .Input("X", "forward input (for its dims)")                         \
      .Input("Out@GRAD", "gradient of Out")                               \
      .Output("X@GRAD", "gradient of X", false, true)                     \
      .InferShape(ReshapeLikeGradInferShape)                              \
      .LOOM_SHAPE_KERNELS_FLOAT(ReshapeLikeGradKernel)

}  // namespace

LOOM_REGISTER_OP(reshape)
    .Doc(
        "Out = X with dims given by attribute shape. A 0 in shape copies the dim of X at that "
        "position; one -1 is inferred from the number of elements.")
    .Input("X", "input")
    .Output("Out", "X with the new dims (same elements, same order)")
    .RequiredAttr<std::vector<int>>("shape", "new dims: > 0, 0 (copy X's dim) or one -1")
    .InferShape(ReshapeInferShape)
    .GradMaker(ReshapeLikeGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(ReshapeLikeKernel);
LOOM_RESHAPE_LIKE_GRAD(reshape);

LOOM_REGISTER_OP(squeeze)
    .Doc("Out = X without the size-1 dims listed in axes (all size-1 dims when axes is empty).")
    .Input("X", "input")
    .Output("Out", "X with the size-1 dims removed")
    .Attr<std::vector<int>>("axes", {},
                            "dims to remove (negative counts from the end); each "
                            "must have size 1")
    .InferShape(SqueezeInferShape)
    .GradMaker(ReshapeLikeGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(ReshapeLikeKernel);
LOOM_RESHAPE_LIKE_GRAD(squeeze);

LOOM_REGISTER_OP(unsqueeze)
    .Doc(
        "Out = X with size-1 dims inserted: for each entry a of axes in order, a dim of size 1 "
        "is inserted at position a of the dims built so far (negative a counts from the end, "
        "-1 appends).")
    .Input("X", "input")
    .Output("Out", "X with the new size-1 dims")
    .Attr<std::vector<int>>("axes", {}, "positions of the inserted dims (non-empty)")
    .InferShape(UnsqueezeInferShape)
    .GradMaker(ReshapeLikeGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(ReshapeLikeKernel);
LOOM_RESHAPE_LIKE_GRAD(unsqueeze);

LOOM_REGISTER_OP(flatten)
    .Doc("Out = X as a matrix [prod(dims[:axis]), prod(dims[axis:])].")
    .Input("X", "input")
    .Output("Out", "2-D view of X")
    .Attr<int>("axis", 1, "dims before axis form the rows, 0 <= axis <= rank", NonNegative("axis"))
    .InferShape(FlattenInferShape)
    .GradMaker(ReshapeLikeGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(ReshapeLikeKernel);
LOOM_RESHAPE_LIKE_GRAD(flatten);

}  // namespace loom::ops
