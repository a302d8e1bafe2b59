// Tensor arrays (Fluid's LoDTensorArray ops): write_to_array, read_from_array,
// lod_array_length, tensor_array_to_tensor, and is_empty (the test a decoding loop ends on).
// An array variable holds a TensorArray (framework/tensor_array.h); an element keeps the dims
// and LoD of the tensor written. Writes and reads copy, so a later write to the source tensor
// (the next iteration of a loop) never changes an element. The index is a one-element int64
// (or int32) tensor, as a loop counter is.
//
// The gradient of an array is an array (lod_array_ops.cc): write_to_array's gradient reads
// element I of it, read_from_array's adds into element I, so a while loop that reads and
// writes arrays trains.
#include <algorithm>

#include "framework/tensor_array.h"
#include "operators/common.h"

namespace loom::ops {
namespace {

// Beyond any real loop: a corrupted or uninitialized counter would otherwise allocate.
constexpr int64_t kMaxArrayLength = int64_t{1} << 24;

StatusOr<int64_t> ReadIndex(const KernelContext& ctx) {
  const Tensor& i = ctx.Input("I");
  if (i.numel() != 1 || (i.dtype() != proto::INT64 && i.dtype() != proto::INT32))
    return ctx.Error("input 'I' (var '", ctx.InputVarName("I"),
                     "') must be a one-element int64 or int32 index, it is ",
                     DataTypeName(i.dtype()), i.dims().ToString());
  Tensor host;
  const Tensor* h = &i;
  if (!i.place().is_cpu()) {
    ctx.device().Wait();
    TensorCopy(i, Place::CPU(), &host);
    h = &host;
  }
  int64_t v = h->dtype() == proto::INT64 ? h->data<int64_t>()[0] : h->data<int32_t>()[0];
  if (v < 0 || v >= kMaxArrayLength)
    return ctx.Error("index '", ctx.InputVarName("I"), "' is ", v, " (must be in [0, ",
                     kMaxArrayLength, "))");
  return v;
}

StatusOr<const TensorArray*> InputArray(const KernelContext& ctx, const std::string& slot) {
  const Variable* v = ctx.InputVariable(slot);
  if (!v || !v->IsType<TensorArray>())
    return ctx.Error("input '", slot, "' (var '", ctx.InputVarName(slot),
                     "') is not a tensor array (create it with layers.create_array)");
  return &v->Get<TensorArray>();
}

Status CompileTimeOnly(InferShapeContext* ctx, DDim out, DataType dtype) {
  if (ctx->IsRuntime()) return Status::OK();  // the kernels size their outputs
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", dtype);
  return Status::OK();
}

// ---- write_to_array: Out[I] = X ----
// The element dtype only: elements may differ in dims (the Python layer records in the
// array's declaration the dims its elements share, -1 where they differ).
Status WriteInferShape(InferShapeContext* ctx) {
  if (!ctx->IsRuntime()) ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status WriteToArrayKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int64_t i, ReadIndex(ctx));
  Variable* v = ctx.OutputVariable("Out");
  if (!v || (v->IsInitialized() && !v->IsType<TensorArray>()))
    return ctx.Error("output 'Out' (var '", ctx.OutputVarName("Out"),
                     "') is not a tensor array (create it with layers.create_array)");
  TensorArray* a = v->GetMutable<TensorArray>();
  const Tensor& x = ctx.Input("X");
  if (!x.place().is_cpu()) ctx.device().Wait();
  Tensor copy;
  TensorCopy(x, x.place(), &copy);
  if (static_cast<int64_t>(a->size()) <= i) a->resize(static_cast<size_t>(i) + 1);
  (*a)[static_cast<size_t>(i)] = std::move(copy);
  return Status::OK();
}

// ---- read_from_array: Out = X[I] ----
Status ReadInferShape(InferShapeContext* ctx) {
  return CompileTimeOnly(ctx, ctx->InputDim("X"), ctx->InputDtype("X"));
}

Status ReadFromArrayKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(int64_t i, ReadIndex(ctx));
  LOOM_ASSIGN_OR_RETURN(const TensorArray* a, InputArray(ctx, "X"));
  if (i >= static_cast<int64_t>(a->size()))
    return ctx.Error("index ", i, " is out of range: array '", ctx.InputVarName("X"), "' has ",
                     a->size(), " element(s)");
  const Tensor& e = (*a)[static_cast<size_t>(i)];
  if (!e.initialized())
    return ctx.Error("element ", i, " of array '", ctx.InputVarName("X"),
                     "' was never written (only later ones were)");
  if (!e.place().is_cpu()) ctx.device().Wait();
  Tensor copy;
  TensorCopy(e, ctx.place(), &copy);
  *ctx.Output("Out") = std::move(copy);
  return Status::OK();
}

// ---- lod_array_length: Out = len(X) ----
Status LengthInferShape(InferShapeContext* ctx) {
  return CompileTimeOnly(ctx, DDim{1}, proto::INT64);
}

Status ArrayLengthKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(const TensorArray* a, InputArray(ctx, "X"));
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim{1});
  out->mutable_data<int64_t>(Place::CPU())[0] = static_cast<int64_t>(a->size());
  return Status::OK();
}

// ---- is_empty: Out = (X has no elements) ----
Status IsEmptyInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim{1});
  ctx->SetOutputDtype("Out", proto::BOOL);
  return Status::OK();
}

Status IsEmptyKernel(const KernelContext& ctx) {
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim{1});
  out->mutable_data<bool>(Place::CPU())[0] = ctx.Input("X").numel() == 0;
  return Status::OK();
}

// ---- tensor_array_to_tensor: the elements concatenated (or stacked) along axis ----
Status ToTensorInferShape(InferShapeContext* ctx) {
  if (ctx->IsRuntime()) return Status::OK();
  DDim d = ctx->InputDim("X");
  const int axis = ctx->Attr<int>("axis");
  const bool stack = ctx->Attr<bool>("use_stack");
  const int rank = static_cast<int>(d.size()) + (stack ? 1 : 0);
  if (d.size() > 0 && (axis < 0 || axis >= rank))
    return ctx->Error("axis ", axis, " is not a dim of the ", stack ? "stacked" : "concatenated",
                      " elements (rank ", rank, ")");
  std::vector<int64_t> out(d.begin(), d.end());
  if (stack && axis <= static_cast<int>(out.size())) out.insert(out.begin() + axis, -1);
  if (!stack && axis < static_cast<int>(out.size())) out[axis] = -1;
  ctx->SetOutputDim("Out", DDim(out));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("OutIndex", DDim{-1});
  ctx->SetOutputDtype("OutIndex", proto::INT32);
  return Status::OK();
}

Status ToTensorKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(const TensorArray* a, InputArray(ctx, "X"));
  const std::string name = ctx.InputVarName("X");
  if (a->empty()) return ctx.Error("array '", name, "' is empty: nothing to concatenate");
  const int axis = ctx.Attr<int>("axis");
  const bool stack = ctx.Attr<bool>("use_stack");
  const Tensor& first = a->front();
  std::vector<Tensor> host(a->size());
  for (size_t k = 0; k < a->size(); ++k) {
    const Tensor& e = (*a)[k];
    if (!e.initialized()) return ctx.Error("element ", k, " of array '", name, "' is empty");
    if (e.dtype() != first.dtype() || e.dims().size() != first.dims().size())
      return ctx.Error("element ", k, " of array '", name, "' is ", DataTypeName(e.dtype()),
                       e.dims().ToString(), ", element 0 is ", DataTypeName(first.dtype()),
                       first.dims().ToString());
    const int rank = static_cast<int>(e.dims().size());
    if (axis < 0 || axis >= rank + (stack ? 1 : 0))
      return ctx.Error("axis ", axis, " is not a dim of element ", k, " of array '", name, "' (",
                       e.dims().ToString(), stack ? ", stacked" : "", ")");
    for (int d = 0; d < rank; ++d)
      if ((stack || d != axis) && e.dims()[d] != first.dims()[d])
        return ctx.Error("element ", k, " of array '", name, "' is ", e.dims().ToString(),
                         ", element 0 ", first.dims().ToString(), ": they differ in dim ", d,
                         stack ? " (stacking needs equal dims)" : "");
    if (!e.place().is_cpu()) ctx.device().Wait();
    TensorCopy(e, Place::CPU(), &host[k]);
  }
  // Every element as [outer, along, inner] bytes around the axis.
  std::vector<int64_t> dims(first.dims().begin(), first.dims().end());
  if (stack) dims.insert(dims.begin() + axis, 1);
  int64_t outer = 1, inner = static_cast<int64_t>(SizeOf(first.dtype()));
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (size_t d = axis + 1; d < dims.size(); ++d) inner *= dims[d];
  std::vector<int64_t> along(host.size());
  int64_t total = 0;
  for (size_t k = 0; k < host.size(); ++k) {
    along[k] = stack ? 1 : host[k].dims()[axis];
    total += along[k];
  }
  dims[axis] = total;
  Tensor out;
  out.Resize(DDim(dims));
  char* o = static_cast<char*>(out.mutable_data(Place::CPU(), first.dtype()));
  int64_t at = 0;
  for (size_t k = 0; k < host.size(); ++k) {
    const char* src = static_cast<const char*>(host[k].raw_data());
    const int64_t chunk = along[k] * inner;
    for (int64_t r = 0; r < outer; ++r)
      std::copy(src + r * chunk, src + (r + 1) * chunk, o + (r * total + at) * inner);
    at += along[k];
  }
  TensorCopy(out, ctx.place(), ctx.Output("Out"));
  if (Tensor* index = ctx.OutputOrNull("OutIndex")) {
    index->Resize(DDim{static_cast<int64_t>(host.size())});
    int32_t* p = index->mutable_data<int32_t>(Place::CPU());
    for (size_t k = 0; k < host.size(); ++k) p[k] = static_cast<int32_t>(along[k]);
  }
  return Status::OK();
}

}  // namespace

// Their gradients (lod_array_ops.cc): an array's gradient is an array.
std::vector<proto::OpDesc> WriteToArrayGradMaker(const OpDesc& fwd);
std::vector<proto::OpDesc> ReadFromArrayGradMaker(const OpDesc& fwd);
std::vector<proto::OpDesc> ArrayToTensorGradMaker(const OpDesc& fwd);

#define LOOM_ARRAY_KERNELS(place, fn)         \
  .Kernel(Place::place, proto::FP32, fn)      \
      .Kernel(Place::place, proto::FP64, fn)  \
      .Kernel(Place::place, proto::INT32, fn) \
      .Kernel(Place::place, proto::INT64, fn) \
      .Kernel(Place::place, proto::BOOL, fn)

#if LOOM_CUDA_ENABLED
#define LOOM_ARRAY_CUDA_KERNELS(fn) LOOM_ARRAY_KERNELS(kCUDA, fn)
#else
#define LOOM_ARRAY_CUDA_KERNELS(fn)
#endif

LOOM_REGISTER_OP(write_to_array)
    .Doc("Out[I] = a copy of X (dims and LoD kept); the array grows to I + 1 elements.")
    .Input("X", "the tensor to store")
    .Input("I", "one-element int64 index (on the CPU)")
    .Output("Out", "LOD_TENSOR_ARRAY variable")
    .GradMaker(WriteToArrayGradMaker)
    .InferShape(WriteInferShape) LOOM_ARRAY_KERNELS(kCPU, WriteToArrayKernel)
        LOOM_ARRAY_CUDA_KERNELS(WriteToArrayKernel);

LOOM_REGISTER_OP(read_from_array)
    .Doc("Out = a copy of X[I] (dims and LoD as written); an error when I is out of range.")
    .Input("X", "LOD_TENSOR_ARRAY variable")
    .Input("I", "one-element int64 index (on the CPU)")
    .Output("Out", "the element")
    .SetsLoD()
    .GradMaker(ReadFromArrayGradMaker)
    .InferShape(ReadInferShape) LOOM_ARRAY_KERNELS(kCPU, ReadFromArrayKernel)
        LOOM_ARRAY_CUDA_KERNELS(ReadFromArrayKernel);

LOOM_REGISTER_OP(lod_array_length)
    .Doc("Out = the number of elements of array X, as a one-element int64 on the CPU.")
    .Input("X", "LOD_TENSOR_ARRAY variable")
    .Output("Out", "int64[1]")
    .InferShape(LengthInferShape) LOOM_ARRAY_KERNELS(kCPU, ArrayLengthKernel)
        LOOM_ARRAY_CUDA_KERNELS(ArrayLengthKernel);

LOOM_REGISTER_OP(is_empty)
    .Doc("Out = true when X has no elements (e.g. beam_search selected nothing), on the CPU.")
    .Input("X", "any tensor")
    .Output("Out", "bool[1]")
    .InferShape(IsEmptyInferShape) LOOM_ARRAY_KERNELS(kCPU, IsEmptyKernel)
        LOOM_ARRAY_CUDA_KERNELS(IsEmptyKernel);

LOOM_REGISTER_OP(tensor_array_to_tensor)
    .Doc(
        "Out = the elements of array X concatenated along axis (use_stack: stacked along a "
        "new axis); OutIndex = each element's extent along axis.")
    .Input("X", "LOD_TENSOR_ARRAY variable")
    .Output("Out", "the concatenation")
    .Output("OutIndex", "int32[len(X)]", false, true)
    .Attr<int>("axis", 1, "the axis to concatenate (or stack) along")
    .Attr<bool>("use_stack", false, "stack the elements along a new axis instead")
    .SetsLoD()
    .GradMaker(ArrayToTensorGradMaker)
    .InferShape(ToTensorInferShape) LOOM_ARRAY_KERNELS(kCPU, ToTensorKernel)
        LOOM_ARRAY_CUDA_KERNELS(ToTensorKernel);

#undef LOOM_ARRAY_CUDA_KERNELS
#undef LOOM_ARRAY_KERNELS

}  // namespace loom::ops
