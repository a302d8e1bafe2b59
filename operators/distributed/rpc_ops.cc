// The trainer's parameter-server ops (Fluid's send / send_barrier / recv / fetch_barrier and
// split_byref). A step of a transpiled trainer: right after backward finishes a gradient,
// split_byref cuts it into the row blocks the servers own (views, no copy) and send queues each
// block to its server (the payload is the block's own memory, kept alive until it is on the
// wire; send returns at once, so sending overlaps the rest of backward). send_barrier waits for
// tells every server the step is sent, with this trainer's sample count (sync mode weights the
// trainers' gradients by it). recv asks each server once for all its blocks as of this step
// (sync: after the step's update). fetch_barrier tells the servers this trainer has the step's
// parameters. Gradients, barriers and fetch barriers go one way (a server answers them only to
// refuse, and a refusal fails the trainer's next wait on that server), so a step has one round
// trip per server on its critical path: the recv. Every wait
// ends: by the reply, by the server's error, or when the server has been silent for the timeout
// (rpc/client.h).
#include <cstring>
#include <map>

#include "base/copy.h"
#include "framework/scope.h"
#include "framework/serialization.h"
#include "operators/common.h"
#include "rpc/ps_client.h"

namespace loom::ops {
namespace {

using StrList = std::vector<std::string>;

// The trainer's own state its startup's fetch reports (attribute trainer_state), from the scope.
rpc::StateDigests TrainerState(const KernelContext& ctx) {
  rpc::StateDigests state;
  if (!ctx.Attrs().count("trainer_state") || ctx.scope() == nullptr) return state;
  for (const auto& name : ctx.Attr<StrList>("trainer_state")) {
    const Variable* v = ctx.scope()->FindVar(name);
    if (!v || !v->IsType<Tensor>() || !v->Get<Tensor>().initialized()) continue;
    const Tensor& t = v->Get<Tensor>();
    if (!t.place().is_cpu()) continue;
    state.digest[name] = TensorDigest(t);
    if (t.numel() > 0 && t.dtype() == proto::FP32) state.first[name] = t.data<float>()[0];
    if (t.numel() > 0 && t.dtype() == proto::FP64) state.first[name] = t.data<double>()[0];
  }
  return state;
}

StatusOr<rpc::TrainerConnection*> Connection(const KernelContext& ctx) {
  auto conn = rpc::ConnectTrainer(ctx.Attr<int>("trainer_id"), ctx.Attr<StrList>("endpoints"),
                                  ctx.Attr<std::string>("fingerprint"), TrainerState(ctx));
  if (!conn.ok()) return conn.status().WithContext(ctx.Where());
  return conn;
}

// Where each of an op's `n` tensors goes (or comes from): its server's index among the
// endpoints, its block name on that server (attribute `names_attr`), the trainer's connection.
struct Targets {
  std::vector<int> server;
  const StrList* names = nullptr;
  rpc::TrainerConnection* conn = nullptr;
  int64_t step = 0;  // the trainer's last step whose barrier was sent
};

StatusOr<Targets> TargetsOf(const KernelContext& ctx, int n, const char* names_attr) {
  const StrList& epmap = ctx.Attr<StrList>("epmap");
  const StrList& endpoints = ctx.Attr<StrList>("endpoints");
  Targets t;
  t.names = &ctx.Attr<StrList>(names_attr);
  if (static_cast<int>(epmap.size()) != n || static_cast<int>(t.names->size()) != n)
    return ctx.Error(n, " tensors but ", epmap.size(), " epmap and ", t.names->size(), " ",
                     names_attr, " entries");
  for (const auto& e : epmap) {
    auto it = std::find(endpoints.begin(), endpoints.end(), e);
    if (it == endpoints.end())
      return ctx.Error("epmap names '", e, "', which is not one of the endpoints");
    t.server.push_back(static_cast<int>(it - endpoints.begin()));
  }
  LOOM_ASSIGN_OR_RETURN(t.conn, Connection(ctx));
  std::lock_guard<std::mutex> lock(t.conn->mu);
  t.step = t.conn->step;
  return t;
}

Status SendKernel(const KernelContext& ctx) {
  const int n = ctx.InputSize("X");
  LOOM_ASSIGN_OR_RETURN(Targets t, TargetsOf(ctx, n, "send_varnames"));
  const int64_t step = t.step + 1;  // the step being computed
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.Input("X", i);
    if (!x.place().is_cpu()) return ctx.Error("send needs CPU tensors, X[", i, "] is not");
    rpc::Header h;
    h.set_kind(rpc::Header::SEND);
    h.set_name((*t.names)[i]);
    h.set_dtype(static_cast<int>(x.dtype()));
    for (int64_t d : x.dims().vec()) h.add_dims(d);
    h.set_nbytes(static_cast<int64_t>(x.nbytes()));
    h.set_step(step);
    rpc::Payload p{x.raw_data(), x.nbytes(), std::shared_ptr<const void>(x.holder())};
    // One way: the server answers a gradient only to refuse it; the barrier's answer says the
    // step's gradients were taken.
    t.conn->client->PostOneWay(t.server[i], std::move(h), &p);
  }
  return Status::OK();
}

Status SendBarrierKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(rpc::TrainerConnection * conn, Connection(ctx));
  int64_t samples = 1;
  if (ctx.InputSize("SampleCount") > 0) {
    const Tensor& c = ctx.Input("SampleCount");
    if (c.dtype() != proto::INT64 || c.numel() != 1 || !c.place().is_cpu())
      return ctx.Error("SampleCount must be a 1-element int64 CPU tensor, got ",
                       DataTypeName(c.dtype()), " ", c.dims().ToString());
    samples = c.data<int64_t>()[0];
    if (samples < 1) return ctx.Error("SampleCount is ", samples, ", not a positive count");
  } else if (ctx.InputSize("Samples") > 0) {
    const Tensor& b = ctx.Input("Samples");
    samples = b.has_lod()           ? static_cast<int64_t>(b.lod()[0].size()) - 1
              : b.dims().size() > 0 ? b.dims()[0]
                                    : 1;
  }
  rpc::Header h;
  h.set_kind(rpc::Header::BARRIER);
  h.set_samples(samples);
  std::lock_guard<std::mutex> lock(conn->mu);
  h.set_step(++conn->step);
  // One way, after the gradients: each server takes a trainer's messages in order, and answers
  // only to refuse; the next recv's answer says the step was taken.
  for (size_t s = 0; s < conn->client->endpoints().size(); ++s)
    conn->client->PostOneWay(static_cast<int>(s), h);
  return Status::OK();
}

// Out takes a received payload as its buffer (no copy); the buffer is freed with the tensor's
// last reference. The decoder checked that its size is dims x dtype.
void TakePayload(const rpc::proto::TensorMeta& meta, zmq::message_t payload, Tensor* out) {
  out->Resize(DDim(std::vector<int64_t>(meta.dims().begin(), meta.dims().end())));
  out->set_dtype(static_cast<DataType>(meta.dtype()));
  // ZeroMQ keeps a small message inside its own struct, at any address: such a payload (and
  // any whose address does not suit the dtype) is copied into the tensor's own buffer instead.
  if (payload.size() == 0 || reinterpret_cast<uintptr_t>(payload.data()) % 8 != 0) {
    void* dst = out->mutable_data(Place::CPU(), out->dtype());
    if (payload.size() > 0) CopyBytes(dst, payload.data(), payload.size());
    return;
  }
  auto* msg = new zmq::message_t(std::move(payload));
  auto holder = std::make_shared<Allocation>(Place::CPU(), msg->data(), msg->size(),
                                             [msg](void*) { delete msg; });
  out->ShareBuffer(std::move(holder), 0, Place::CPU());
}

Status RecvKernel(const KernelContext& ctx) {
  const int n = ctx.OutputSize("Out");
  LOOM_ASSIGN_OR_RETURN(Targets t, TargetsOf(ctx, n, "recv_varnames"));
  const StrList& names = *t.names;
  rpc::TrainerConnection* conn = t.conn;
  // One GET per server, naming all of its blocks this op receives.
  std::map<int, std::vector<int>> outs_of;  // server -> output indices, in order
  for (int i = 0; i < n; ++i) outs_of[t.server[i]].push_back(i);
  std::vector<std::pair<int, rpc::Client::Ticket>> tickets;
  for (const auto& [server, outs] : outs_of) {
    rpc::Header h;
    h.set_kind(rpc::Header::GET);
    h.set_step(t.step);
    for (int i : outs) h.add_tensors()->set_name(names[i]);
    tickets.push_back({server, conn->client->Post(server, std::move(h))});
  }
  std::vector<rpc::Client::Ticket> waits;
  for (const auto& st : tickets) waits.push_back(st.second);
  // Every reply, or the first failure: a server that answers with an error because another
  // trainer stopped must not hide why this one stopped (a dead server here).
  auto replies = conn->client->WaitAll(waits);
  if (!replies.ok()) return replies.status().WithContext(ctx.Where());
  for (size_t k = 0; k < tickets.size(); ++k) {
    const int server = tickets[k].first;
    rpc::Reply& r = (*replies)[k];
    const std::vector<int>& outs = outs_of[server];
    if (r.payloads.size() != outs.size())
      return ctx.Error("the reply of ", ctx.Attr<StrList>("endpoints")[server], " carries ",
                       r.payloads.size(), " blocks for ", outs.size(), " asked");
    for (size_t j = 0; j < outs.size(); ++j) {
      const auto& meta = r.header.tensors(static_cast<int>(j));
      if (meta.name() != names[outs[j]])
        return ctx.Error("asked for '", names[outs[j]], "', got '", meta.name(), "'");
      TakePayload(meta, std::move(r.payloads[j]), ctx.Output("Out", outs[j]));
    }
  }
  return Status::OK();
}

Status FetchBarrierKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(rpc::TrainerConnection * conn, Connection(ctx));
  rpc::Header h;
  h.set_kind(rpc::Header::FETCH_BARRIER);
  std::lock_guard<std::mutex> lock(conn->mu);
  h.set_step(conn->step);
  // One way: what Fluid's fetch_barrier waits for (every trainer fetched the step before any
  // server updates again) holds here by construction: a server's next update needs every
  // trainer's next barrier, which each sends after its recv.
  for (size_t s = 0; s < conn->client->endpoints().size(); ++s)
    conn->client->PostOneWay(static_cast<int>(s), h);
  return Status::OK();
}

// ---- split_byref ----
Status SplitByrefInferShape(InferShapeContext* ctx) {
  DDim x = ctx->InputDim("X");
  const auto& rows = ctx->Attr<std::vector<int64_t>>("sections");
  if (static_cast<int>(rows.size()) != ctx->OutputSize("Out"))
    return ctx->Error(rows.size(), " sections for ", ctx->OutputSize("Out"), " outputs");
  int64_t total = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0) return ctx->Error("sections[", i, "] is negative");
    DDim d = x;
    if (d.size() == 0) return ctx->Error(ctx->DescribeInput("X"), " has no dim 0 to split");
    d[0] = rows[i];
    ctx->SetOutputDim("Out", d, static_cast<int>(i));
    ctx->SetOutputDtype("Out", ctx->InputDtype("X"), static_cast<int>(i));
    total += rows[i];
  }
  if (x.size() > 0 && x[0] >= 0 && total != x[0])
    return ctx->Error("sections add up to ", total, " rows, ", ctx->DescribeInput("X"), " has ",
                      x[0]);
  return Status::OK();
}

Status SplitByrefKernel(const KernelContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const auto& rows = ctx.Attr<std::vector<int64_t>>("sections");
  int64_t begin = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (begin + rows[i] > (x.dims().size() ? x.dims()[0] : 0))
      return ctx.Error("sections exceed the ", x.dims()[0], " rows of X");
    *ctx.Output("Out", static_cast<int>(i)) = x.Slice(begin, begin + rows[i]);
    begin += rows[i];
  }
  return Status::OK();
}

#define LOOM_RPC_KERNELS(fn)                 \
  Kernel(Place::kCPU, proto::FP32, fn)       \
      .Kernel(Place::kCPU, proto::FP64, fn)  \
      .Kernel(Place::kCPU, proto::FP16, fn)  \
      .Kernel(Place::kCPU, proto::INT32, fn) \
      .Kernel(Place::kCPU, proto::INT64, fn)

const char* kEndpointsDoc =
    "every parameter server of the job, in order: \"host:port\", or \"pserver:I\" for the I-th "
    "entry of PADDLE_PSERVER_ENDPOINTS at run time";

}  // namespace

LOOM_REGISTER_OP(send)
    .Ordered()
    .Doc(
        "Queues each X[i] to server epmap[i] as block send_varnames[i] (no copy; returns at once).")
    .Input("X", "gradient blocks", /*duplicable=*/true)
    .RequiredAttr<StrList>("epmap", "the server of each X")
    .RequiredAttr<StrList>("send_varnames", "the block name of each X on its server")
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .LOOM_RPC_KERNELS(SendKernel);

LOOM_REGISTER_OP(send_barrier)
    .Ordered()
    .Doc("Tells every server the step is sent, with the trainer's sample count (one way).")
    .Input("Samples", "a batch input: its dim 0 is this trainer's sample count", false, true)
    .Input("SampleCount",
           "1-element int64: the sample count itself (an MPI client's whole batch); wins over "
           "Samples",
           false, true)
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .LOOM_RPC_KERNELS(SendBarrierKernel);

LOOM_REGISTER_OP(recv)
    .Ordered()
    .Doc("Out[i] = block recv_varnames[i] of server epmap[i], as of this trainer's last step.")
    .Output("Out", "parameter blocks", /*duplicable=*/true)
    .RequiredAttr<StrList>("epmap", "the server of each Out")
    .RequiredAttr<StrList>("recv_varnames", "the block name of each Out on its server")
    .Attr<StrList>("trainer_state", {},
                   "the startup's fetch: persistables the trainer holds itself, whose digests "
                   "its handshake reports for the servers to compare across trainers")
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .Kernel(Place::kCPU, proto::FP32, RecvKernel);

LOOM_REGISTER_OP(fetch_barrier)
    .Ordered()
    .Doc(
        "Tells the servers this trainer fetched the step; the next parameter-server op (or "
        "exe.close()) returns only when every trainer has.")
    .RequiredAttr<StrList>("endpoints", kEndpointsDoc)
    .RequiredAttr<int>("trainer_id", "this trainer", NonNegative("trainer_id"))
    .Attr<std::string>("fingerprint", "", "the transpile both sides come from")
    .Kernel(Place::kCPU, proto::FP32, FetchBarrierKernel);

LOOM_REGISTER_OP(split_byref)
    .Doc("Out[i] = rows [sum(sections[:i]), sum(sections[:i+1])) of X, views without a copy.")
    .Input("X", "the tensor to split along dim 0")
    .Output("Out", "the row blocks", /*duplicable=*/true)
    .RequiredAttr<std::vector<int64_t>>("sections", "rows of each block")
    .InferShape(SplitByrefInferShape)
    .LOOM_RPC_KERNELS(SplitByrefKernel);

}  // namespace loom::ops
