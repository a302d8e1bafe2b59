// The trainer's ops of a distributed lookup table (Fluid's prefetch and sparse send): the table
// lives only on the parameter servers, row `id` on server SparseTable::ShardOf(id, servers)
// (kvstore/sparse_table.h). The distribute transpiler puts these ops where lookup_table,
// lookup_table_grad and the table's sgd were:
//   distributed_lookup_table       Out = the rows of the batch's ids: the unique ids (without
//                                  padding_idx) asked of their servers, one SPARSE_GET per
//                                  server, as of this trainer's last step (sync: after that
//                                  step's update); padding rows are zero
//   distributed_lookup_table_grad  W@GRAD = SelectedRows of Out@GRAD's rows at Ids (repeats kept,
//                                  padding dropped), as lookup_table_grad with is_sparse, without
//                                  reading the table
//   send_sparse                    pushes a SelectedRows gradient: each server its rows (one
//                                  SPARSE_PUSH per server, empty ones too: a sync step needs every
//                                  trainer's push on every server), one way; in block mode (an
//                                  is_sparse table sliced into blocks as dense parameters are)
//                                  each block's owner gets the rows in the block, re-based
// Ids are any int64 in [0, 2^63 - 1) (the table's declared height is nominal): another id is
// an error naming the op and the id, raised before anything is sent. Every wait ends
// (rpc/client.h).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <unordered_map>

#include "base/copy.h"
#include "framework/selected_rows.h"
#include "kvstore/sparse_table.h"
#include "operators/common.h"
#include "rpc/ps_client.h"
#include "rpc/sparse_rows.h"

namespace loom::ops {
namespace {

using StrList = std::vector<std::string>;

// Rows of a distributed table carry this height on the wire: any id >= 0 is in range.
constexpr int64_t kAnyId = std::numeric_limits<int64_t>::max();

StatusOr<rpc::TrainerConnection*> Connection(const KernelContext& ctx) {
  auto conn = rpc::ConnectTrainer(ctx.Attr<int>("trainer_id"), ctx.Attr<StrList>("endpoints"),
                                  ctx.Attr<std::string>("fingerprint"));
  if (!conn.ok()) return conn.status().WithContext(ctx.Where());
  return conn;
}

// Ids as int64, each >= 0.
Status ReadIds(const KernelContext& ctx, const Tensor& t, std::vector<int64_t>* out) {
  if (t.dtype() != proto::INT64 && t.dtype() != proto::INT32)
    return ctx.Error("Ids is ", DataTypeName(t.dtype()), ", must be int64 or int32");
  if (!t.place().is_cpu()) return ctx.Error("Ids must be a CPU tensor");
  out->resize(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t id = t.dtype() == proto::INT64 ? t.data<int64_t>()[i]
                                                 : static_cast<int64_t>(t.data<int32_t>()[i]);
    if (id < 0 || id == kAnyId)
      return ctx.Error("id ", id, " at position ", i, " of Ids is ",
                       id < 0 ? "negative" : "2^63 - 1", ": distributed table '",
                       ctx.Attr<std::string>("table_name"), "' takes ids in [0, 2^63 - 1)");
    (*out)[static_cast<size_t>(i)] = id;
  }
  return Status::OK();
}

rpc::Header TableHeader(const KernelContext& ctx, rpc::Header::Kind kind, int64_t n) {
  rpc::Header h;
  h.set_kind(kind);
  h.set_name(ctx.Attr<std::string>("table_name"));
  h.set_height(kAnyId);
  h.add_dims(n);
  return h;
}

// ---- distributed_lookup_table ----

Status LookupInferShape(InferShapeContext* ctx) {
  DDim ids = ctx->InputDim("Ids");
  if (ids.size() < 1) return ctx->Error(ctx->DescribeInput("Ids"), " must have rank >= 1");
  DDim out;
  int keep = ids.size() >= 2 && ids[ids.size() - 1] == 1 ? ids.size() - 1 : ids.size();
  for (int i = 0; i < keep; ++i) out.push_back(ids[i]);
  out.push_back(ctx->Attr<int64_t>("width"));
  ctx->SetOutputDim("Out", out);
  ctx->SetOutputDtype("Out", static_cast<DataType>(ctx->Attr<int>("dtype")));
  return Status::OK();
}

Status LookupKernel(const KernelContext& ctx) {
  std::vector<int64_t> ids;
  LOOM_RETURN_IF_ERROR(ReadIds(ctx, ctx.Input("Ids"), &ids));
  const int64_t pad = ctx.Attr<int>("padding_idx");
  const int64_t width = ctx.Attr<int64_t>("width");
  const auto dtype = static_cast<DataType>(ctx.Attr<int>("dtype"));
  const size_t row_bytes = static_cast<size_t>(width) * SizeOf(dtype);
  LOOM_ASSIGN_OR_RETURN(rpc::TrainerConnection * conn, Connection(ctx));
  const int servers = static_cast<int>(conn->client->endpoints().size());
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    step = conn->step;
  }
  // The unique ids, ascending, split by server.
  std::vector<int64_t> unique;
  for (int64_t id : ids)
    if (id != pad) unique.push_back(id);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  std::vector<std::vector<int64_t>> per(static_cast<size_t>(servers));
  for (int64_t id : unique)
    per[static_cast<size_t>(kvstore::SparseTable::ShardOf(id, servers))].push_back(id);
  std::vector<int> asked;
  std::vector<rpc::Client::Ticket> tickets;
  for (int v = 0; v < servers; ++v) {
    const auto& mine = per[static_cast<size_t>(v)];
    if (mine.empty()) continue;
    rpc::Header h = TableHeader(ctx, rpc::Header::SPARSE_GET, static_cast<int64_t>(mine.size()));
    h.set_dtype(rpc::kInt64Dtype);
    h.set_nbytes(static_cast<int64_t>(mine.size() * sizeof(int64_t)));
    h.set_step(step);  // sync: after that step's update
    auto keep = std::make_shared<const std::vector<int64_t>>(mine);
    tickets.push_back(
        conn->client->Post(v, h, std::vector<rpc::Payload>{rpc::RowIdsPayload(keep)}));
    asked.push_back(v);
  }
  auto replies = conn->client->WaitAll(tickets);
  if (!replies.ok()) return replies.status().WithContext(ctx.Where());
  // Where each unique id's row landed: (reply, row).
  std::unordered_map<int64_t, const char*> row_of;
  row_of.reserve(unique.size());
  std::vector<std::vector<char>> copies(asked.size());
  for (size_t k = 0; k < asked.size(); ++k) {
    const auto& mine = per[static_cast<size_t>(asked[k])];
    rpc::Reply& r = (*replies)[k];
    Status st = rpc::CheckSparseReply(r.header, r.payloads, mine, static_cast<int>(dtype), width);
    if (!st.ok())
      return st.WithContext(StrCat(ctx.Where(), ": the rows of table '",
                                   ctx.Attr<std::string>("table_name"), "' from ",
                                   conn->client->endpoints()[static_cast<size_t>(asked[k])]));
    // Copied: a frame need not be aligned, and the reply goes away with this op.
    copies[k].resize(r.payloads[1].size());
    if (!copies[k].empty()) std::memcpy(copies[k].data(), r.payloads[1].data(), copies[k].size());
    for (size_t j = 0; j < mine.size(); ++j) row_of[mine[j]] = copies[k].data() + j * row_bytes;
  }
  Tensor* out = ctx.Output("Out");
  char* dst = static_cast<char*>(out->mutable_data(ctx.place(), dtype));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == pad)
      std::memset(dst + i * row_bytes, 0, row_bytes);
    else
      std::memcpy(dst + i * row_bytes, row_of.at(ids[i]), row_bytes);
  }
  return Status::OK();
}

// ---- distributed_lookup_table_grad ----

Status TableGradVarType(InferShapeContext* ctx) {
  if (ctx->HasOutput("W@GRAD")) ctx->SetOutputVarType("W@GRAD", proto::VarType::SELECTED_ROWS);
  return Status::OK();
}

Status TableGradInferShape(InferShapeContext* ctx) {
  if (!ctx->HasOutput("W@GRAD")) return Status::OK();
  ctx->SetOutputDim("W@GRAD", DDim({ctx->Attr<int64_t>("height"), ctx->Attr<int64_t>("width")}));
  ctx->SetOutputDtype("W@GRAD", ctx->InputDtype("Out@GRAD"));
  return Status::OK();
}

Status GradKernel(const KernelContext& ctx) {
  SelectedRows* dw = ctx.OutputSelectedRows("W@GRAD");
  if (!dw) return Status::OK();
  std::vector<int64_t> ids;
  LOOM_RETURN_IF_ERROR(ReadIds(ctx, ctx.Input("Ids"), &ids));
  const Tensor& g = ctx.Input("Out@GRAD");
  const int64_t width = ctx.Attr<int64_t>("width");
  if (g.numel() != static_cast<int64_t>(ids.size()) * width)
    return ctx.Error("Out@GRAD has ", g.numel(), " elements for ", ids.size(), " ids of width ",
                     width);
  const int64_t pad = ctx.Attr<int>("padding_idx");
  const size_t row_bytes = static_cast<size_t>(width) * SizeOf(g.dtype());
  // Nominal: a distributed table takes any id >= 0, so the height the SelectedRows claims is
  // the largest one can be.
  dw->height = kAnyId;
  dw->rows.clear();
  for (int64_t id : ids)
    if (id != pad) dw->rows.push_back(id);
  dw->value.Resize({static_cast<int64_t>(dw->rows.size()), width});
  char* dst = static_cast<char*>(dw->value.mutable_data(ctx.place(), g.dtype()));
  const char* src = static_cast<const char*>(g.raw_data());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == pad) continue;
    std::memcpy(dst, src + i * row_bytes, row_bytes);
    dst += row_bytes;
  }
  return Status::OK();
}

// ---- send_sparse ----

// The rows of x each destination gets: pick[d] = entries of x, and the row each becomes there.
// Table mode: destination ShardOf(id), ids as they are. Block mode (sections): destination b
// holds rows [begin_b, begin_b + sections[b]) of the parameter, ids re-based to the block.
struct Split {
  std::vector<std::vector<size_t>> pick;
  std::vector<std::vector<int64_t>> ids;
  std::vector<int64_t> height;  // on the wire: ids lie in [0, height)
};

StatusOr<Split> SplitRows(const KernelContext& ctx, const SelectedRows& x, int servers) {
  const auto& sections = ctx.Attr<std::vector<int64_t>>("sections");
  Split out;
  const size_t n = sections.empty() ? static_cast<size_t>(servers) : sections.size();
  out.pick.resize(n);
  out.ids.resize(n);
  if (sections.empty()) {
    out.height.assign(n, kAnyId);
    for (size_t i = 0; i < x.rows.size(); ++i) {
      const auto d = static_cast<size_t>(kvstore::SparseTable::ShardOf(x.rows[i], servers));
      out.pick[d].push_back(i);
      out.ids[d].push_back(x.rows[i]);
    }
    return out;
  }
  std::vector<int64_t> begin{0};
  for (int64_t rows : sections) begin.push_back(begin.back() + rows);
  out.height = sections;
  for (size_t i = 0; i < x.rows.size(); ++i) {
    const int64_t id = x.rows[i];
    if (id >= begin.back())
      return ctx.Error("row ", id, " (entry ", i, ") of X is outside the parameter's ",
                       begin.back(), " rows");
    const size_t b =
        static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), id) - begin.begin() - 1);
    out.pick[b].push_back(i);
    out.ids[b].push_back(id - begin[b]);
  }
  return out;
}

Status SendSparseKernel(const KernelContext& ctx) {
  const SelectedRows* in = ctx.InputSelectedRows("X");
  if (!in)
    return ctx.Error("X ('", ctx.InputVarName("X"),
                     "') holds no SelectedRows: send_sparse pushes a sparse gradient");
  if (!in->value.place().is_cpu()) return ctx.Error("send_sparse needs a CPU SelectedRows");
  for (size_t i = 0; i < in->rows.size(); ++i)
    if (in->rows[i] < 0) return ctx.Error("row ", in->rows[i], " (entry ", i, ") of X is negative");
  // Repeats summed first (as the server would, in the same order): a push then holds at most
  // one row per id, so it is never larger than the rows it updates.
  SelectedRows merged;
  Status st = MergeRows(*in, &merged);
  if (!st.ok()) return st.WithContext(ctx.Where());
  const SelectedRows* x = &merged;
  const int64_t width = x->RowWidth();
  const DataType dtype = x->value.dtype();
  const size_t row_bytes = static_cast<size_t>(width) * SizeOf(dtype);
  LOOM_ASSIGN_OR_RETURN(rpc::TrainerConnection * conn, Connection(ctx));
  const StrList& endpoints = conn->client->endpoints();
  const int servers = static_cast<int>(endpoints.size());
  // Where each destination is, and its name there.
  const auto& sections = ctx.Attr<std::vector<int64_t>>("sections");
  std::vector<int> server;
  StrList names;
  if (sections.empty()) {
    for (int v = 0; v < servers; ++v) {
      server.push_back(v);
      names.push_back(ctx.Attr<std::string>("table_name"));
    }
  } else {
    const StrList& epmap = ctx.Attr<StrList>("epmap");
    names = ctx.Attr<StrList>("send_varnames");
    const StrList& listed = ctx.Attr<StrList>("endpoints");
    if (epmap.size() != sections.size() || names.size() != sections.size())
      return ctx.Error(sections.size(), " sections but ", epmap.size(), " epmap and ", names.size(),
                       " send_varnames entries");
    for (const auto& e : epmap) {
      auto it = std::find(listed.begin(), listed.end(), e);
      if (it == listed.end())
        return ctx.Error("epmap names '", e, "', which is not one of the endpoints");
      server.push_back(static_cast<int>(it - listed.begin()));
    }
  }
  LOOM_ASSIGN_OR_RETURN(Split split, SplitRows(ctx, *x, servers));
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(conn->mu);
    step = conn->step + 1;  // the step being computed
  }
  const char* src = static_cast<const char*>(x->value.raw_data());
  for (size_t d = 0; d < split.pick.size(); ++d) {
    const auto& mine = split.pick[d];
    auto ids = std::make_shared<const std::vector<int64_t>>(std::move(split.ids[d]));
    auto rows = std::make_shared<std::vector<char>>(mine.size() * row_bytes);
    for (size_t k = 0; k < mine.size(); ++k)
      std::memcpy(rows->data() + k * row_bytes, src + mine[k] * row_bytes, row_bytes);
    rpc::Header h;
    h.set_kind(rpc::Header::SPARSE_PUSH);
    h.set_name(names[d]);
    h.set_height(split.height[d]);
    h.add_dims(static_cast<int64_t>(mine.size()));
    h.set_dtype(static_cast<int>(dtype));
    const std::vector<int64_t> dims = x->value.dims().vec();
    for (size_t j = 1; j < dims.size(); ++j) h.add_dims(dims[j]);
    h.set_nbytes(static_cast<int64_t>(rows->size()));
    h.set_step(step);
    std::vector<rpc::Payload> payloads{
        rpc::RowIdsPayload(std::move(ids)),
        {rows->data(), rows->size(), std::shared_ptr<const void>(rows)}};
    // Empty pushes too: a sync step needs every trainer's push of every destination.
    conn->client->PostOneWay(server[d], std::move(h), std::move(payloads));
  }
  return Status::OK();
}

const char* kEndpointsDoc =
    "every parameter server of the job, in order: \"host:port\", or \"pserver:I\" for the I-th "
    "entry of PADDLE_PSERVER_ENDPOINTS at run time";

}  // namespace

LOOM_REGISTER_OP(distributed_lookup_table)
    .Ordered()
    .Doc(
        "Out[i] = row Ids[i] of a table held by the parameter servers (prefetched: one request "
        "per server for the batch's unique ids); padding_idx rows are zero.")
    .Input("Ids", "int64 (or int32) ids >= 0, [N, 1] or [N]")
    .Output("Out", "embeddings [N, width]")
    .RequiredAttr<std::string>("table_name", "the table's name on the servers")
    .RequiredAttr<int64_t>("height", "the declared rows (nominal: any id >= 0 is accepted)")
    .RequiredAttr<int64_t>("width", "elements of one row")
    .RequiredAttr<int>("dtype", "DataType code of the rows")
    .Attr<int>("padding_idx", -1, "id whose rows are zero; -1 for none")
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .InferShape(LookupInferShape)
    .Kernel(Place::kCPU, proto::INT64, LookupKernel)
    .Kernel(Place::kCPU, proto::INT32, LookupKernel)
    .Kernel(Place::kCPU, proto::FP32, LookupKernel)
    .Kernel(Place::kCPU, proto::FP64, LookupKernel);

LOOM_REGISTER_OP(distributed_lookup_table_grad)
    .Doc(
        "W@GRAD of distributed_lookup_table: a SelectedRows of Out@GRAD's rows at Ids (repeats "
        "kept, padding_idx dropped).")
    .Input("Ids", "forward Ids")
    .Input("Out@GRAD", "gradient of Out")
    .Output("W@GRAD", "the table's sparse gradient", false, true)
    .AttrsFrom("distributed_lookup_table")
    .InferVarType(TableGradVarType)
    .InferShape(TableGradInferShape)
    .Kernel(Place::kCPU, proto::FP32, GradKernel)
    .Kernel(Place::kCPU, proto::FP64, GradKernel)
    .Kernel(Place::kCPU, proto::INT64, GradKernel)
    .Kernel(Place::kCPU, proto::INT32, GradKernel);

LOOM_REGISTER_OP(send_sparse)
    .Ordered()
    .Doc(
        "Pushes a SelectedRows gradient, one way: of a distributed table, each server the rows "
        "it holds (ShardOf); of a sliced parameter (sections), each block's owner its rows.")
    .Input("X", "the gradient (SelectedRows)")
    .Attr<std::string>("table_name", "", "table mode: the distributed table's name on the servers")
    .Attr<std::vector<int64_t>>("sections", {},
                                "block mode: rows of each block of a sliced parameter (each "
                                "block gets its rows, re-based to the block)")
    .Attr<StrList>("epmap", {}, "block mode: the server of each block")
    .Attr<StrList>("send_varnames", {}, "block mode: each block's gradient name on its server")
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .Kernel(Place::kCPU, proto::FP32, SendSparseKernel)
    .Kernel(Place::kCPU, proto::FP64, SendSparseKernel);

}  // namespace loom::ops
