// sparse_allreduce: the data-parallel exchange of a sparse gradient (a SelectedRows, e.g. an
// embedding's with is_sparse). Every rank ends with the same merged SelectedRows: one row per id
// any rank touched, ids ascending, each row the sum (or average) of the ranks' rows.
//
// How: each rank merges its repeated ids, then the ranks allgather their row counts. From the
// counts every rank makes the same choice between
//   rows   ids and values allgathered (each rank's padded to the largest count) and merged in
//          rank order: a rank sends and receives bytes in proportion to the touched rows;
//   dense  the rows scattered into a [height, width + 1] buffer whose last column counts the
//          ranks that touched the row, allreduced, and the touched rows kept;
// taking rows unless its allgather moves more bytes than a ring allreduce of the dense table
// (n * max_count * (8 + row bytes) > 2 * height * row bytes; `dense_threshold` overrides the
// ratio). Both give the same rows; only the order of the additions differs.
//
// Blocking: the kernel returns when the exchange is done (its sizes are known only at run time).
#include <algorithm>
#include <cstring>
#include <map>

#include "operators/collective/comm.h"
#include "operators/collective/stats.h"
#include "operators/common.h"

namespace loom::ops {
namespace {

using collective::Communicator;

Status SparseAllReduceVarType(InferShapeContext* ctx) {
  ctx->SetOutputVarType("Out", proto::VarType::SELECTED_ROWS);
  return Status::OK();
}

Status SparseAllReduceInferShape(InferShapeContext* ctx) {
  if (ctx->InputVarName("X") != ctx->OutputVarName("Out"))
    return ctx->Error("Out ('", ctx->OutputVarName("Out"), "') must be X ('",
                      ctx->InputVarName("X"), "'): the op works in place");
  if (ctx->InputVarType("X") != proto::VarType::SELECTED_ROWS)
    return ctx->Error("input 'X' (var '", ctx->InputVarName("X"),
                      "') must be a SelectedRows (a sparse gradient); dense gradients go "
                      "through allreduce");
  return Status::OK();
}

double WeightOf(const Tensor& w) {
  return w.dtype() == proto::FP64 ? w.data<double>()[0] : w.data<float>()[0];
}

template <typename T>
Status Exchange(const KernelContext& ctx, Communicator* comm, SelectedRows* x) {
  const int n = comm->nranks();
  const std::string where = StrCat(ctx.Where(), ": input 'X' (var '", ctx.InputVarName("X"), "')");
  if (!x->rows.empty() && !x->value.place().is_cpu())
    return InvalidArgument(where, " is on ", x->value.place().ToString(),
                           "; sparse_allreduce runs on CPU places");
  SelectedRows mine;
  LOOM_RETURN_IF_ERROR(MergeRows(*x, &mine).WithContext(where));
  const int64_t w = mine.RowWidth();
  double scale = 1.0;
  if (const Tensor* weight = ctx.InputOrNull("Weight")) scale *= WeightOf(*weight);
  LOOM_ASSIGN_OR_RETURN(collective::ReduceOp op, ReduceTypeAttr(ctx));
  if (op != collective::ReduceOp::kSum && op != collective::ReduceOp::kAvg)
    return ctx.Error("reduce_type must be sum or avg for a sparse gradient");
  const double post = op == collective::ReduceOp::kAvg ? 1.0 / n : 1.0;
  if (scale != 1.0 && !mine.rows.empty()) {
    T* v = mine.value.template data<T>();
    for (int64_t i = 0, e = mine.value.numel(); i < e; ++i) v[i] = static_cast<T>(v[i] * scale);
  }

  // Counts and heights: every rank must exchange the same table.
  int64_t meta[2] = {static_cast<int64_t>(mine.rows.size()), mine.height};
  std::vector<int64_t> all(2 * static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(
      comm->AllGather(meta, all.data(), 2, collective::DataType::kInt64).Wait().WithContext(where));
  int64_t max_count = 0;
  for (int r = 0; r < n; ++r) {
    if (all[2 * r + 1] != mine.height)
      return InvalidArgument(where, " has height ", mine.height, " but rank ", r, "'s has ",
                             all[2 * r + 1], ": the ranks exchange different tables");
    max_count = std::max(max_count, all[2 * r]);
  }
  LOOM_ASSIGN_OR_RETURN(collective::DataType dt, CollectiveDtype(ToDataType<T>(), where));
  const double row_bytes = static_cast<double>(w) * sizeof(T);
  const double rows_cost = static_cast<double>(n) * max_count * (8.0 + row_bytes);
  const double dense_cost = 2.0 * static_cast<double>(mine.height) * row_bytes;
  const float threshold = ctx.Attr<float>("dense_threshold");
  const bool dense = threshold > 0 ? rows_cost > threshold * dense_cost : rows_cost > dense_cost;
  auto& stats = CollectiveOpStats::Get();
  stats.sparse_calls++;

  SelectedRows out;
  out.height = mine.height;
  if (!dense) {
    // Rows: padded ids (-1) and values, allgathered, merged in rank order.
    std::vector<int64_t> ids(static_cast<size_t>(max_count), -1), all_ids;
    std::copy(mine.rows.begin(), mine.rows.end(), ids.begin());
    std::vector<T> vals(static_cast<size_t>(max_count * w), T(0));
    if (!mine.rows.empty())
      std::memcpy(vals.data(), mine.value.template data<T>(), mine.value.nbytes());
    all_ids.resize(static_cast<size_t>(n * max_count));
    std::vector<T> all_vals(static_cast<size_t>(n * max_count * w));
    if (max_count > 0) {
      LOOM_RETURN_IF_ERROR(
          comm->AllGather(ids.data(), all_ids.data(), ids.size(), collective::DataType::kInt64)
              .Wait()
              .WithContext(where));
      LOOM_RETURN_IF_ERROR(
          comm->AllGather(vals.data(), all_vals.data(), vals.size(), dt).Wait().WithContext(where));
    }
    stats.sparse_row_bytes += static_cast<int64_t>(ids.size() * 8 + vals.size() * sizeof(T));
    std::map<int64_t, int64_t> slot;
    for (int64_t id : all_ids)
      if (id >= 0) slot.emplace(id, 0);
    for (auto& [id, k] : slot) {
      k = static_cast<int64_t>(out.rows.size());
      out.rows.push_back(id);
    }
    out.value.Resize({static_cast<int64_t>(out.rows.size()), w});
    T* o = out.value.template mutable_data<T>(Place::CPU());
    std::fill(o, o + out.value.numel(), T(0));
    for (size_t i = 0; i < all_ids.size(); ++i) {
      if (all_ids[i] < 0) continue;
      T* dst = o + slot[all_ids[i]] * w;
      const T* src = all_vals.data() + static_cast<int64_t>(i) * w;
      for (int64_t j = 0; j < w; ++j) dst[j] += src[j];
    }
  } else {
    // Dense: [height, w + 1], the last column counting the ranks that touched the row.
    const int64_t cols = w + 1;
    std::vector<T> buf(static_cast<size_t>(mine.height * cols), T(0));
    const T* v = mine.rows.empty() ? nullptr : mine.value.template data<T>();
    for (size_t k = 0; k < mine.rows.size(); ++k) {
      T* dst = buf.data() + mine.rows[k] * cols;
      std::memcpy(dst, v + static_cast<int64_t>(k) * w, sizeof(T) * w);
      dst[w] = T(1);
    }
    LOOM_RETURN_IF_ERROR(
        comm->AllReduce(buf.data(), buf.data(), buf.size(), dt, collective::ReduceOp::kSum)
            .Wait()
            .WithContext(where));
    stats.sparse_dense_calls++;
    stats.sparse_dense_bytes += static_cast<int64_t>(buf.size() * sizeof(T));
    for (int64_t r = 0; r < mine.height; ++r)
      if (buf[r * cols + w] > T(0)) out.rows.push_back(r);
    out.value.Resize({static_cast<int64_t>(out.rows.size()), w});
    T* o = out.value.template mutable_data<T>(Place::CPU());
    for (size_t k = 0; k < out.rows.size(); ++k)
      std::memcpy(o + static_cast<int64_t>(k) * w, buf.data() + out.rows[k] * cols, sizeof(T) * w);
  }
  if (post != 1.0) {
    T* o = out.value.template data<T>();
    for (int64_t i = 0, e = out.value.numel(); i < e; ++i) o[i] = static_cast<T>(o[i] * post);
  }
  // Keep the value's trailing dims (a table of [height, a, b] rows).
  DDim dims = x->value.dims();
  dims[0] = static_cast<int64_t>(out.rows.size());
  out.value.Resize(dims);
  *x = std::move(out);
  return Status::OK();
}

template <typename T>
Status SparseAllReduceKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  SelectedRows* x = ctx.OutputSelectedRows("Out");
  const SelectedRows* in = ctx.InputSelectedRows("X");
  if (!in || !x) return ctx.Error("input 'X' is not a SelectedRows");
  return Exchange<T>(ctx, comm, x);
}

}  // namespace

LOOM_REGISTER_OP(sparse_allreduce)
    .Doc(
        "X = the SelectedRows X of every rank merged (one row per id, ids ascending) and "
        "reduced, in place; exchanged as rows, or dense when that moves fewer bytes.")
    .Input("X", "a SelectedRows (a sparse gradient)")
    .Input("Comm", "the communicator (from comm_init)")
    .Input("Weight", "1-element scale (fp64, or fp32) applied before the reduction", false, true)
    .Output("Out", "the same variable as X")
    .Attr<std::string>("reduce_type", "sum", "sum or avg", ValidReduceType())
    .Attr<float>("dense_threshold", -1.0f,
                 "go dense when the rows' allgather would move more than this times the bytes "
                 "of a ring allreduce of the table; <= 0: 1 (the cost model's choice)")
    .KernelDtypeFrom("X")
    .InferVarType(SparseAllReduceVarType)
    .InferShape(SparseAllReduceInferShape)
    .Kernel(Place::kCPU, proto::FP32, SparseAllReduceKernel<float>)
    .Kernel(Place::kCPU, proto::FP64, SparseAllReduceKernel<double>);

}  // namespace loom::ops
