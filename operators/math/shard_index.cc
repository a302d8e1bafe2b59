// shard_index: maps global ids to the ids of one shard. With shard_size = ceil(index_num /
// nshards), an id x of shard x / shard_size == shard_id becomes x % shard_size, any other id
// ignore_value. No gradient (integer ids).
#include "operators/common.h"

namespace loom::ops {
namespace {

Status ShardIndexInferShape(InferShapeContext* ctx) {
  const DDim x = ctx->InputDim("X");
  if (x.size() < 2 || (x[x.size() - 1] >= 0 && x[x.size() - 1] != 1))
    return ctx->Error(ctx->DescribeInput("X"), " must be ids [..., 1]");
  const int index_num = ctx->Attr<int>("index_num"), nshards = ctx->Attr<int>("nshards");
  const int shard_id = ctx->Attr<int>("shard_id");
  if (index_num <= 0) return ctx->Error("index_num must be > 0, got ", index_num);
  if (nshards <= 0) return ctx->Error("nshards must be > 0, got ", nshards);
  if (shard_id < 0 || shard_id >= nshards)
    return ctx->Error("shard_id must be in [0, nshards = ", nshards, "), got ", shard_id);
  ctx->ShareDimAndDtype("X", "Out");
  return Status::OK();
}

template <typename T>
Status ShardIndexKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t index_num = ctx.Attr<int>("index_num"), nshards = ctx.Attr<int>("nshards");
  const int64_t shard_id = ctx.Attr<int>("shard_id"), ignore = ctx.Attr<int>("ignore_value");
  const int64_t size = (index_num + nshards - 1) / nshards;
  Tensor* out = ctx.Output("Out");
  out->Resize(x.dims());
  T* o = out->mutable_data<T>(ctx.place());
  const T* v = x.data<T>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (v[i] < 0 || v[i] >= index_num)
      return ctx.Error("id ", static_cast<int64_t>(v[i]), " at ", i,
                       " is outside [0, index_num = ", index_num, ")");
    o[i] = static_cast<T>(v[i] / size == shard_id ? v[i] % size : ignore);
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(shard_index)
    .Doc(
        "Out = X % shard_size where X / shard_size == shard_id, else ignore_value "
        "(shard_size = ceil(index_num / nshards)).")
    .Input("X", "int32 / int64 ids [..., 1] in [0, index_num)")
    .Output("Out", "the ids within the shard")
    .Attr<int>("index_num", 0, "the number of ids over all shards")
    .Attr<int>("nshards", 1, "the number of shards")
    .Attr<int>("shard_id", 0, "this shard")
    .Attr<int>("ignore_value", -1, "the value of ids of other shards")
    .InferShape(ShardIndexInferShape)
    .Kernel(Place::kCPU, proto::INT32, ShardIndexKernel<int32_t>)
    .Kernel(Place::kCPU, proto::INT64, ShardIndexKernel<int64_t>);

}  // namespace loom::ops
