// sum (n-ary elementwise sum, used by backward to accumulate gradients) and mean.
// sum also takes SelectedRows (sparse gradients): when every input is one, Out is their
// concatenation (rows and values appended in input order, repeats kept, as Fluid's sum);
// otherwise Out is dense and each SelectedRows input is scatter-added into it.
#include <cstring>

#include "operators/common.h"

namespace loom::ops {
namespace {

bool IsSparse(const InferShapeContext* ctx, int i) {
  return ctx->InputVarType("X", i) == proto::VarType::SELECTED_ROWS;
}

Status SumVarType(InferShapeContext* ctx) {
  bool all_sparse = ctx->InputSize("X") > 0;
  for (int i = 0; i < ctx->InputSize("X"); ++i) all_sparse &= IsSparse(ctx, i);
  ctx->SetOutputVarType("Out",
                        all_sparse ? proto::VarType::SELECTED_ROWS : proto::VarType::DENSE_TENSOR);
  return Status::OK();
}

Status SumInferShape(InferShapeContext* ctx) {
  int n = ctx->InputSize("X");
  if (n == 0) return ctx->Error("needs at least one input in slot 'X'");
  // At run time a SelectedRows has no dims of its own: the dense inputs set Out's dims (the
  // kernel checks the sparse ones against them).
  int ref = 0;
  if (ctx->IsRuntime()) {
    while (ref < n && IsSparse(ctx, ref)) ++ref;
    if (ref == n) return Status::OK();
  }
  DDim first = ctx->InputDim("X", ref);
  for (int i = ref + 1; i < n; ++i) {
    if (ctx->IsRuntime() && IsSparse(ctx, i)) continue;
    DDim d = ctx->InputDim("X", i);
    if (!DimsCompatible(first, d))
      return ctx->Error("input 'X' #", i, " (var '", ctx->InputVarName("X", i), "') has dims ",
                        d.ToString(), ", input #0 (var '", ctx->InputVarName("X", 0), "') has ",
                        first.ToString());
    if (ctx->InputDtype("X", i) != ctx->InputDtype("X", ref))
      return ctx->Error("input 'X' #", i, " (var '", ctx->InputVarName("X", i), "') is ",
                        DataTypeName(ctx->InputDtype("X", i)), ", input #", ref, " (var '",
                        ctx->InputVarName("X", ref), "') is ",
                        DataTypeName(ctx->InputDtype("X", ref)));
  }
  ctx->SetOutputDim("Out", ctx->InputDim("X", ref));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X", ref));
  return Status::OK();
}

// The sparse inputs of a sum, checked against the dense shape (dims of a dense input, or the
// first sparse input's dense shape when all are sparse) and dtype.
template <typename T>
Status SparseInputs(const KernelContext& ctx, const DDim& dense, std::vector<int>* sparse) {
  for (int i = 0; i < ctx.InputSize("X"); ++i) {
    const SelectedRows* s = ctx.InputSelectedRows("X", i);
    if (!s) continue;
    std::string where =
        StrCat(ctx.Where(), ": input 'X' #", i, " (var '", ctx.InputVarName("X", i), "')");
    LOOM_RETURN_IF_ERROR(CheckSelectedRows(*s, where));
    if (s->DenseDims() != dense)
      return InvalidArgument(where, " is a SelectedRows of dense shape ", s->DenseDims().ToString(),
                             ", the other inputs are ", dense.ToString());
    if (s->value.dtype() != ToDataType<T>())
      return InvalidArgument(where, " is ", DataTypeName(s->value.dtype()), ", the sum is ",
                             DataTypeName(ToDataType<T>()));
    sparse->push_back(i);
  }
  return Status::OK();
}

// Every input sparse: Out = the inputs' rows and values, appended in input order.
template <typename T>
Status SumSparseKernel(const KernelContext& ctx) {
  const SelectedRows* first = ctx.InputSelectedRows("X", 0);
  std::vector<int> sparse;
  LOOM_RETURN_IF_ERROR(SparseInputs<T>(ctx, first->DenseDims(), &sparse));
  const int64_t w = first->RowWidth();
  SelectedRows out;
  out.height = first->height;
  for (int i : sparse) {
    const auto& r = ctx.InputSelectedRows("X", i)->rows;
    out.rows.insert(out.rows.end(), r.begin(), r.end());
  }
  DDim dims = first->value.dims();
  dims[0] = static_cast<int64_t>(out.rows.size());
  out.value.Resize(dims);
  T* dst = out.value.template mutable_data<T>(ctx.place());
  for (int i : sparse) {
    const SelectedRows* s = ctx.InputSelectedRows("X", i);
    const int64_t n = static_cast<int64_t>(s->rows.size()) * w;
    if (n) std::memcpy(dst, s->value.template data<T>(), sizeof(T) * n);
    dst += n;
  }
  *ctx.OutputSelectedRows("Out") = std::move(out);
  return Status::OK();
}

template <typename T>
void SumCompute(const std::vector<const T*>& ins, int64_t n, T* out) {
  // out may alias an input: accumulate into a local first pass over input 0.
  if (ins.size() == 1) {
    if (out != ins[0]) std::copy(ins[0], ins[0] + n, out);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    T acc = ins[0][i];
    for (size_t k = 1; k < ins.size(); ++k) acc += ins[k][i];
    out[i] = acc;
  }
}

template <typename T>
Status SumKernel(const KernelContext& ctx) {
  int n = ctx.InputSize("X");
  bool any_sparse = false, all_sparse = true;
  for (int i = 0; i < n; ++i) {
    bool s = ctx.InputSelectedRows("X", i) != nullptr;
    any_sparse |= s;
    all_sparse &= s;
  }
  if (all_sparse) return SumSparseKernel<T>(ctx);
  std::vector<const T*> ins;
  for (int i = 0; i < n; ++i)
    if (!ctx.InputSelectedRows("X", i)) ins.push_back(ctx.Input("X", i).data<T>());
  Tensor* out = ctx.Output("Out");
  // Allocating Out may replace an aliased input's buffer only when its size changes, which the
  // shape check above rules out.
  T* o = out->mutable_data<T>(ctx.place());
  SumCompute<T>(ins, out->numel(), o);
  if (!any_sparse) return Status::OK();
  std::vector<int> sparse;
  LOOM_RETURN_IF_ERROR(SparseInputs<T>(ctx, out->dims(), &sparse));
  for (int i : sparse) {
    const SelectedRows* s = ctx.InputSelectedRows("X", i);
    const int64_t w = s->RowWidth();
    const T* v = s->value.template data<T>();
    for (size_t r = 0; r < s->rows.size(); ++r) {
      T* dst = o + s->rows[r] * w;
      const T* src = v + static_cast<int64_t>(r) * w;
      for (int64_t j = 0; j < w; ++j) dst[j] += src[j];
    }
  }
  return Status::OK();
}

// d(X[0] + X[1] + ...)/dX[i] = 1: each input's gradient is a copy of Out@GRAD (a scale by 1).
std::vector<proto::OpDesc> SumGradMaker(const OpDesc& fwd) {
  std::vector<proto::OpDesc> grads;
  std::string dout = GradVarName(fwd.Output("Out")[0]);
  for (const std::string& x : fwd.Input("X")) {
    proto::OpDesc g;
    OpDesc op(&g);
    op.SetType("scale");
    op.SetInput("X", {dout});
    op.SetOutput("Out", {GradVarName(x)});
    op.SetAttr("scale", 1.0f);
    grads.push_back(std::move(g));
  }
  return grads;
}

Status MeanInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim{1});
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

template <typename T>
Status MeanKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* in = x.data<T>();
  int64_t n = x.numel();
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(in[i]);
  ctx.Output("Out")->mutable_data<T>(ctx.place())[0] = static_cast<T>(n ? acc / n : 0.0);
  return Status::OK();
}

template <typename T>
Status MeanGradKernel(const KernelContext& ctx) {
  Tensor* dx = ctx.OutputOrNull(GradVarName("X"));
  if (!dx) return Status::OK();
  int64_t n = dx->numel();
  T g = ctx.Input(GradVarName("Out")).data<T>()[0] / static_cast<T>(n ? n : 1);
  T* o = dx->mutable_data<T>(ctx.place());
  std::fill(o, o + n, g);
  return Status::OK();
}

std::vector<proto::OpDesc> MeanGradMaker(const OpDesc& fwd) {
  proto::OpDesc g;
  OpDesc op(&g);
  op.SetType("mean_grad");
  op.SetInput("X", fwd.Input("X"));
  op.SetInput(GradVarName("Out"), {GradVarName(fwd.Output("Out")[0])});
  op.SetOutput(GradVarName("X"), {GradVarName(fwd.Input("X")[0])});
  return {g};
}

}  // namespace

LOOM_REGISTER_OP(sum)
    .Doc(
        "Out = X[0] + X[1] + ... (all inputs have the same dims and dtype). SelectedRows "
        "inputs: all sparse gives their concatenation, else they are added into a dense Out.")
    .Input("X", "tensors to add", /*duplicable=*/true)
    .Output("Out", "their sum (may be one of the inputs)")
    .InferVarType(SumVarType)
    .InferShape(SumInferShape)
    .GradMaker(SumGradMaker)
    .Kernel(Place::kCPU, proto::FP32, SumKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SumKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, SumKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, SumKernel<int64_t>);

LOOM_REGISTER_OP(mean)
    .Doc("Out = mean of all elements of X, dims [1].")
    .Input("X", "input tensor")
    .Output("Out", "the mean, dims [1]")
    .InferShape(MeanInferShape)
    .GradMaker(MeanGradMaker)
    .Kernel(Place::kCPU, proto::FP32, MeanKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MeanKernel<double>);

LOOM_REGISTER_OP(mean_grad)
    .Doc("X@GRAD = Out@GRAD / numel(X) everywhere.")
    .Input("X", "forward input (for its dims)")
    .Input("Out@GRAD", "gradient of the mean")
    .Output("X@GRAD", "gradient of X", false, true)
    .InferShape(GradInferShape)
    .KernelDtypeFrom("Out@GRAD")
    .Kernel(Place::kCPU, proto::FP32, MeanGradKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, MeanGradKernel<double>);

}  // namespace loom::ops
