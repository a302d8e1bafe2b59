// slice: a box of Input selected by [start, end) ranges on some axes, with Python's rules for
// negative and out-of-range bounds. slice_grad puts Out@GRAD back into a zero Input@GRAD.
#include <algorithm>

#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

struct SliceAttrs {
  const std::vector<int>& axes;
  const std::vector<int>& starts;
  const std::vector<int>& ends;
};

template <typename Ctx>
SliceAttrs ReadSliceAttrs(const Ctx& ctx) {
  return SliceAttrs{ctx.template Attr<std::vector<int>>("axes"),
                    ctx.template Attr<std::vector<int>>("starts"),
                    ctx.template Attr<std::vector<int>>("ends")};
}

Status SliceInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input");
  SliceAttrs a = ReadSliceAttrs(*ctx);
  if (a.starts.size() != a.axes.size() || a.ends.size() != a.axes.size())
    return ctx->Error("attributes 'axes' ", IntsToString(a.axes), ", 'starts' ",
                      IntsToString(a.starts), " and 'ends' ", IntsToString(a.ends),
                      " must have the same length");
  std::vector<bool> seen(in.size(), false);
  for (int axis : a.axes) {
    int n = NormalizeAxis(axis, in.size());
    if (n < 0)
      return ctx->Error("axis ", axis, " of attribute 'axes' ", IntsToString(a.axes),
                        " is out of range for ", ctx->DescribeInput("Input"));
    if (seen[n])
      return ctx->Error("attribute 'axes' ", IntsToString(a.axes), " names dim ", n, " twice");
    seen[n] = true;
  }
  ctx->SetOutputDim("Out", ComputeBox(in, a.axes, a.starts, a.ends).dims);
  ctx->SetOutputDtype("Out", ctx->InputDtype("Input"));
  return Status::OK();
}

Status SliceGradInferShape(InferShapeContext* ctx) { return GradLikeInput(ctx, "Input"); }

// Out = the box of x.
template <typename T>
void SliceCompute(const Tensor& x, const SliceBox& box, Tensor* out, const Place& place) {
  std::vector<int64_t> xs = Strides(x.dims()), os = Strides(box.dims);
  int64_t base = 0;
  for (int d = 0; d < x.dims().size(); ++d) base += box.offset[d] * xs[d];
  T* o = out->mutable_data<T>(place);
  if (box.dims.numel() == 0) return;  // an empty box: x may hold no data at all
  StridedCopy<T>(box.dims, x.data<T>() + base, xs.data(), o, os.data());
}

// dx = zeros with g in the box.
template <typename T>
void SliceGradCompute(const Tensor& g, const SliceBox& box, Tensor* dx, const Place& place) {
  T* d = dx->mutable_data<T>(place);
  std::fill(d, d + dx->numel(), T(0));
  if (box.dims.numel() == 0) return;  // nothing was sliced: g holds no data
  std::vector<int64_t> xs = Strides(dx->dims()), gs = Strides(box.dims);
  int64_t base = 0;
  for (int d2 = 0; d2 < dx->dims().size(); ++d2) base += box.offset[d2] * xs[d2];
  StridedCopy<T>(box.dims, g.data<T>(), gs.data(), d + base, xs.data());
}

template <typename T>
Status SliceKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  SliceAttrs a = ReadSliceAttrs(ctx);
  SliceCompute<T>(x, ComputeBox(x.dims(), a.axes, a.starts, a.ends), ctx.Output("Out"),
                  ctx.place());
  return Status::OK();
}

template <typename T>
Status SliceGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Input@GRAD");
  if (!dx) return Status::OK();
  SliceAttrs a = ReadSliceAttrs(ctx);
  SliceGradCompute<T>(ctx.Input("Out@GRAD"),
                      ComputeBox(ctx.Input("Input").dims(), a.axes, a.starts, a.ends), dx,
                      ctx.place());
  return Status::OK();
}

std::vector<proto::OpDesc> SliceGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("slice_grad");
  op.SetInput("Input", fwd.Input("Input"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("Input@GRAD", {GradVarName(fwd.Input("Input")[0])});
  for (const char* name : {"axes", "starts", "ends"})
    op.SetAttr(name, fwd.Attr<std::vector<int>>(name, {}));
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(slice)
    .Doc(
        "Out = Input[starts[i]:ends[i]] on each dim axes[i] (other dims whole). Negative "
        "bounds count from the end; bounds are clamped to [0, dim] as in Python.")
    .Input("Input", "input")
    .Output("Out", "the selected box")
    .RequiredAttr<std::vector<int>>("axes", "dims to slice (negative counts from the end)")
    .RequiredAttr<std::vector<int>>("starts", "first index per axis (inclusive)")
    .RequiredAttr<std::vector<int>>("ends", "last index per axis (exclusive)")
    .InferShape(SliceInferShape)
    .GradMaker(SliceGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(SliceKernel);

LOOM_REGISTER_OP(slice_grad)
    .Doc("gradient of slice: Input@GRAD = zeros with Out@GRAD in the sliced box")
    .Input("Input", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of Out")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .AttrsFrom("slice")
    .InferShape(SliceGradInferShape)
    .LOOM_SHAPE_KERNELS_FLOAT(SliceGradKernel);

}  // namespace loom::ops
