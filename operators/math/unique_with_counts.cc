// unique_with_counts: Fluid's unique that also counts. Out = the distinct values of the 1-D X
// in order of first appearance, Index[i] = the position of X[i] in Out, Count[j] = how many
// times Out[j] occurs in X. Integer outputs: no gradient.
#include <algorithm>
#include <map>

#include "operators/common.h"

namespace loom::ops {
namespace {

Status UniqueWithCountsInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() != 1)
    return ctx->Error(ctx->DescribeInput("X"), " must be 1-D, got dims ", x.ToString());
  const auto dtype = static_cast<DataType>(ctx->Attr<int>("dtype"));
  if (dtype != proto::INT32 && dtype != proto::INT64)
    return ctx->Error("attribute 'dtype' (of Index and Count) must be int32 or int64, got ",
                      DataTypeName(dtype));
  ctx->SetOutputDim("Out", DDim({-1}));
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  ctx->SetOutputDim("Index", x);
  ctx->SetOutputDtype("Index", dtype);
  ctx->SetOutputDim("Count", DDim({-1}));
  ctx->SetOutputDtype("Count", dtype);
  return Status::OK();
}

template <typename I>
void WriteInts(const std::vector<int64_t>& v, Tensor* t, const Place& place) {
  t->Resize(DDim({static_cast<int64_t>(v.size())}));
  I* p = t->mutable_data<I>(place);
  for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<I>(v[i]);
}

template <typename T>
Status UniqueWithCountsKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  if (x.dims().size() != 1) return ctx.Error("X must be 1-D, got dims ", x.dims().ToString());
  std::map<T, int64_t> seen;
  std::vector<T> values;
  std::vector<int64_t> pos(static_cast<size_t>(x.numel())), count;
  for (int64_t i = 0; i < x.numel(); ++i) {
    auto [it, fresh] = seen.emplace(x.data<T>()[i], static_cast<int64_t>(values.size()));
    if (fresh) {
      values.push_back(x.data<T>()[i]);
      count.push_back(0);
    }
    pos[i] = it->second;
    ++count[it->second];
  }
  Tensor* out = ctx.Output("Out");
  out->Resize(DDim({static_cast<int64_t>(values.size())}));
  std::copy(values.begin(), values.end(), out->mutable_data<T>(ctx.place()));
  if (static_cast<DataType>(ctx.Attr<int>("dtype")) == proto::INT64) {
    WriteInts<int64_t>(pos, ctx.Output("Index"), ctx.place());
    WriteInts<int64_t>(count, ctx.Output("Count"), ctx.place());
  } else {
    WriteInts<int32_t>(pos, ctx.Output("Index"), ctx.place());
    WriteInts<int32_t>(count, ctx.Output("Count"), ctx.place());
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(unique_with_counts)
    .Doc(
        "Out = the distinct values of the 1-D X in order of first appearance; Index[i] = X[i]'s "
        "place in Out; Count[j] = the occurrences of Out[j] in X.")
    .Input("X", "a 1-D tensor")
    .Output("Out", "the distinct values")
    .Output("Index", "[numel(X)] positions in Out")
    .Output("Count", "[len(Out)] occurrences")
    .Attr<int>("dtype", proto::INT32, "DataType code of Index and Count (int32 or int64)",
               ValidDtype())
    .InferShape(UniqueWithCountsInferShape)
    .Kernel(Place::kCPU, proto::FP32, UniqueWithCountsKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, UniqueWithCountsKernel<double>)
    .Kernel(Place::kCPU, proto::INT32, UniqueWithCountsKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, UniqueWithCountsKernel<int64_t>);

}  // namespace loom::ops
