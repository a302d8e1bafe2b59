// lookup_sparse_table: Out[i] = row Ids[i] of the exported table W (a SelectedRows with ids
// ascending), or, for an id W does not hold, the row the table's initializer makes for it;
// zeros for padding_idx. Reads W only: serving unseen ids does not grow it.
#include "operators/distributed/lookup_sparse_table.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

#include "operators/common.h"

namespace loom::ops {

StatusOr<MergedTable> MergeTableShards(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("merging table shards: no shard file given");
  std::vector<std::unique_ptr<kvstore::SparseTable>> shards;
  for (const auto& p : paths) {
    LOOM_ASSIGN_OR_RETURN(auto t, kvstore::SparseTable::Load(p));
    if (!shards.empty()) {
      const auto& a = shards[0]->spec();
      const auto& b = t->spec();
      if (a.dtype != b.dtype || a.row_dims != b.row_dims || a.init.kind != b.init.kind ||
          a.init.a != b.init.a || a.init.b != b.init.b || a.init.seed != b.init.seed)
        return InvalidArgument(p, ": a shard of table ", b.DimsString(), " ", b.init.ToString(),
                               ", but ", paths[0], " holds ", a.DimsString(), " ",
                               a.init.ToString());
    }
    shards.push_back(std::move(t));
  }
  const auto& spec = shards[0]->spec();
  const int64_t width = shards[0]->width();
  std::vector<std::pair<int64_t, int>> ids;  // (id, shard)
  for (size_t s = 0; s < shards.size(); ++s)
    for (int64_t id : shards[s]->Ids()) ids.push_back({id, static_cast<int>(s)});
  std::sort(ids.begin(), ids.end());
  for (size_t i = 1; i < ids.size(); ++i)
    if (ids[i].first == ids[i - 1].first)
      return InvalidArgument("merging table shards: id ", ids[i].first, " is in both ",
                             paths[ids[i - 1].second], " and ", paths[ids[i].second],
                             " (shards of one table hold disjoint ids)");
  MergedTable out;
  out.init = spec.init;
  out.rows.height = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> dims = {static_cast<int64_t>(ids.size())};
  for (int i = 0; i < spec.row_dims.size(); ++i) dims.push_back(spec.row_dims[i]);
  if (spec.row_dims.size() == 0) dims.push_back(1);
  out.rows.value.Resize(DDim(dims));
  const size_t row_bytes = static_cast<size_t>(width) * SizeOf(spec.dtype);
  char* dst = spec.dtype == proto::FP32
                  ? reinterpret_cast<char*>(out.rows.value.mutable_data<float>(Place::CPU()))
                  : reinterpret_cast<char*>(out.rows.value.mutable_data<double>(Place::CPU()));
  out.rows.rows.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    out.rows.rows.push_back(ids[i].first);
    LOOM_RETURN_IF_ERROR(shards[static_cast<size_t>(ids[i].second)]->Lookup(
        &ids[i].first, 1, dst + i * row_bytes, "merging table shards"));
  }
  return out;
}

std::string InitializerAttr(const kvstore::RowInitializer& init) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%s %.17g %.17g %" PRIu64, init.name(), init.a, init.b,
                init.seed);
  return buf;
}

StatusOr<kvstore::RowInitializer> ParseInitializerAttr(const std::string& attr) {
  std::istringstream in(attr);
  std::string kind, a, b;
  uint64_t seed = 0;
  if (!(in >> kind >> a >> b >> seed))
    return InvalidArgument("row_initializer '", attr, "' is not 'kind a b seed'");
  char* end = nullptr;
  const double va = std::strtod(a.c_str(), &end);
  if (*end) return InvalidArgument("row_initializer '", attr, "': '", a, "' is not a number");
  const double vb = std::strtod(b.c_str(), &end);
  if (*end) return InvalidArgument("row_initializer '", attr, "': '", b, "' is not a number");
  return kvstore::RowInitializer::FromName(kind, va, vb, seed);
}

namespace {

Status LookupSparseTableInferShape(InferShapeContext* ctx) {
  auto init = ParseInitializerAttr(ctx->Attr<std::string>("row_initializer"));
  if (!init.ok()) return ctx->Error(init.status().message());
  if (ctx->InputDtype("Ids") != proto::INT64 && ctx->InputDtype("Ids") != proto::INT32)
    return ctx->Error(ctx->DescribeInput("Ids"), " must be int64 or int32");
  // At run time W holds a SelectedRows (no dims of its own): the kernel sizes Out.
  if (ctx->IsRuntime()) return Status::OK();
  DDim w = ctx->InputDim("W"), ids = ctx->InputDim("Ids");
  if (w.size() != 2) return ctx->Error(ctx->DescribeInput("W"), " must be [height, width]");
  std::vector<int64_t> out;
  for (int i = 0; i < ids.size(); ++i) out.push_back(ids[i]);
  if (!out.empty() && out.back() == 1) out.pop_back();  // [N, 1] ids give [N, width]
  out.push_back(w[1]);
  ctx->SetOutputDim("Out", DDim(out));
  ctx->SetOutputDtype("Out", ctx->InputDtype("W"));
  return Status::OK();
}

template <typename T>
Status LookupSparseTableKernel(const KernelContext& ctx) {
  const SelectedRows* w = ctx.InputSelectedRows("W");
  if (!w)
    return ctx.Error("W (var '", ctx.InputVarName("W"),
                     "') holds no sparse table: load the model with load_inference_model or "
                     "`loom run`");
  LOOM_ASSIGN_OR_RETURN(kvstore::RowInitializer init,
                        ParseInitializerAttr(ctx.Attr<std::string>("row_initializer")));
  const Tensor& ids_t = ctx.Input("Ids");
  if (!ids_t.place().is_cpu() || !w->value.place().is_cpu())
    return ctx.Error("Ids and W must be CPU tensors");
  const int64_t width = w->RowWidth(), n = ids_t.numel();
  const int64_t pad = ctx.Attr<int>("padding_idx");
  Tensor* out = ctx.Output("Out");
  std::vector<int64_t> dims;
  for (int i = 0; i < ids_t.dims().size(); ++i) dims.push_back(ids_t.dims()[i]);
  if (!dims.empty() && dims.back() == 1) dims.pop_back();
  dims.push_back(width);
  out->Resize(DDim(dims));
  T* o = out->mutable_data<T>(ctx.place());
  const T* rows = w->value.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids_t.dtype() == proto::INT64
                           ? ids_t.data<int64_t>()[i]
                           : static_cast<int64_t>(ids_t.data<int32_t>()[i]);
    T* dst = o + i * width;
    if (id == pad) {
      std::fill(dst, dst + width, T(0));
      continue;
    }
    if (id < 0 || id == std::numeric_limits<int64_t>::max())
      return ctx.Error("id ", id, " at position ", i,
                       " of Ids is out of the table's range [0, "
                       "2^63 - 1)");
    auto it = std::lower_bound(w->rows.begin(), w->rows.end(), id);
    if (it != w->rows.end() && *it == id) {
      const T* src = rows + (it - w->rows.begin()) * width;
      std::copy(src, src + width, dst);
    } else {
      for (int64_t j = 0; j < width; ++j)
        dst[j] = static_cast<T>(kvstore::SparseTable::InitialValue(init, id, j));
    }
  }
  return Status::OK();
}

}  // namespace

LOOM_REGISTER_OP(lookup_sparse_table)
    .Doc(
        "Out[i] = row Ids[i] of the exported table W, or its initial row when W does not "
        "hold it (an inference model's distributed lookup table).")
    .Input("W", "the table's touched rows (SELECTED_ROWS, ids ascending)")
    .Input("Ids", "int64 (or int32) ids, [N, 1] or [N]")
    .Output("Out", "embeddings [N, width]")
    .Attr<std::string>("row_initializer", "constant 0 0 0",
                       "'kind a b seed': how the servers made rows (kvstore/sparse_table.h)")
    .Attr<int>("padding_idx", -1, "id whose rows are zero; -1 for none")
    .KernelDtypeFrom("W")
    .InferShape(LookupSparseTableInferShape)
    .Kernel(Place::kCPU, proto::FP32, LookupSparseTableKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, LookupSparseTableKernel<double>);

}  // namespace loom::ops
