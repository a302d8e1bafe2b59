// concat, split and stack with their gradients. All three view the data as
// [outer, axis-and-inner] blocks and move whole rows of each block.
#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

// Dims of the concatenation of the vars of input slot along attribute axis; checks that the
// vars agree in rank, dtype and every other dim (unknown dims match anything).
Status ConcatDims(InferShapeContext* ctx, const std::string& slot, DDim* out, DataType* dtype) {
  int n = ctx->InputSize(slot);
  if (n == 0) return ctx->Error("input '", slot, "' has no vars");
  DDim first = ctx->InputDim(slot, 0);
  int rank = first.size();
  int attr_axis = ctx->Attr<int>("axis");
  int axis = NormalizeAxis(attr_axis, rank);
  if (axis < 0)
    return ctx->Error("attribute 'axis' (", attr_axis, ") is out of range [", -rank, ", ", rank,
                      ") for ", ctx->DescribeInput(slot, 0));
  *out = first;
  *dtype = ctx->InputDtype(slot, 0);
  for (int i = 1; i < n; ++i) {
    DDim d = ctx->InputDim(slot, i);
    if (d.size() != rank)
      return ctx->Error(ctx->DescribeInput(slot, i), " has rank ", d.size(), " but ",
                        ctx->DescribeInput(slot, 0), " has rank ", rank);
    if (ctx->InputDtype(slot, i) != *dtype)
      return ctx->Error(ctx->DescribeInput(slot, i), " is ", DataTypeName(ctx->InputDtype(slot, i)),
                        " but ", ctx->DescribeInput(slot, 0), " is ", DataTypeName(*dtype));
    for (int k = 0; k < rank; ++k) {
      if (k == axis) {
        (*out)[k] = (*out)[k] < 0 || d[k] < 0 ? -1 : (*out)[k] + d[k];
      } else if ((*out)[k] < 0) {
        (*out)[k] = d[k];
      } else if (d[k] >= 0 && d[k] != (*out)[k]) {
        return ctx->Error(ctx->DescribeInput(slot, i), " and ", ctx->DescribeInput(slot, 0),
                          " differ in dim ", k, " (", d[k], " vs ", (*out)[k], "); only dim ", axis,
                          " (the concat axis) may differ");
      }
    }
  }
  return Status::OK();
}

Status ConcatInferShape(InferShapeContext* ctx) {
  DDim out;
  DataType dtype;
  LOOM_RETURN_IF_ERROR(ConcatDims(ctx, "X", &out, &dtype));
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", dtype);
  return Status::OK();
}

Status ConcatGradInferShape(InferShapeContext* ctx) { return GradLikeInput(ctx, "X"); }

Status SplitGradInferShape(InferShapeContext* ctx) {
  DDim out;
  DataType dtype;
  LOOM_RETURN_IF_ERROR(ConcatDims(ctx, "Out@GRAD", &out, &dtype));
  ctx->SetOutputDim("X@GRAD", out);
  ctx->SetOutputDtype("X@GRAD", dtype);
  return Status::OK();
}

Status SplitInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  int rank = in.size();
  int attr_axis = ctx->Attr<int>("axis");
  int axis = NormalizeAxis(attr_axis, rank);
  if (axis < 0)
    return ctx->Error("attribute 'axis' (", attr_axis, ") is out of range [", -rank, ", ", rank,
                      ") for ", ctx->DescribeInput("X"));
  int num = ctx->Attr<int>("num");
  const auto& sections = ctx->Attr<std::vector<int>>("sections");
  if (num > 0 && !sections.empty())
    return ctx->Error("set attribute 'num' (", num, ") or 'sections' ", IntsToString(sections),
                      ", not both");
  if (num == 0 && sections.empty())
    return ctx->Error("one of the attributes 'num' and 'sections' must be set");
  int64_t dim = in[axis];
  std::vector<int64_t> sizes;
  if (num > 0) {
    if (dim >= 0 && dim % num != 0)
      return ctx->Error("cannot split dim ", axis, " of ", ctx->DescribeInput("X"), " into ", num,
                        " equal parts");
    sizes.assign(num, dim < 0 ? -1 : dim / num);
  } else {
    int infer = -1;
    int64_t sum = 0;
    for (size_t i = 0; i < sections.size(); ++i) {
      if (sections[i] == -1) {
        if (infer >= 0)
          return ctx->Error("attribute 'sections' ", IntsToString(sections),
                            " has more than one -1");
        infer = static_cast<int>(i);
      } else if (sections[i] < 0) {
        return ctx->Error("attribute 'sections' ", IntsToString(sections), " has invalid size ",
                          sections[i]);
      } else {
        sum += sections[i];
      }
      sizes.push_back(sections[i]);
    }
    if (dim >= 0 && (infer >= 0 ? sum > dim : sum != dim))
      return ctx->Error("attribute 'sections' ", IntsToString(sections), " sums to ", sum,
                        " but dim ", axis, " of ", ctx->DescribeInput("X"), " is ", dim);
    if (dim >= 0 && infer >= 0) sizes[infer] = dim - sum;
  }
  if (ctx->OutputSize("Out") != static_cast<int>(sizes.size()))
    return ctx->Error("output 'Out' has ", ctx->OutputSize("Out"), " vars but ",
                      ctx->DescribeInput("X"), " is split into ", sizes.size(), " parts");
  for (size_t i = 0; i < sizes.size(); ++i) {
    DDim d = in;
    d[axis] = sizes[i];
    ctx->SetOutputDim("Out", d, static_cast<int>(i));
    ctx->SetOutputDtype("Out", ctx->InputDtype("X"), static_cast<int>(i));
  }
  return Status::OK();
}

Status StackInferShape(InferShapeContext* ctx) {
  int n = ctx->InputSize("X");
  if (n == 0) return ctx->Error("input 'X' has no vars");
  DDim common = ctx->InputDim("X", 0);
  int rank = common.size();
  int attr_axis = ctx->Attr<int>("axis");
  int axis = StackAxis(attr_axis, rank);
  if (axis < 0)
    return ctx->Error("attribute 'axis' (", attr_axis, ") is out of range [", -rank - 1, ", ", rank,
                      "] for ", ctx->DescribeInput("X", 0));
  if (rank + 1 > DDim::kMaxRank)
    return ctx->Error("stacking ", ctx->DescribeInput("X", 0), " exceeds the max rank ",
                      DDim::kMaxRank);
  DataType dtype = ctx->InputDtype("X", 0);
  for (int i = 1; i < n; ++i) {
    DDim d = ctx->InputDim("X", i);
    if (!DimsCompatible(d, common))
      return ctx->Error(ctx->DescribeInput("X", i), " differs from ", ctx->DescribeInput("X", 0),
                        "; stacked inputs must have equal dims");
    if (ctx->InputDtype("X", i) != dtype)
      return ctx->Error(ctx->DescribeInput("X", i), " is ", DataTypeName(ctx->InputDtype("X", i)),
                        " but ", ctx->DescribeInput("X", 0), " is ", DataTypeName(dtype));
    for (int k = 0; k < rank; ++k)
      if (common[k] < 0) common[k] = d[k];
  }
  std::vector<int64_t> out = common.vec();
  out.insert(out.begin() + axis, n);
  ctx->SetOutputDim("Y", DDim(out));
  ctx->SetOutputDtype("Y", dtype);
  return Status::OK();
}

Status StackGradInferShape(InferShapeContext* ctx) {
  DDim g = ctx->InputDim("Y@GRAD");
  int rank = g.size() - 1;
  int attr_axis = ctx->Attr<int>("axis");
  int axis = rank < 0 ? -1 : StackAxis(attr_axis, rank);
  if (axis < 0)
    return ctx->Error("attribute 'axis' (", attr_axis, ") is out of range for ",
                      ctx->DescribeInput("Y@GRAD"));
  int n = ctx->OutputSize("X@GRAD");
  if (g[axis] >= 0 && g[axis] != n)
    return ctx->Error(ctx->DescribeInput("Y@GRAD"), " has ", g[axis], " entries in dim ", axis,
                      " but output 'X@GRAD' has ", n, " vars");
  std::vector<int64_t> x = g.vec();
  x.erase(x.begin() + axis);
  for (int i = 0; i < n; ++i) {
    if (ctx->OutputVarName("X@GRAD", i) == kEmptyVarName) continue;
    ctx->SetOutputDim("X@GRAD", DDim(x), i);
    ctx->SetOutputDtype("X@GRAD", ctx->InputDtype("Y@GRAD"), i);
  }
  return Status::OK();
}

// Concatenation of the vars of input slot along axis (dims of out already inferred).
template <typename T>
void ConcatSlot(const KernelContext& ctx, const std::string& slot, int attr_axis, Tensor* out) {
  int n = ctx.InputSize(slot);
  int rank = ctx.Input(slot, 0).dims().size();
  int axis = NormalizeAxis(attr_axis, rank);
  int64_t outer = ctx.Input(slot, 0).dims().product(0, axis);
  std::vector<const T*> pieces;
  std::vector<int64_t> inner;
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.Input(slot, i);
    pieces.push_back(x.data<T>());
    inner.push_back(x.dims().product(axis, rank));
  }
  ConcatCompute<T>(pieces, inner, outer, out->mutable_data<T>(ctx.place()));
}

template <typename T>
Status ConcatKernel(const KernelContext& ctx) {
  ConcatSlot<T>(ctx, "X", ctx.Attr<int>("axis"), ctx.Output("Out"));
  return Status::OK();
}

template <typename T>
Status SplitGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  ConcatSlot<T>(ctx, "Out@GRAD", ctx.Attr<int>("axis"), dx);
  return Status::OK();
}

// Splits `in` along axis into the tensors of output slot (null ones skipped); piece i spans
// inner[i] elements of each outer row.
template <typename T>
void SplitIntoSlot(const KernelContext& ctx, const Tensor& in, int64_t outer,
                   const std::vector<int64_t>& inner, const std::string& slot) {
  std::vector<T*> pieces;
  for (int i = 0; i < static_cast<int>(inner.size()); ++i) {
    Tensor* t = ctx.OutputOrNull(slot, i);
    pieces.push_back(t ? t->mutable_data<T>(ctx.place()) : nullptr);
  }
  SplitCompute<T>(in.data<T>(), outer, inner, pieces);
}

template <typename T>
Status ConcatGradKernel(const KernelContext& ctx) {
  const Tensor& g = ctx.Input("Out@GRAD");
  int rank = g.dims().size();
  int axis = NormalizeAxis(ctx.Attr<int>("axis"), rank);
  SplitIntoSlot<T>(ctx, g, g.dims().product(0, axis), ConcatPieceSizes(ctx, axis, rank), "X@GRAD");
  return Status::OK();
}

template <typename T>
Status SplitKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  int rank = x.dims().size();
  int axis = NormalizeAxis(ctx.Attr<int>("axis"), rank);
  std::vector<int64_t> inner =
      SplitPieceSizes(x.dims(), axis, ctx.Attr<int>("num"), ctx.Attr<std::vector<int>>("sections"),
                      ctx.OutputSize("Out"));
  SplitIntoSlot<T>(ctx, x, x.dims().product(0, axis), inner, "Out");
  return Status::OK();
}

template <typename T>
Status StackKernel(const KernelContext& ctx) {
  const Tensor& x0 = ctx.Input("X", 0);
  int rank = x0.dims().size();
  int axis = StackAxis(ctx.Attr<int>("axis"), rank);
  std::vector<const T*> pieces;
  for (int i = 0; i < ctx.InputSize("X"); ++i) pieces.push_back(ctx.Input("X", i).data<T>());
  std::vector<int64_t> inner(pieces.size(), x0.dims().product(axis, rank));
  ConcatCompute<T>(pieces, inner, x0.dims().product(0, axis),
                   ctx.Output("Y")->mutable_data<T>(ctx.place()));
  return Status::OK();
}

template <typename T>
Status StackGradKernel(const KernelContext& ctx) {
  const Tensor& g = ctx.Input("Y@GRAD");
  int rank = g.dims().size() - 1;
  int axis = StackAxis(ctx.Attr<int>("axis"), rank);
  std::vector<int64_t> inner(ctx.OutputSize("X@GRAD"), g.dims().product(axis + 1, rank + 1));
  SplitIntoSlot<T>(ctx, g, g.dims().product(0, axis), inner, "X@GRAD");
  return Status::OK();
}

std::vector<std::string> GradNames(const std::vector<std::string>& vars) {
  std::vector<std::string> out;
  for (const auto& v : vars) out.push_back(GradVarName(v));
  return out;
}

std::vector<proto::OpDesc> ConcatGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("concat_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput("Out@GRAD", GradNames(fwd.Output("Out")));
  op.SetOutput("X@GRAD", GradNames(fwd.Input("X")));
  op.SetAttr("axis", fwd.Attr<int>("axis", 0));
  return {g};
}

std::vector<proto::OpDesc> SplitGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("split_grad");
  op.SetInput("Out@GRAD", GradNames(fwd.Output("Out")));
  op.SetOutput("X@GRAD", GradNames(fwd.Input("X")));
  op.SetAttr("axis", fwd.Attr<int>("axis", 0));
  return {g};
}

std::vector<proto::OpDesc> StackGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("stack_grad");
  op.SetInput("Y@GRAD", GradNames(fwd.Output("Y")));
  op.SetOutput("X@GRAD", GradNames(fwd.Input("X")));
  op.SetAttr("axis", fwd.Attr<int>("axis", 0));
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(concat)
    .Doc("Out = the vars of X joined along axis; they must agree in every other dim.")
    .Input("X", "the tensors to join", /*duplicable=*/true)
    .Output("Out", "the concatenation")
    .Attr<int>("axis", 0, "dim to join along (negative counts from the end)")
    .InferShape(ConcatInferShape)
    .GradMaker(ConcatGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(ConcatKernel);

LOOM_REGISTER_OP(concat_grad)
    .Doc("gradient of concat: X@GRAD[i] = the part of Out@GRAD that X[i] filled")
    .Input("X", "forward inputs (for their dims)", /*duplicable=*/true)
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradients of X", /*duplicable=*/true, /*dispensable=*/true)
    .AttrsFrom("concat")
    .InferShape(ConcatGradInferShape)
    .LOOM_SHAPE_KERNELS_FLOAT(ConcatGradKernel);

LOOM_REGISTER_OP(split)
    .Doc(
        "Out = X cut along axis into num equal parts, or into parts of the sizes in sections "
        "(one of which may be -1: the rest). Out must have one var per part.")
    .Input("X", "input")
    .Output("Out", "the parts", /*duplicable=*/true)
    .Attr<int>("num", 0, "number of equal parts (0: use sections)", NonNegative("num"))
    .Attr<std::vector<int>>("sections", {}, "sizes of the parts along axis")
    .Attr<int>("axis", 0, "dim to cut (negative counts from the end)")
    .InferShape(SplitInferShape)
    .GradMaker(SplitGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(SplitKernel);

// Out@GRAD is not dispensable: backward zero-fills the grads of parts that no loss reads.
LOOM_REGISTER_OP(split_grad)
    .Doc("gradient of split: X@GRAD = concat(Out@GRAD) along axis")
    .Input("Out@GRAD", "gradients of the parts", /*duplicable=*/true)
    .Output("X@GRAD", "gradient of X", false, true)
    .Attr<int>("axis", 0, "as in the forward op")
    .InferShape(SplitGradInferShape)
    .LOOM_SHAPE_KERNELS_FLOAT(SplitGradKernel);

LOOM_REGISTER_OP(stack)
    .Doc("Y = the vars of X (equal dims) stacked along a new dim at axis.")
    .Input("X", "the tensors to stack", /*duplicable=*/true)
    .Output("Y", "the stacked tensor, rank of X + 1")
    .Attr<int>("axis", 0, "position of the new dim in Y, in [-(rank + 1), rank]")
    .InferShape(StackInferShape)
    .GradMaker(StackGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(StackKernel);

LOOM_REGISTER_OP(stack_grad)
    .Doc("gradient of stack: X@GRAD[i] = entry i of Y@GRAD along axis")
    .Input("Y@GRAD", "gradient of Y")
    .Output("X@GRAD", "gradients of X", /*duplicable=*/true, /*dispensable=*/true)
    .AttrsFrom("stack")
    .InferShape(StackGradInferShape)
    .LOOM_SHAPE_KERNELS_FLOAT(StackGradKernel);

}  // namespace loom::ops
