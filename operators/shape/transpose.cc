// transpose: permutes the dims of X. Its gradient transposes Out@GRAD by the inverse
// permutation.
#include "operators/shape/shape_util.h"

namespace loom::ops {
namespace {

// Out[i_0, ..., i_{r-1}] = X[j] where j[perm[k]] = i_k.
template <typename T>
void TransposeCompute(const Tensor& x, const std::vector<int>& perm, Tensor* out,
                      const Place& place) {
  const DDim& in = x.dims();
  DDim od;
  for (int p : perm) od.push_back(in[p]);
  out->Resize(od);
  T* o = out->mutable_data<T>(place);
  std::vector<int64_t> in_strides = Strides(in), src(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) src[k] = in_strides[perm[k]];
  std::vector<int64_t> dst = Strides(od);
  StridedCopy<T>(od, x.data<T>(), src.data(), o, dst.data());
}

// The permutation in attribute axis with negative entries normalized, or an error.
Status ReadPermutation(InferShapeContext* ctx, const DDim& in, const std::string& slot,
                       std::vector<int>* perm) {
  const auto& axis = ctx->Attr<std::vector<int>>("axis");
  int rank = in.size();
  auto bad = [&](const std::string& why) {
    return ctx->Error("attribute 'axis' ", IntsToString(axis), " is not a permutation of the ",
                      rank, " dims of ", ctx->DescribeInput(slot), ": ", why);
  };
  if (static_cast<int>(axis.size()) != rank) return bad(StrCat("it has ", axis.size(), " entries"));
  std::vector<bool> seen(rank, false);
  perm->clear();
  for (int a : axis) {
    int n = NormalizeAxis(a, rank);
    if (n < 0) return bad(StrCat("entry ", a, " is out of range [", -rank, ", ", rank, ")"));
    if (seen[n]) return bad(StrCat("dim ", n, " appears twice"));
    seen[n] = true;
    perm->push_back(n);
  }
  return Status::OK();
}

Status TransposeInferShape(InferShapeContext* ctx) {
  DDim in = ctx->InputDim("X");
  std::vector<int> perm;
  LOOM_RETURN_IF_ERROR(ReadPermutation(ctx, in, "X", &perm));
  DDim out;
  for (int p : perm) out.push_back(in[p]);
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status TransposeGradInferShape(InferShapeContext* ctx) {
  DDim g = ctx->InputDim("Out@GRAD");
  std::vector<int> perm;
  LOOM_RETURN_IF_ERROR(ReadPermutation(ctx, g, "Out@GRAD", &perm));
  DDim dx;
  for (int p : InversePermutation(perm)) dx.push_back(g[p]);
  ctx->SetOutputDim("X@GRAD", dx);
  ctx->SetOutputDtype("X@GRAD", ctx->InputDtype("Out@GRAD"));
  return Status::OK();
}

template <typename T>
Status TransposeKernel(const KernelContext& ctx) {
  TransposeCompute<T>(ctx.Input("X"), NormalizedPerm(ctx.Attr<std::vector<int>>("axis")),
                      ctx.Output("Out"), ctx.place());
  return Status::OK();
}

template <typename T>
Status TransposeGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull("X@GRAD");
  if (!dx) return Status::OK();
  std::vector<int> inv = InversePermutation(NormalizedPerm(ctx.Attr<std::vector<int>>("axis")));
  TransposeCompute<T>(ctx.Input("Out@GRAD"), inv, dx, ctx.place());
  return Status::OK();
}

std::vector<proto::OpDesc> TransposeGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("transpose_grad");
  op.SetInput("Out@GRAD", {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput("X@GRAD", {GradVarName(fwd.Input("X")[0])});
  op.SetAttr("axis", fwd.Attr<std::vector<int>>("axis", {}));
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(transpose)
    .Doc("Out = X with its dims permuted: dim i of Out is dim axis[i] of X.")
    .Input("X", "input")
    .Output("Out", "the transposed tensor")
    .RequiredAttr<std::vector<int>>("axis",
                                    "a permutation of [0, rank) (negative entries count "
                                    "from the end)")
    .InferShape(TransposeInferShape)
    .GradMaker(TransposeGradMaker)
    .LOOM_SHAPE_KERNELS_ALL(TransposeKernel);

LOOM_REGISTER_OP(transpose_grad)
    .Doc("gradient of transpose: X@GRAD = Out@GRAD transposed by the inverse of axis")
    .Input("Out@GRAD", "gradient of Out")
    .Output("X@GRAD", "gradient of X", false, true)
    .AttrsFrom("transpose")
    .InferShape(TransposeGradInferShape)
    .LOOM_SHAPE_KERNELS_FLOAT(TransposeGradKernel);

}  // namespace loom::ops
