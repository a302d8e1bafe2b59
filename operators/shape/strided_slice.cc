// strided_slice: Fluid's strided box of Input. Per axis a (start, end, stride) triple picks
// start, start + stride, ... up to (not including) end; negative start / end count from the end,
// a negative stride walks backwards, and end = -1 with a negative stride means "through index
// 0". Bounds are clamped to the dim; a (start, end) pair that points against the stride is an
// error, as in Fluid. strided_slice_grad puts Out@GRAD back into a zero Input@GRAD.
#include <algorithm>
#include <cstdlib>

#include "operators/shape/strided_slice_geom.h"

namespace loom::ops {

namespace {

// The selection on a dim of `size` elements; returns false when start and end point against
// the stride (an empty selection that Fluid rejects).
bool ResolveStridedAxis(int64_t size, int64_t start, int64_t end, int64_t stride,
                        StridedAxis* out) {
  if (start < 0) start += size;
  if (end < 0 && !(end == -1 && stride < 0)) end += size;
  if (stride < 0) {  // walk (end, start] downwards: shift to a half-open [end + 1, start + 1)
    ++start;
    ++end;
  }
  if ((stride < 0 && start <= end) || (stride > 0 && start >= end)) return false;
  const int64_t left = std::max<int64_t>(0, std::min(start, end));
  const int64_t right = std::min(size, std::max(start, end));
  const int64_t step = std::abs(stride);
  out->count = right > left ? (right - left + step - 1) / step : 0;
  out->first = stride > 0 ? left : right - 1;
  out->step = stride;
  return true;
}

}  // namespace

int ResolveStrided(const DDim& in, const std::vector<int>& axes, const std::vector<int>& starts,
                   const std::vector<int>& ends, const std::vector<int>& strides,
                   std::vector<StridedAxis>* sel) {
  sel->assign(in.size(), StridedAxis{});
  for (int d = 0; d < in.size(); ++d) (*sel)[d] = StridedAxis{0, in[d], 1};
  for (size_t i = 0; i < axes.size(); ++i) {
    const int d = NormalizeAxis(axes[i], in.size());
    if (in[d] < 0) {
      (*sel)[d].count = -1;
      continue;
    }
    if (!ResolveStridedAxis(in[d], starts[i], ends[i], strides[i], &(*sel)[d]))
      return static_cast<int>(i);
  }
  return -1;
}

StridedView MakeStridedView(const DDim& in, const std::vector<StridedAxis>& sel) {
  std::vector<int64_t> xs = Strides(in);
  StridedView v;
  v.dims = in;
  v.steps.resize(in.size());
  for (int d = 0; d < in.size(); ++d) {
    v.dims[d] = sel[d].count;
    v.base += sel[d].first * xs[d];
    v.steps[d] = sel[d].step * xs[d];
  }
  return v;
}

namespace {

struct StridedAttrs {
  const std::vector<int>& axes;
  const std::vector<int>& starts;
  const std::vector<int>& ends;
  const std::vector<int>& strides;
};

template <typename Ctx>
StridedAttrs ReadStridedAttrs(const Ctx& ctx) {
  return StridedAttrs{
      ctx.template Attr<std::vector<int>>("axes"), ctx.template Attr<std::vector<int>>("starts"),
      ctx.template Attr<std::vector<int>>("ends"), ctx.template Attr<std::vector<int>>("strides")};
}

int Resolve(const DDim& in, const StridedAttrs& a, std::vector<StridedAxis>* sel) {
  return ResolveStrided(in, a.axes, a.starts, a.ends, a.strides, sel);
}

Status StridedSliceInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("Input");
  StridedAttrs a = ReadStridedAttrs(*ctx);
  const size_t n = a.axes.size();
  if (a.starts.size() != n || a.ends.size() != n || a.strides.size() != n)
    return ctx->Error("attributes 'axes' ", IntsToString(a.axes), ", 'starts' ",
                      IntsToString(a.starts), ", 'ends' ", IntsToString(a.ends), " and 'strides' ",
                      IntsToString(a.strides), " must have the same length");
  std::vector<bool> seen(in.size(), false);
  for (size_t i = 0; i < n; ++i) {
    const int d = NormalizeAxis(a.axes[i], in.size());
    if (d < 0)
      return ctx->Error("axis ", a.axes[i], " of attribute 'axes' ", IntsToString(a.axes),
                        " is out of range for ", ctx->DescribeInput("Input"));
    if (seen[d])
      return ctx->Error("attribute 'axes' ", IntsToString(a.axes), " names dim ", d, " twice");
    seen[d] = true;
    if (a.strides[i] == 0)
      return ctx->Error("attribute 'strides' ", IntsToString(a.strides), " has a 0 (axis ",
                        a.axes[i], ")");
  }
  std::vector<StridedAxis> sel;
  const int bad = Resolve(in, a, &sel);
  if (bad >= 0)
    return ctx->Error("on axis ", a.axes[bad], " start ", a.starts[bad], " and end ", a.ends[bad],
                      " select nothing with stride ", a.strides[bad], " (dim ",
                      in[NormalizeAxis(a.axes[bad], in.size())], " of ",
                      ctx->DescribeInput("Input"), ")");
  DDim out = in;
  for (int d = 0; d < in.size(); ++d) out[d] = sel[d].count;
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("Input"));
  return Status::OK();
}

StatusOr<StridedView> ViewOf(const KernelContext& ctx, const DDim& x) {
  std::vector<StridedAxis> sel;
  StridedAttrs a = ReadStridedAttrs(ctx);
  const int bad = Resolve(x, a, &sel);
  if (bad >= 0)
    return ctx.Error("on axis ", a.axes[bad], " start ", a.starts[bad], " and end ", a.ends[bad],
                     " select nothing with stride ", a.strides[bad], " (Input ", x.ToString(), ")");
  return MakeStridedView(x, sel);
}

template <typename T>
Status StridedSliceKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("Input");
  LOOM_ASSIGN_OR_RETURN(StridedView v, ViewOf(ctx, x.dims()));
  Tensor* out = ctx.Output("Out");
  out->Resize(v.dims);
  T* o = out->mutable_data<T>(ctx.place());
  if (v.dims.numel() == 0) return Status::OK();
  std::vector<int64_t> os = Strides(v.dims);
  StridedCopy<T>(v.dims, x.data<T>() + v.base, v.steps.data(), o, os.data());
  return Status::OK();
}

// Input@GRAD = zeros with Out@GRAD at the selected places (each place is selected once).
template <typename T>
Status StridedSliceGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("Input@GRAD");
  if (!dx) return Status::OK();
  const DDim x = ctx.Input("Input").dims();
  LOOM_ASSIGN_OR_RETURN(StridedView v, ViewOf(ctx, x));
  dx->Resize(x);
  T* d = dx->mutable_data<T>(ctx.place());
  std::fill(d, d + dx->numel(), T(0));
  if (v.dims.numel() == 0) return Status::OK();
  std::vector<int64_t> gs = Strides(v.dims);
  StridedCopy<T>(v.dims, ctx.Input("Out@GRAD").data<T>(), gs.data(), d + v.base, v.steps.data());
  return Status::OK();
}

std::vector<proto::OpDesc> StridedSliceGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("strided_slice_grad");
  op.SetInput("Input", fwd.Input("Input"));
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("Input@GRAD", {GradVarName(fwd.Input("Input")[0])});
  for (const char* name : {"axes", "starts", "ends", "strides"})
    op.SetAttr(name, fwd.Attr<std::vector<int>>(name, {}));
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(strided_slice)
    .Doc(
        "Out = Input[starts[i]:ends[i]:strides[i]] on each dim axes[i] (other dims whole). "
        "Negative bounds count from the end, bounds are clamped to the dim, a negative stride "
        "walks backwards (end -1 then means through index 0); a start / end pair that points "
        "against its stride is an error.")
    .Input("Input", "input")
    .Output("Out", "the selected elements")
    .RequiredAttr<std::vector<int>>("axes", "dims to slice (negative counts from the end)")
    .RequiredAttr<std::vector<int>>("starts", "first index per axis (inclusive)")
    .RequiredAttr<std::vector<int>>("ends", "last index per axis (exclusive)")
    .RequiredAttr<std::vector<int>>("strides", "step per axis (not 0; negative walks back)")
    .InferShape(StridedSliceInferShape)
    .GradMaker(StridedSliceGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(StridedSliceKernel);

LOOM_REGISTER_OP(strided_slice_grad)
    .Doc("gradient of strided_slice: Input@GRAD = zeros with Out@GRAD at the selected places")
    .Input("Input", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of Out")
    .Output("Input@GRAD", "gradient of Input", false, true)
    .AttrsFrom("strided_slice")
    .InferShape([](InferShapeContext* ctx) { return GradLikeInput(ctx, "Input"); })
    .LOOM_SHAPE_KERNELS_FLOAT(StridedSliceGradKernel);

}  // namespace loom::ops
