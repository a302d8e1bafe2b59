// Collective operators: comm_init, allreduce, reduce, broadcast, allgather, barrier, plus the two
// helpers the data-parallel transpiler inserts (coalesce_grads, sample_weight).
//
// allreduce / reduce / broadcast / allgather issue their call on the communicator and return at
// once: the call runs on the communicator's thread and the executor waits for it only before a
// later op touches one of the op's variables (KernelContext::SetAsync), so gradients are
// exchanged while the rest of backward computes. Ranks must run the same collective ops in the
// same order (the transpiler guarantees it); calls that differ end in an error naming both ranks.
#include <algorithm>
#include <atomic>

#include "collective/groups.h"
#include "framework/scope.h"
#include "framework/serialization.h"
#include "loom/config.h"
#include "operators/collective/comm.h"
#include "operators/collective/stats.h"
#include "operators/common.h"

namespace loom::ops {
namespace {

using collective::Algorithm;
using collective::CallOptions;
using collective::Communicator;
using collective::Work;

StatusOr<CallOptions> CallOptionsOf(const KernelContext& ctx) {
  CallOptions o;
  LOOM_ASSIGN_OR_RETURN(o.algorithm,
                        collective::ParseAlgorithm(ctx.Attr<std::string>("algorithm")));
  return o;
}

void WaitOn(const KernelContext& ctx, std::vector<Work> works) {
  AsyncDone done = [works] {
    for (const Work& w : works)
      if (!w.IsCompleted()) return false;
    return true;
  };
  ctx.SetAsync(
      [works = std::move(works)](AsyncSpan* span) -> Status {
        Status first;
        for (size_t i = 0; i < works.size(); ++i) {
          Status st = works[i].Wait();
          if (first.ok() && !st.ok()) first = st;
          if (span) {
            auto [begin, end] = works[i].RunSpan();
            if (i == 0 || begin < span->begin) span->begin = begin;
            if (i == 0 || end > span->end) span->end = end;
          }
        }
        return first;
      },
      std::move(done));
}

// ---- comm_init ----

// Every rank of the group runs a program transpiled from the same program and options (a rank
// started with another learning rate or bundle would train on without a word). Checked over the
// new communicator on host memory (the CPU transports; GPU groups are formed from one process's
// own places, which one transpile made).
Status CheckFingerprints(const KernelContext& ctx, collective::Communicator* comm, int nranks,
                         const collective::TransportInfo& t) {
  const std::string& fp = ctx.Attr<std::string>("fingerprint");
  if (fp.empty() || nranks < 2 || t.device != collective::DeviceKind::kCpu) return Status::OK();
  const uint64_t mine = std::strtoull(fp.c_str(), nullptr, 16);
  std::vector<uint64_t> all(static_cast<size_t>(nranks));
  LOOM_RETURN_IF_ERROR(comm->AllGather(&mine, all.data(), 1, collective::DataType::kInt64)
                           .Wait()
                           .WithContext(ctx.Where()));
  for (int r = 0; r < nranks; ++r)
    if (all[r] != all[0])
      return ctx.Error("rank ", r, " runs another program or options than rank 0 (fingerprint ",
                       std::hex, all[r], " vs ", all[0], std::dec,
                       "): every rank must run the same program, transpiled with the same "
                       "options");
  return Status::OK();
}

Status CommInitKernel(const KernelContext& ctx) {
  Variable* out = ctx.OutputVariable("Comm");
  if (!out) return ctx.Error("output 'Comm' is missing");
  LOOM_ASSIGN_OR_RETURN(const collective::TransportInfo* t,
                        collective::FindTransport(ctx.Attr<std::string>("transport")));
  const std::string transport = t->name;
  collective::GroupOptions o;
  o.timeout_ms = ctx.Attr<int>("timeout_ms");
  o.topology = ctx.Attr<std::string>("topology");
  o.tree_max_bytes = ctx.Attr<int>("tree_max_bytes");
  const int nranks = ctx.Attr<int>("nranks"), rank = ctx.Attr<int>("rank");
  // Device buffers need a GPU transport (nccl, cuda_p2p); the others move host memory.
  const bool gpu_transport = t->device == collective::DeviceKind::kCuda;
  if (ctx.place().is_cpu() == gpu_transport)
    return ctx.Error("transport '", transport, "' cannot run on place ", ctx.place().ToString(),
                     ctx.place().is_cpu() ? StrCat(" (", transport, " needs CUDA places)")
                                          : " (CUDA places need transport nccl or cuda_p2p)");
  const std::string& group = ctx.Attr<std::string>("group");
  StatusOr<collective::GroupComm> joined =
      collective::JoinGroup(*t, group, nranks, rank, ctx.place().device, o);
  if (!joined.ok()) return joined.status().WithContext(ctx.Where());
  LOOM_RETURN_IF_ERROR(CheckFingerprints(ctx, joined->get(), nranks, *t));
  out->GetMutable<CommHandle>()->comm = std::move(joined).value();
  return Status::OK();
}

// ---- allreduce ----

// Scales n elements at p by w (the rank's share of the global batch), in the data's precision.
Status ScaleInPlace(void* p, int64_t n, DataType dtype, double w, const std::string& where) {
  switch (dtype) {
    case proto::FP32: {
      float* f = static_cast<float*>(p);
      const float wf = static_cast<float>(w);
      for (int64_t i = 0; i < n; ++i) f[i] *= wf;
      return Status::OK();
    }
    case proto::FP64: {
      double* d = static_cast<double*>(p);
      for (int64_t i = 0; i < n; ++i) d[i] *= w;
      return Status::OK();
    }
    default:
      return Unimplemented(where, ": input 'Weight' needs fp32 or fp64 data, got ",
                           DataTypeName(dtype));
  }
}

// The one-element Weight (sample_weight writes it in float64, so that float64 gradients are
// scaled exactly; float32 weights of older programs are read too).
double WeightOf(const Tensor& w) {
  return w.dtype() == proto::FP64 ? w.data<double>()[0] : w.data<float>()[0];
}

// ScaleInPlace for data on the kernel's place.
Status ScaleOnPlace(const KernelContext& ctx, void* p, int64_t n, DataType dtype, double w) {
  if (ctx.place().is_cpu()) return ScaleInPlace(p, n, dtype, w, ctx.Where());
#if LOOM_CUDA_ENABLED
  return ScaleOnDevice(ctx, p, n, dtype, w);
#else
  return Unimplemented(ctx.Where(), ": no CUDA in this build");
#endif
}

// On a CUDA place the communicator runs on its own stream: the compute stream must have
// written the buffers before a call reads them.
void ComputeDone(const KernelContext& ctx) {
  if (!ctx.place().is_cpu()) ctx.device().Wait();
}

// Compressed exchange (wire_dtype fp16): each float32 segment [p, p + n) is scaled by the
// weight, converted to float16 into a buffer of its own, allreduced as float16 (each hop adds
// in float32 and rounds), and converted back into p when the call is waited for.
Status CompressedAllReduce(const KernelContext& ctx, Communicator* comm, const CallOptions& call,
                           collective::ReduceOp op,
                           const std::vector<std::pair<float*, int64_t>>& segments,
                           const Tensor* weight) {
  auto buffers = std::make_shared<std::vector<std::vector<float16>>>(segments.size());
  std::vector<Work> works;
  for (size_t k = 0; k < segments.size(); ++k) {
    auto [p, n] = segments[k];
    if (weight)
      LOOM_RETURN_IF_ERROR(ScaleInPlace(p, n, proto::FP32, WeightOf(*weight), ctx.Where()));
    std::vector<float16>& b = (*buffers)[k];
    b.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) b[i] = float16(p[i]);
    works.push_back(
        comm->AllReduce(b.data(), b.data(), b.size(), collective::DataType::kFloat16, op, call));
  }
  CollectiveOpStats::Get().allreduce_calls += static_cast<int64_t>(segments.size());
  CollectiveOpStats::Get().compressed_calls += static_cast<int64_t>(segments.size());
  AsyncDone done = [works] {
    for (const Work& w : works)
      if (!w.IsCompleted()) return false;
    return true;
  };
  ctx.SetAsync(
      [works, buffers, segments](AsyncSpan* span) -> Status {
        Status first;
        for (size_t k = 0; k < works.size(); ++k) {
          Status st = works[k].Wait();
          if (first.ok() && !st.ok()) first = st;
          if (span) {
            auto [begin, end] = works[k].RunSpan();
            if (k == 0 || begin < span->begin) span->begin = begin;
            if (k == 0 || end > span->end) span->end = end;
          }
        }
        if (!first.ok()) return first;
        for (size_t k = 0; k < segments.size(); ++k) {
          auto [p, n] = segments[k];
          const std::vector<float16>& b = (*buffers)[k];
          for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(b[i]);
        }
        return Status::OK();
      },
      std::move(done));
  return Status::OK();
}

Status AllReduceKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  LOOM_ASSIGN_OR_RETURN(CallOptions call, CallOptionsOf(ctx));
  LOOM_ASSIGN_OR_RETURN(collective::ReduceOp op, ReduceTypeAttr(ctx));
  int n = ctx.InputSize("X");
  std::vector<Tensor*> xs(n);
  for (int i = 0; i < n; ++i) {
    xs[i] = ctx.Output("Out", i);
    if (xs[i]->raw_data() != ctx.Input("X", i).raw_data())
      return ctx.Error("Out[", i, "] must be the same variable as X[", i, "] (in place)");
    if (xs[i]->dtype() != xs[0]->dtype())
      return ctx.Error("X[", i, "] has dtype ", DataTypeName(xs[i]->dtype()), ", X[0] has ",
                       DataTypeName(xs[0]->dtype()));
  }
  LOOM_ASSIGN_OR_RETURN(collective::DataType dt, CollectiveDtype(xs[0]->dtype(), ctx.Where()));
  const Tensor* weight = ctx.InputOrNull("Weight");
  // One call when the tensors lie back to back in one buffer (coalesce_grads put them there).
  bool contiguous = true;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (i > 0 &&
        static_cast<const char*>(xs[i - 1]->raw_data()) + xs[i - 1]->nbytes() != xs[i]->raw_data())
      contiguous = false;
    total += xs[i]->numel();
  }
  const std::string& wire = ctx.Attr<std::string>("wire_dtype");
  if (!wire.empty()) {
    if (xs[0]->dtype() != proto::FP32 || !ctx.place().is_cpu())
      return ctx.Error("wire_dtype ", wire, " compresses float32 gradients on CPU places; X is ",
                       DataTypeName(xs[0]->dtype()), " on ", ctx.place().ToString());
    std::vector<std::pair<float*, int64_t>> segments;
    if (contiguous) {
      segments.push_back({xs[0]->data<float>(), total});
    } else {
      for (Tensor* x : xs) segments.push_back({x->data<float>(), x->numel()});
    }
    return CompressedAllReduce(ctx, comm, call, op, segments, weight);
  }
  std::vector<Work> works;
  if (contiguous) {
    void* p = xs[0]->raw_data();
    if (weight)
      LOOM_RETURN_IF_ERROR(ScaleOnPlace(ctx, p, total, xs[0]->dtype(), WeightOf(*weight)));
    ComputeDone(ctx);
    works.push_back(comm->AllReduce(p, p, static_cast<size_t>(total), dt, op, call));
    CollectiveOpStats::Get().allreduce_calls += 1;
    if (n > 1) CollectiveOpStats::Get().fused_calls += 1;
  } else {
    for (Tensor* x : xs) {
      void* p = x->raw_data();
      if (weight)
        LOOM_RETURN_IF_ERROR(ScaleOnPlace(ctx, p, x->numel(), x->dtype(), WeightOf(*weight)));
      ComputeDone(ctx);
      works.push_back(comm->AllReduce(p, p, static_cast<size_t>(x->numel()), dt, op, call));
    }
    CollectiveOpStats::Get().allreduce_calls += n;
    if (n > 1) CollectiveOpStats::Get().unfused_buckets += 1;
  }
  WaitOn(ctx, std::move(works));
  return Status::OK();
}

Status InPlaceInferShape(InferShapeContext* ctx) {
  for (int i = 0; i < ctx->InputSize("X"); ++i) {
    if (ctx->InputVarName("X", i) != ctx->OutputVarName("Out", i))
      return ctx->Error("Out[", i, "] ('", ctx->OutputVarName("Out", i), "') must be X[", i, "] ('",
                        ctx->InputVarName("X", i), "'): the op works in place");
    ctx->ShareDimAndDtype("X", "Out", i);
  }
  return Status::OK();
}

// ---- reduce / broadcast ----

Status ReduceKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  LOOM_ASSIGN_OR_RETURN(CallOptions call, CallOptionsOf(ctx));
  LOOM_ASSIGN_OR_RETURN(collective::ReduceOp op, ReduceTypeAttr(ctx));
  int root = ctx.Attr<int>("root");
  if (root >= comm->nranks()) return ctx.Error("root ", root, " >= nranks ", comm->nranks());
  Tensor* x = ctx.Output("Out");
  LOOM_ASSIGN_OR_RETURN(collective::DataType dt, CollectiveDtype(x->dtype(), ctx.Where()));
  void* p = x->raw_data();
  if (const Tensor* weight = ctx.InputOrNull("Weight"))
    LOOM_RETURN_IF_ERROR(ScaleOnPlace(ctx, p, x->numel(), x->dtype(), WeightOf(*weight)));
  ComputeDone(ctx);
  WaitOn(ctx, {comm->Reduce(p, comm->rank() == root ? p : nullptr, static_cast<size_t>(x->numel()),
                            dt, op, root, call)});
  return Status::OK();
}

Status BroadcastKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  LOOM_ASSIGN_OR_RETURN(CallOptions call, CallOptionsOf(ctx));
  int root = ctx.Attr<int>("root");
  if (root >= comm->nranks()) return ctx.Error("root ", root, " >= nranks ", comm->nranks());
  Tensor* x = ctx.Output("Out");
  LOOM_ASSIGN_OR_RETURN(collective::DataType dt, CollectiveDtype(x->dtype(), ctx.Where()));
  void* p = x->raw_data();
  ComputeDone(ctx);
  WaitOn(ctx, {comm->Broadcast(p, p, static_cast<size_t>(x->numel()), dt, root, call)});
  return Status::OK();
}

// ---- allgather ----

Status AllGatherInferShape(InferShapeContext* ctx) {
  DDim d = ctx->InputDim("X");
  if (d.size() == 0) return ctx->Error(ctx->DescribeInput("X"), " must have at least one dim");
  if (d[0] >= 0) d[0] *= ctx->Attr<int>("nranks");
  ctx->SetOutputDim("Out", d);
  ctx->SetOutputDtype("Out", ctx->InputDtype("X"));
  return Status::OK();
}

Status AllGatherKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  LOOM_ASSIGN_OR_RETURN(CallOptions call, CallOptionsOf(ctx));
  if (ctx.Attr<int>("nranks") != comm->nranks())
    return ctx.Error("attribute nranks = ", ctx.Attr<int>("nranks"), ", the communicator has ",
                     comm->nranks(), " ranks");
  const Tensor& x = ctx.Input("X");
  Tensor* out = ctx.Output("Out");
  LOOM_ASSIGN_OR_RETURN(collective::DataType dt, CollectiveDtype(x.dtype(), ctx.Where()));
  void* o = out->mutable_data(ctx.place(), x.dtype());
  ComputeDone(ctx);
  WaitOn(ctx, {comm->AllGather(x.raw_data(), o, static_cast<size_t>(x.numel()), dt, call)});
  return Status::OK();
}

// ---- barrier ----

Status BarrierKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  return comm->Barrier().Wait();
}

// ---- sample_weight ----
// Out = rows(X) / sum over ranks of rows(X): the weight of this rank's gradient in the
// full-batch gradient (0 for a rank that got no samples). Blocks: it is tiny and every gradient
// exchange of the step needs it.
Status SampleWeightInferShape(InferShapeContext* ctx) {
  ctx->SetOutputDim("Out", DDim({1}));
  ctx->SetOutputDtype("Out", proto::FP64);
  if (ctx->OutputSize("Total") > 0) {
    ctx->SetOutputDim("Total", DDim({1}));
    ctx->SetOutputDtype("Total", proto::INT64);
  }
  return Status::OK();
}

Status SampleWeightKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  const Tensor& x = ctx.Input("X");
  // Samples: rows, or the top-level sequences of a LoD input.
  int64_t rows = x.has_lod()           ? static_cast<int64_t>(x.lod()[0].size()) - 1
                 : x.dims().size() > 0 ? x.dims()[0]
                                       : 1;
  int64_t total = rows;
  if (ctx.place().is_cpu()) {
    LOOM_RETURN_IF_ERROR(
        comm->AllReduce(&total, &total, 1, collective::DataType::kInt64, collective::ReduceOp::kSum)
            .Wait());
  } else {
    // A device communicator (NCCL) reduces device memory: stage the count there.
    Tensor staged(proto::INT64, DDim({1}));
    void* d = staged.mutable_data(ctx.place(), proto::INT64);
    MemCopy(ctx.place(), d, Place::CPU(), &total, sizeof(total));
    LOOM_RETURN_IF_ERROR(
        comm->AllReduce(d, d, 1, collective::DataType::kInt64, collective::ReduceOp::kSum).Wait());
    MemCopy(Place::CPU(), &total, ctx.place(), d, sizeof(total));
  }
  if (total <= 0)
    return ctx.Error("the global batch has no samples (this rank's X has dims ",
                     x.dims().ToString(), ")");
  ctx.Output("Out")->mutable_data<double>(Place::CPU())[0] =
      static_cast<double>(rows) / static_cast<double>(total);
  if (ctx.OutputSize("Total") > 0) {
    Tensor* t = ctx.Output("Total");
    t->Resize(DDim({1}));
    t->mutable_data<int64_t>(Place::CPU())[0] = total;
  }
  return Status::OK();
}

// ---- coalesce_grads ----
// Makes Grads[i] views of consecutive pieces of one buffer Fused, shaped like Params[i], so the
// gradients of a bucket are produced in place and one allreduce covers them without copies.
Status CoalesceInferShape(InferShapeContext* ctx) {
  int n = ctx->InputSize("Params");
  if (ctx->OutputSize("Grads") != n)
    return ctx->Error(n, " Params but ", ctx->OutputSize("Grads"), " Grads");
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    DDim d = ctx->InputDim("Params", i);
    if (ctx->InputDtype("Params", i) != ctx->InputDtype("Params", 0))
      return ctx->Error(ctx->DescribeInput("Params", i), " has another dtype than Params[0]");
    ctx->SetOutputDim("Grads", d, i);
    ctx->SetOutputDtype("Grads", ctx->InputDtype("Params", i), i);
    int64_t numel = d.numel();
    total = (total < 0 || numel < 0) ? -1 : total + numel;
  }
  ctx->SetOutputDim("Fused", DDim({total}));
  ctx->SetOutputDtype("Fused", ctx->InputDtype("Params", 0));
  return Status::OK();
}

Status CoalesceKernel(const KernelContext& ctx) {
  int n = ctx.InputSize("Params");
  Tensor* fused = ctx.Output("Fused");
  char* base = static_cast<char*>(fused->mutable_data(ctx.place(), ctx.Input("Params").dtype()));
  size_t offset = static_cast<size_t>(base - static_cast<char*>(fused->holder()->ptr()));
  for (int i = 0; i < n; ++i) {
    Tensor* g = ctx.Output("Grads", i);
    g->set_dtype(fused->dtype());
    g->ShareBuffer(fused->holder(), offset, ctx.place());
    offset += g->nbytes();
  }
  return Status::OK();
}

// ---- check_persistables ----

std::string Leading(const double* v, int64_t numel) {
  std::string out = "[";
  for (int64_t i = 0; i < std::min<int64_t>(numel, 4); ++i) out += StrCat(i ? ", " : "", v[i]);
  return out + (numel > 4 ? ", ...]" : "]");
}

// Every rank holds the same value of every X (learning rates, optimizer state, counters,
// parameters after their broadcast). The digests of all ranks are gathered, so every rank finds
// the same first difference and fails with the same error, naming the variable, the ranks and
// their leading values (gathered by a second call, which every rank then makes too).
Status CheckPersistablesKernel(const KernelContext& ctx) {
  LOOM_ASSIGN_OR_RETURN(Communicator * comm, CommOf(ctx));
  const auto& vars = ctx.Attr<std::vector<std::string>>("vars");
  const int nranks = comm->nranks(), n = static_cast<int>(vars.size());
  if (nranks < 2 || n == 0 || !ctx.place().is_cpu()) return Status::OK();
  auto held = [&](int i) -> const Tensor* {
    const Variable* v = ctx.scope() ? ctx.scope()->FindVar(vars[i]) : nullptr;
    if (v == nullptr || !v->IsType<Tensor>()) return nullptr;
    const Tensor* t = &v->Get<Tensor>();
    return t->initialized() && t->place().is_cpu() ? t : nullptr;
  };
  std::vector<uint64_t> mine(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i)
    if (const Tensor* t = held(i)) mine[i] = TensorDigest(*t);
  std::vector<uint64_t> all(static_cast<size_t>(n) * nranks);
  LOOM_RETURN_IF_ERROR(
      comm->AllGather(mine.data(), all.data(), static_cast<size_t>(n), collective::DataType::kInt64)
          .Wait()
          .WithContext(ctx.Where()));
  for (int i = 0; i < n; ++i) {
    int first = -1, other = -1;  // the first rank holding it, and the first that differs
    for (int r = 0; r < nranks && other < 0; ++r) {
      const uint64_t d = all[static_cast<size_t>(r) * n + i];
      if (d == 0) continue;
      if (first < 0)
        first = r;
      else if (d != all[static_cast<size_t>(first) * n + i])
        other = r;
    }
    if (other < 0) continue;
    constexpr int kLead = 4;
    std::vector<double> lead(kLead, 0.0), leads(static_cast<size_t>(kLead) * nranks);
    int64_t numel = 0;
    if (const Tensor* t = held(i)) {
      numel = t->numel();
      for (int64_t k = 0; k < std::min<int64_t>(numel, kLead); ++k) {
        switch (t->dtype()) {
          case proto::FP32: lead[k] = t->data<float>()[k]; break;
          case proto::FP64: lead[k] = t->data<double>()[k]; break;
          case proto::INT32: lead[k] = t->data<int32_t>()[k]; break;
          case proto::INT64: lead[k] = static_cast<double>(t->data<int64_t>()[k]); break;
          default: break;
        }
      }
    }
    LOOM_RETURN_IF_ERROR(
        comm->AllGather(lead.data(), leads.data(), kLead, collective::DataType::kFloat64)
            .Wait()
            .WithContext(ctx.Where()));
    const int64_t shown = numel;  // this rank's count (the ranks' dims agree or the digest says)
    return ctx.Error("rank ", other, " holds another value of persistable variable '", vars[i],
                     "' than rank ", first, " (rank ", first, ": ",
                     Leading(&leads[static_cast<size_t>(first) * kLead], shown), ", rank ", other,
                     ": ", Leading(&leads[static_cast<size_t>(other) * kLead], shown),
                     "): every rank must start from the same state (the same optimizer "
                     "settings, startup program and loaded checkpoint), or the ranks train apart");
  }
  return Status::OK();
}

}  // namespace

// Registered kernels: every dtype the collectives library moves, on CPU places (in-process or
// MPI communicators).
#define LOOM_COLLECTIVE_KERNELS(fn)          \
  Kernel(Place::kCPU, proto::FP32, fn)       \
      .Kernel(Place::kCPU, proto::FP64, fn)  \
      .Kernel(Place::kCPU, proto::FP16, fn)  \
      .Kernel(Place::kCPU, proto::INT32, fn) \
      .Kernel(Place::kCPU, proto::INT64, fn)

LOOM_REGISTER_OP(comm_init)
    .Doc(
        "Creates this rank's communicator (NCCLInit's role): rank `rank` of the group named "
        "`group` of `nranks` ranks. Ranks of an in-process group are threads of one process.")
    .Output("Comm", "the communicator variable (type COMMUNICATOR)")
    .RequiredAttr<int>("nranks", "number of ranks", Positive("nranks"))
    .RequiredAttr<int>("rank", "this rank", NonNegative("rank"))
    .RequiredAttr<std::string>("group", "name the ranks of one group share")
    .Attr<std::string>("transport",
                       collective::GetTransport(collective::TransportId::kInProcess).name,
                       "inprocess (ranks are threads of one process, meeting by group name), "
                       "mpi (one process per rank under mpirun; the MPI world is the group) or "
                       "nccl (CUDA places: ranks are threads of one process, one GPU each, "
                       "meeting by group name; NCCLInit's role; NCCL's own collectives) or "
                       "cuda_p2p (the same on CUDA places, running Loom's ring/tree/multi_tree/"
                       "star schedules with peer copies and reduction kernels)",
                       [](const std::string& t) { return collective::FindTransport(t).status(); })
    .Attr<std::string>("topology", "", "topology preset of the devices; empty: all alike")
    .Attr<int>("timeout_ms", 30000, "a collective not done after this long fails",
               Positive("timeout_ms"))
    .Attr<int>("tree_max_bytes", -1,
               "algorithm auto uses the tree for allreduce up to this many bytes; -1: the "
               "transport's measured crossover (in-process: every size; mpi: 256 KiB)",
               [](const int& v) {
                 return v >= -1 ? Status::OK() : InvalidArgument("must be >= -1, got ", v);
               })
    .Attr<std::string>("fingerprint", "",
                       "a digest of the program and options the ranks were transpiled from "
                       "(the transpiler writes it): ranks whose fingerprints differ fail here, "
                       "naming both; empty: not checked")
    .Kernel(Place::kCPU, proto::FP32, CommInitKernel);

LOOM_REGISTER_OP(allreduce)
    .Doc(
        "X[i] = reduction of X[i] over all ranks, in place (Out must be X). Several inputs that "
        "lie back to back in one buffer (coalesce_grads) go in one call. With Weight, each "
        "rank's X is first scaled by it (its share of the global batch).")
    .Input("X", "tensors to reduce", /*duplicable=*/true)
    .Input("Comm", "the communicator (from comm_init)")
    .Input("Weight", "1-element scale (fp64, or fp32) applied before the reduction", false, true)
    .Output("Out", "the same variables as X", /*duplicable=*/true)
    .Attr<std::string>("reduce_type", "sum", "sum, prod, max, min or avg", ValidReduceType())
    .Attr<std::string>("algorithm", "auto", "ring, tree, multi_tree, star, native or auto",
                       ValidAlgorithm())
    .Attr<std::string>("wire_dtype", "",
                       "empty: X crosses as it is; fp16: float32 X crosses as float16 (half "
                       "the bytes), converted back after the call (CPU places)",
                       [](const std::string& v) {
                         return v.empty() || v == "fp16"
                                    ? Status::OK()
                                    : InvalidArgument("must be empty or fp16, got '", v, "'");
                       })
    .KernelDtypeFrom("X")
    .InferShape(InPlaceInferShape)
    .LOOM_COLLECTIVE_KERNELS(AllReduceKernel);

LOOM_REGISTER_OP(reduce)
    .Doc(
        "X on rank `root` = reduction of X over all ranks (in place; other ranks' X is only "
        "read). With Weight, X is first scaled by it.")
    .Input("X", "tensor to reduce")
    .Input("Comm", "the communicator (from comm_init)")
    .Input("Weight", "1-element scale (fp64, or fp32) applied before the reduction", false, true)
    .Output("Out", "the same variable as X")
    .Attr<int>("root", 0, "rank that receives the result", NonNegative("root"))
    .Attr<std::string>("reduce_type", "sum", "sum, prod, max, min or avg", ValidReduceType())
    .Attr<std::string>("algorithm", "auto", "tree, ring, star, native or auto", ValidAlgorithm())
    .KernelDtypeFrom("X")
    .InferShape(InPlaceInferShape)
    .LOOM_COLLECTIVE_KERNELS(ReduceKernel);

LOOM_REGISTER_OP(broadcast)
    .Doc("X on every rank = X of rank `root` (in place; X must already have its dims).")
    .Input("X", "tensor to broadcast")
    .Input("Comm", "the communicator (from comm_init)")
    .Output("Out", "the same variable as X")
    .Attr<int>("root", 0, "rank whose X is sent", NonNegative("root"))
    .Attr<std::string>("algorithm", "auto", "tree, ring, star, native or auto", ValidAlgorithm())
    .KernelDtypeFrom("X")
    .InferShape(InPlaceInferShape)
    .LOOM_COLLECTIVE_KERNELS(BroadcastKernel);

LOOM_REGISTER_OP(allgather)
    .Doc("Out = the X of every rank, concatenated along dim 0 in rank order.")
    .Input("X", "this rank's piece")
    .Input("Comm", "the communicator (from comm_init)")
    .Output("Out", "nranks * dims(X)[0] rows")
    .RequiredAttr<int>("nranks", "number of ranks", Positive("nranks"))
    .Attr<std::string>("algorithm", "auto", "ring, native or auto", ValidAlgorithm())
    .KernelDtypeFrom("X")
    .InferShape(AllGatherInferShape)
    .LOOM_COLLECTIVE_KERNELS(AllGatherKernel);

LOOM_REGISTER_OP(check_persistables)
    .Doc(
        "Fails on every rank, naming the first variable and the ranks that differ, unless every "
        "rank holds the same value of every variable of `vars` (the persistable state the main "
        "program reads: "
        "compared by a digest of dtype, dims and bytes; CPU places). A variable a rank does not "
        "hold is compared among the ranks that do.")
    .Input("X", "what this rank holds of `vars` (orders the check after their initializers)",
           /*duplicable=*/true)
    .Input("Comm", "the communicator (from comm_init)")
    .RequiredAttr<std::vector<std::string>>(
        "vars", "the persistable variables to compare, in the same order on every rank")
    .KernelDtypeFrom("Comm")
    .Kernel(Place::kCPU, proto::FP32, CheckPersistablesKernel);

LOOM_REGISTER_OP(barrier)
    .Doc("Returns once every rank has reached it.")
    .Input("Comm", "the communicator (from comm_init)")
    .Kernel(Place::kCPU, proto::FP32, BarrierKernel);

LOOM_REGISTER_OP(sample_weight)
    .Doc(
        "Out = rows(X) / (sum of rows(X) over all ranks): this rank's share of the global "
        "batch, the weight of its gradient in the full-batch gradient (a LoD X counts its "
        "top-level sequences).")
    .Input("X", "a batch input of this rank (its dim 0 counts samples)")
    .Input("Comm", "the communicator (from comm_init)")
    .Output("Out", "1-element fp64 weight")
    .Output("Total", "1-element int64: the global batch's rows (the sum over ranks)", false, true)
    .KernelDtypeFrom("Comm")
    .InferShape(SampleWeightInferShape)
    .Kernel(Place::kCPU, proto::FP32, SampleWeightKernel);

LOOM_REGISTER_OP(coalesce_grads)
    .Doc(
        "Places Grads[i] (shaped like Params[i]) back to back in the one buffer Fused, so a "
        "fused allreduce of them needs no copy in or out.")
    .Input("Params", "parameters whose gradients are grouped", /*duplicable=*/true)
    .Output("Grads", "their gradients, views into Fused", /*duplicable=*/true)
    .Output("Fused", "the bucket's buffer")
    .KernelDtypeFrom("Params")
    .InferShape(CoalesceInferShape)
    .Kernel(Place::kCPU, proto::FP32, CoalesceKernel)
    .Kernel(Place::kCPU, proto::FP64, CoalesceKernel);

#if LOOM_CUDA_ENABLED
// The same kernels on CUDA places, over a communicator of transport nccl (device buffers; the
// algorithm is NCCL's own, `native` or `auto`) or cuda_p2p (Loom's schedules on the GPUs).
#define LOOM_COLLECTIVE_CUDA_KERNELS(op, fn)  \
  LOOM_REGISTER_KERNEL(op, kCUDA, FP32, fn);  \
  LOOM_REGISTER_KERNEL(op, kCUDA, FP64, fn);  \
  LOOM_REGISTER_KERNEL(op, kCUDA, FP16, fn);  \
  LOOM_REGISTER_KERNEL(op, kCUDA, INT32, fn); \
  LOOM_REGISTER_KERNEL(op, kCUDA, INT64, fn)
LOOM_COLLECTIVE_CUDA_KERNELS(allreduce, AllReduceKernel);
LOOM_COLLECTIVE_CUDA_KERNELS(reduce, ReduceKernel);
LOOM_COLLECTIVE_CUDA_KERNELS(broadcast, BroadcastKernel);
LOOM_COLLECTIVE_CUDA_KERNELS(allgather, AllGatherKernel);
LOOM_REGISTER_KERNEL(comm_init, kCUDA, FP32, CommInitKernel);
LOOM_REGISTER_KERNEL(barrier, kCUDA, FP32, BarrierKernel);
LOOM_REGISTER_KERNEL(sample_weight, kCUDA, FP32, SampleWeightKernel);
LOOM_REGISTER_KERNEL(coalesce_grads, kCUDA, FP32, CoalesceKernel);
LOOM_REGISTER_KERNEL(coalesce_grads, kCUDA, FP64, CoalesceKernel);
LOOM_REGISTER_KERNEL(coalesce_grads, kCUDA, FP16, CoalesceKernel);
#endif

}  // namespace loom::ops
