#include "transpiler/data_parallel.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "collective/communicator.h"
#include "collective/selector.h"
#include "collective/transport_registry.h"
#include "collective/types.h"
#include "framework/op_role.h"
#include "framework/verifier.h"

namespace loom::transpiler {
namespace {

bool IsCollectiveOp(const std::string& type) {
  static const std::set<std::string> kOps = {"comm_init",     "allreduce",     "reduce",
                                             "broadcast",     "allgather",     "barrier",
                                             "sample_weight", "coalesce_grads"};
  return kOps.count(type) > 0;
}

bool Writes(const OpDesc& op, const std::string& var) {
  for (const auto& v : op.OutputArgumentNames())
    if (v == var) return true;
  return false;
}

bool IsUpdateOp(const OpDesc& op) {
  return (op.Role() & kOpRoleOptimize) && op.HasInput("Param") && op.HasInput("Grad") &&
         !op.Input("Param").empty();
}

struct ParamSync {
  std::string param;
  std::string grad;
  DataType dtype = proto::FP32;
  int64_t bytes = 0;
  int producer = -1;   // last backward op writing grad (index in the input main program)
  int update_op = -1;  // its optimizer update op
  int owner = -1;
  int bucket = -1;
};

struct Bucket {
  std::vector<int> params;  // indices into State::params
  int64_t bytes = 0;
  int position = -1;  // insert the collective after this op
  std::string algorithm;
  bool fused = false;
};

struct State {
  explicit State(const DataParallelConfig& c) : config(c) {}
  const DataParallelConfig& config;
  ProgramDesc startup;
  ProgramDesc main;
  std::vector<ParamSync> params;
  std::vector<std::string> frozen;
  std::vector<Bucket> buckets;
  std::string batch_var;
  // Owner mode: optimize-role op index -> the parameter it serves (absent: serves all).
  std::map<int, int> op_param;
  // Owner mode: `sum` ops over per-parameter terms (the squared norms of clipping by global
  // norm): op index -> (input var, parameter) of each term. Each rank sums the terms of its own
  // parameters and an allreduce right after the op adds up the ranks' partial sums.
  std::map<int, std::vector<std::pair<std::string, int>>> partial_sums;
  const collective::TransportInfo* transport = nullptr;  // config.transport, from the registry
  std::unique_ptr<collective::Selector> selector;        // resolves "auto" per bucket
  std::shared_ptr<const collective::CommPlan> plan;
  std::vector<ProgramDesc> rank_startup;
  std::vector<ProgramDesc> rank_main;
  proto::DataParallelManifest manifest;
};

std::string ResolveAlgorithm(const State& s, collective::Collective kind, int64_t bytes) {
  // A transport without Loom's schedules (NCCL) runs its own collectives.
  if (!s.transport->schedules) return "native";
  const std::string& asked = s.config.algorithm;
  if (asked == "native") return asked;  // the transport's own (CheckProgram: it has one)
  if (asked != "auto") {
    auto a = collective::ParseAlgorithm(asked);
    if (a.ok() && collective::AlgorithmSupports(a.value(), kind)) return asked;
  }
  // The collectives library's cost model (the same one the communicator's auto uses).
  // The selector picks native collectives only where the transport has them, from its native
  // crossover on (in-process: one pass over shared memory).
  return collective::AlgorithmName(s.selector->Choose(
      kind, static_cast<size_t>(std::max<int64_t>(bytes, 0)), 1, s.transport->native));
}

VarDesc DeclareLike(BlockDesc* block, const VarDesc& like) {
  VarDesc v = block->Var(like.Name());
  v.proto()->CopyFrom(*like.proto());
  return v;
}

VarDesc DeclareCommVar(BlockDesc* block) {
  VarDesc v = block->Var(kCommVar);
  v.SetType(proto::VarType::COMMUNICATOR);
  v.SetPersistable(true);
  v.SetStopGradient(true);
  return v;
}

// ---- passes ----

Status CheckProgram(State* s) {
  const auto& c = s->config;
  if (c.nranks < 1) return InvalidArgument("nranks must be >= 1, got ", c.nranks);
  LOOM_ASSIGN_OR_RETURN(s->transport, collective::FindTransport(c.transport));
  const collective::TransportInfo& t = *s->transport;
  const bool gpu_transport = t.device == collective::DeviceKind::kCuda;
  if (c.algorithm != "auto") {
    LOOM_ASSIGN_OR_RETURN(collective::Algorithm a, collective::ParseAlgorithm(c.algorithm));
    if (a == collective::Algorithm::kNative && !t.native)
      return InvalidArgument(
          "algorithm 'native' needs a transport with collectives of its own; "
          "the ",
          t.name, " transport offers ring, tree, multi_tree, star and auto");
    if (a != collective::Algorithm::kNative && !t.schedules)
      return InvalidArgument("algorithm '", c.algorithm, "' is one of Loom's schedules; transport ",
                             t.name,
                             " runs its own collectives: use native or auto, or transport "
                             "cuda_p2p for Loom's schedules on the GPUs");
  }
  // Places, when given, must fit the transport: CUDA places (one GPU per rank) meet over NCCL
  // or CUDA P2P.
  if (!c.places.empty()) {
    if (static_cast<int>(c.places.size()) != c.nranks)
      return InvalidArgument(c.places.size(), " places for ", c.nranks, " ranks");
    std::set<std::string> distinct;
    for (const auto& p : c.places) {
      bool cuda = p.compare(0, 5, "cuda:") == 0;
      if (cuda != gpu_transport)
        return InvalidArgument("place '", p, "' does not fit transport '", c.transport,
                               cuda ? "' (CUDA places meet over transport nccl or cuda_p2p)"
                                    : StrCat("' (transport ", c.transport, " needs CUDA places)"));
      // NCCL refuses two ranks on one GPU; the CUDA P2P transport takes a GPU listed several
      // times as virtual devices sharing its memory (how one GPU checks a multi-rank group).
      if (cuda && !t.shared_devices && !distinct.insert(p).second)
        return InvalidArgument("place '", p, "' is given twice: transport ", t.name,
                               " needs a GPU of its own for each rank (transport cuda_p2p takes "
                               "a GPU several times)");
    }
  }
  collective::Topology topology = collective::Topology::Uniform(c.nranks);
  if (!c.topology.empty()) {
    LOOM_ASSIGN_OR_RETURN(topology, collective::Topology::Preset(c.topology));
    if (topology.size() != c.nranks)
      return InvalidArgument("topology '", c.topology, "' has ", topology.size(),
                             " devices, asked for ", c.nranks, " ranks");
  }
  LOOM_ASSIGN_OR_RETURN(s->plan, collective::CommPlan::Create(topology));
  // The selector the ranks' communicators will run with (their transport's crossovers).
  collective::CommunicatorOptions co = collective::TransportDefaults(t);
  if (c.tree_max_bytes >= 0) co.auto_tree_max_bytes = c.tree_max_bytes;
  collective::SelectorOptions so = collective::SelectorOptionsOf(co);
  s->selector = std::make_unique<collective::Selector>(*s->plan, so);
  if (c.fuse_grad_size_mb < 0)
    return InvalidArgument("fuse_grad_size_mb must be >= 0, got ", c.fuse_grad_size_mb);
  if (c.owner_policy != "bytes" && c.owner_policy != "hash")
    return InvalidArgument("owner policy '", c.owner_policy, "' is not one of bytes, hash");
  for (const auto& d : c.disabled_passes) {
    bool known = false;
    for (const auto& p : DataParallelPasses()) {
      if (d != p.name) continue;
      known = true;
      if (!p.optional) return InvalidArgument("pass '", d, "' cannot be disabled");
    }
    if (!known) return InvalidArgument("no pass named '", d, "' to disable");
  }
  for (const ProgramDesc* prog : {&s->startup, &s->main}) {
    for (int b = 0; b < prog->NumBlocks(); ++b) {
      const BlockDesc* block = prog->Block(b);
      for (int i = 0; i < block->OpSize(); ++i) {
        const std::string& type = block->Op(i).Type();
        if (IsCollectiveOp(type))
          return FailedPrecondition("the ", prog == &s->main ? "main" : "startup",
                                    " program is already transpiled for data parallelism (it has ",
                                    OpLocation(type, b, i),
                                    "); transpile the single-device program");
      }
    }
  }
  const BlockDesc* block = s->main.GlobalBlock();
  bool any_update = false;
  for (int i = 0; i < block->OpSize(); ++i) any_update |= IsUpdateOp(block->Op(i));
  if (!any_update)
    return InvalidArgument(
        "the main program has no optimizer ops (op_role optimize with Param "
        "and Grad inputs): call optimizer.minimize(loss) before transpiling");
  return Status::OK();
}

// The index of the nearest block, from `block` up, that declares `name` (-1: none).
int DeclaringBlock(const BlockDesc* block, const std::string& name) {
  for (const BlockDesc* b = block; b; b = b->Parent())
    if (b->HasVar(name)) return b->Idx();
  return -1;
}

Status FindGradients(State* s) {
  const BlockDesc* block = s->main.GlobalBlock();
  std::set<std::string> seen;
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (!IsUpdateOp(op)) continue;
    ParamSync p;
    p.param = op.Input("Param")[0];
    p.update_op = i;
    if (!seen.insert(p.param).second)
      return InvalidArgument("parameter '", p.param, "' is updated by more than one optimizer op (",
                             OpLocation(op.Type(), 0, i), " is the second)");
    p.grad = GradVarName(p.param);
    for (int j = 0; j < i; ++j) {
      OpDesc w = block->Op(j);
      if ((w.Role() & kOpRoleBackward) && Writes(w, p.grad)) p.producer = j;
    }
    // A sub-block (control flow) may compute the gradient as its own variable (a gradient block
    // does; its control-flow op copies it out in block 0, where it is synchronized), but one
    // that writes block 0's gradient itself would update it unsynchronized.
    for (int b = 1; b < s->main.NumBlocks(); ++b) {
      const BlockDesc* sub = s->main.Block(b);
      if (DeclaringBlock(sub, p.grad) > 0) continue;
      for (int j = 0; j < sub->OpSize(); ++j)
        if (Writes(sub->Op(j), p.grad))
          return Unimplemented("parameter '", p.param, "': its gradient '", p.grad,
                               "' of block 0 is written inside sub-block ", b, " (",
                               OpLocation(sub->Op(j).Type(), b, j),
                               "); the transpiler synchronizes gradients of block 0 only");
    }
    if (p.producer < 0)
      return InvalidArgument("parameter '", p.param, "': ", OpLocation(op.Type(), 0, i),
                             " updates it but no backward op writes its gradient '", p.grad,
                             "' (is the loss on a branch that does not use it?)");
    VarDesc v = block->FindVar(p.param);
    if (!v) return NotFound("parameter '", p.param, "' has no VarDesc in block 0");
    DDim d = v.Dims();
    if (d.numel() < 0)
      return InvalidArgument("parameter '", p.param, "' has dims ", d.ToString(),
                             ": parameters need static dims");
    p.dtype = v.Dtype();
    p.bytes = d.numel() * static_cast<int64_t>(SizeOf(p.dtype));
    s->params.push_back(p);
  }
  for (const VarDesc& v : block->AllVars())
    if (v.IsParameter() && !seen.count(v.Name())) s->frozen.push_back(v.Name());
  // The input whose dim 0 counts a rank's samples: the first batch-shaped variable the program
  // reads before writing it.
  std::set<std::string> written;
  for (int i = 0; i < block->OpSize() && s->batch_var.empty(); ++i) {
    OpDesc op = block->Op(i);
    for (const auto& name : op.InputArgumentNames()) {
      VarDesc v = block->FindVar(name);
      if (!written.count(name) && v && !v.Persistable() &&
          v.Type() == proto::VarType::DENSE_TENSOR && v.Dims().size() > 0 && v.Dims()[0] < 0) {
        s->batch_var = name;
        break;
      }
    }
    for (const auto& name : op.OutputArgumentNames()) written.insert(name);
  }
  return Status::OK();
}

// Which parameter each optimize-role op serves: the one whose param or gradient it touches,
// directly or through temporaries of ops serving it. An op serving several parameters is split
// across owners only when it is a `sum` whose every input is a term of one parameter (the global
// norm of clipping by global norm: each owner adds its terms, then the ranks allreduce); any
// other such op is an error.
Status BindOptimizerOps(State* s) {
  const BlockDesc* block = s->main.GlobalBlock();
  std::map<std::string, int> of_var;
  for (size_t k = 0; k < s->params.size(); ++k) {
    of_var[s->params[k].param] = static_cast<int>(k);
    of_var[s->params[k].grad] = static_cast<int>(k);
  }
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (!(op.Role() & kOpRoleOptimize)) continue;
    std::set<int> served;
    auto ins = op.InputArgumentNames();
    auto outs = op.OutputArgumentNames();
    if (IsUpdateOp(op)) {
      served.insert(of_var.at(op.Input("Param")[0]));
    } else {
      for (const auto* names : {&ins, &outs})
        for (const auto& n : *names)
          if (auto it = of_var.find(n); it != of_var.end()) served.insert(it->second);
    }
    if (served.size() > 1) {
      std::vector<std::pair<std::string, int>> terms;
      if (op.Type() == "sum" && outs.size() == 1 && !of_var.count(outs[0])) {
        for (const auto& n : op.Input("X")) {
          auto it = of_var.find(n);
          if (it == of_var.end() || n == s->params[it->second].param ||
              n == s->params[it->second].grad) {
            terms.clear();  // a raw param or gradient, or a term of no parameter
            break;
          }
          terms.push_back({n, it->second});
        }
      }
      if (terms.empty()) {
        std::string list;
        for (int k : served) list += (list.empty() ? "'" : ", '") + s->params[k].param + "'";
        return InvalidArgument(OpLocation(op.Type(), 0, i), " combines the gradients of ", list,
                               ", which owner mode updates on different ranks; only a sum of "
                               "per-parameter terms (clipping by global norm) can be split; use "
                               "mode allreduce");
      }
      s->partial_sums[i] = std::move(terms);
      continue;  // its output serves every parameter
    }
    if (served.empty()) continue;
    int k = *served.begin();
    s->op_param[i] = k;
    for (const auto& n : outs)
      if (!of_var.count(n)) of_var[n] = k;  // a temporary of this parameter's update
  }
  return Status::OK();
}

Status AssignOwners(State* s) {
  if (s->config.mode != SyncMode::kOwner) return Status::OK();
  LOOM_RETURN_IF_ERROR(BindOptimizerOps(s));
  int n = s->config.nranks;
  std::vector<int64_t> load(n, 0);
  if (s->config.owner_policy == "hash") {
    for (auto& p : s->params) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across runs and machines
      for (unsigned char ch : p.param) h = (h ^ ch) * 1099511628211ull;
      p.owner = static_cast<int>(h % static_cast<uint64_t>(n));
      load[p.owner] += p.bytes;
    }
  } else {
    std::vector<int> order(s->params.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return s->params[a].bytes > s->params[b].bytes; });
    for (int k : order) {
      int best = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      s->params[k].owner = best;
      load[best] += s->params[k].bytes;
    }
  }
  int64_t total = 0, most = 0;
  for (int64_t l : load) {
    s->manifest.add_owner_bytes(l);
    total += l;
    most = std::max(most, l);
  }
  s->manifest.set_owner_imbalance(total > 0 ? static_cast<double>(most) * n / total : 1.0);
  return Status::OK();
}

Status PlanBuckets(State* s) {
  std::vector<int> order(s->params.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return s->params[a].producer < s->params[b].producer; });
  const bool owner = s->config.mode == SyncMode::kOwner;
  const int64_t limit = static_cast<int64_t>(s->config.fuse_grad_size_mb * (1 << 20));
  bool fuse = !owner && limit > 0 &&
              std::find(s->config.disabled_passes.begin(), s->config.disabled_passes.end(),
                        "plan-buckets") == s->config.disabled_passes.end();
  Bucket current;
  auto close = [&] {
    if (current.params.empty()) return;
    s->buckets.push_back(current);
    current = Bucket();
  };
  for (int k : order) {
    const ParamSync& p = s->params[k];
    bool alone = !fuse || p.bytes >= limit;
    if (alone || (!current.params.empty() && (current.bytes + p.bytes > limit ||
                                              s->params[current.params[0]].dtype != p.dtype)))
      close();
    current.params.push_back(k);
    current.bytes += p.bytes;
    current.position = std::max(current.position, p.producer);
    if (alone) close();
  }
  close();
  for (size_t b = 0; b < s->buckets.size(); ++b) {
    Bucket& bucket = s->buckets[b];
    bucket.fused = bucket.params.size() > 1;
    bucket.algorithm = ResolveAlgorithm(
        *s, owner ? collective::Collective::kReduce : collective::Collective::kAllReduce,
        bucket.bytes);
    for (int k : bucket.params) s->params[k].bucket = static_cast<int>(b);
  }
  return Status::OK();
}

Status InsertCommInit(State* s) {
  BlockDesc* sb = s->startup.GlobalBlock();
  if (!s->config.keep_startup_init) {
    while (sb->OpSize() > 0) sb->RemoveOp(sb->OpSize() - 1);
  }
  DeclareCommVar(sb);
  DeclareCommVar(s->main.GlobalBlock());
  OpDesc op = sb->InsertOp(0);
  op.SetType("comm_init");
  op.SetOutput("Comm", {kCommVar});
  op.SetAttr("nranks", s->config.nranks);
  op.SetAttr("rank", 0);  // set per rank by split-per-rank
  op.SetAttr("group", s->config.group);
  op.SetAttr("transport", s->config.transport);
  op.SetAttr("topology", s->config.topology);
  op.SetAttr("timeout_ms", s->config.timeout_ms);
  op.SetAttr("tree_max_bytes", s->config.tree_max_bytes);
  op.SetRole(kOpRoleCommunication);
  return Status::OK();
}

Status BroadcastParams(State* s) {
  BlockDesc* sb = s->startup.GlobalBlock();
  const BlockDesc* mb = s->main.GlobalBlock();
  for (const VarDesc& v : mb->AllVars()) {
    if (!v.IsParameter()) continue;
    if (!sb->HasVar(v.Name())) DeclareLike(sb, v);
    int64_t bytes = std::max<int64_t>(v.Dims().numel(), 0) * SizeOf(v.Dtype());
    OpDesc op = sb->AppendOp(
        "broadcast", {{"X", {v.Name()}}, {"Comm", {kCommVar}}}, {{"Out", {v.Name()}}},
        {{"root", 0},
         {"algorithm", ResolveAlgorithm(*s, collective::Collective::kBroadcast, bytes)}});
    op.SetRole(kOpRoleCommunication);
  }
  return Status::OK();
}

Status InsertGradSync(State* s) {
  const auto& c = s->config;
  const bool owner = c.mode == SyncMode::kOwner;
  BlockDesc* block = s->main.GlobalBlock();
  if (c.grad_scale == GradScale::kSample) {
    if (s->batch_var.empty())
      return InvalidArgument(
          "grad scale 'sample' weighs each rank by its batch rows, but the "
          "program reads no batch-shaped input (dims [-1, ...]); use grad "
          "scale avg or one");
    VarDesc w = block->Var(kSampleWeightVar);
    w.SetType(proto::VarType::DENSE_TENSOR);
    w.SetDtype(proto::FP32);
    w.SetDims(DDim({1}));
    w.SetStopGradient(true);
  }
  const std::string reduce_type = c.grad_scale == GradScale::kAvg ? "avg" : "sum";
  std::map<int, std::vector<proto::OpDesc>> after;  // original op index -> ops to insert after
  std::vector<proto::OpDesc> prefix;
  auto make = [](const std::string& type,
                 const std::vector<std::pair<std::string, std::vector<std::string>>>& ins,
                 const std::vector<std::pair<std::string, std::vector<std::string>>>& outs,
                 const AttributeMap& attrs, int role) {
    proto::OpDesc p;
    OpDesc op(&p);
    op.SetType(type);
    for (const auto& [slot, vars] : ins) op.SetInput(slot, vars);
    for (const auto& [slot, vars] : outs) op.SetOutput(slot, vars);
    for (const auto& [name, value] : attrs) op.SetAttr(name, value);
    op.SetRole(role);
    return p;
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> weight;
  if (c.grad_scale == GradScale::kSample) {
    weight.push_back({"Weight", {kSampleWeightVar}});
    prefix.push_back(make("sample_weight", {{"X", {s->batch_var}}, {"Comm", {kCommVar}}},
                          {{"Out", {kSampleWeightVar}}}, {}, kOpRoleCommunication));
  }
  for (size_t b = 0; b < s->buckets.size(); ++b) {
    const Bucket& bucket = s->buckets[b];
    std::vector<std::string> grads, params;
    for (int k : bucket.params) {
      grads.push_back(s->params[k].grad);
      params.push_back(s->params[k].param);
    }
    if (bucket.fused) {
      std::string fused = "@LOOM_FUSED_GRADS_" + std::to_string(b) + "@";
      VarDesc f = block->Var(fused);
      f.SetType(proto::VarType::DENSE_TENSOR);
      f.SetDtype(s->params[bucket.params[0]].dtype);
      f.SetDims(DDim({bucket.bytes / static_cast<int64_t>(SizeOf(f.Dtype()))}));
      f.SetStopGradient(true);
      prefix.push_back(make("coalesce_grads", {{"Params", params}},
                            {{"Grads", grads}, {"Fused", {fused}}}, {}, kOpRoleBackward));
    }
    auto ins = weight;
    ins.insert(ins.begin(), {"Comm", {kCommVar}});
    ins.insert(ins.begin(), {"X", grads});
    const int role = kOpRoleBackward | kOpRoleCommunication;
    if (owner) {
      after[bucket.position].push_back(make("reduce", ins, {{"Out", grads}},
                                            {{"root", s->params[bucket.params[0]].owner},
                                             {"reduce_type", reduce_type},
                                             {"algorithm", bucket.algorithm}},
                                            role));
    } else {
      after[bucket.position].push_back(
          make("allreduce", ins, {{"Out", grads}},
               {{"reduce_type", reduce_type}, {"algorithm", bucket.algorithm}}, role));
    }
  }
  for (const auto& [i, terms] : s->partial_sums) {
    OpDesc op = block->Op(i);
    const std::string out = op.Output("Out")[0];
    VarDesc v = block->FindVarRecursive(out);
    int64_t bytes = v ? std::max<int64_t>(v.Dims().numel(), 1) * SizeOf(v.Dtype()) : 8;
    after[i].push_back(
        make("allreduce", {{"X", {out}}, {"Comm", {kCommVar}}}, {{"Out", {out}}},
             {{"reduce_type", std::string("sum")},
              {"algorithm", ResolveAlgorithm(*s, collective::Collective::kAllReduce, bytes)}},
             kOpRoleOptimize | kOpRoleCommunication));
  }
  if (owner) {
    for (const ParamSync& p : s->params) {
      int64_t bytes = p.bytes;
      after[p.update_op].push_back(
          make("broadcast", {{"X", {p.param}}, {"Comm", {kCommVar}}}, {{"Out", {p.param}}},
               {{"root", p.owner},
                {"algorithm", ResolveAlgorithm(*s, collective::Collective::kBroadcast, bytes)}},
               kOpRoleOptimize | kOpRoleCommunication));
    }
  }
  // Rebuild the op list; remember where each original op went (split-per-rank needs it).
  google::protobuf::RepeatedPtrField<proto::OpDesc> ops;
  for (auto& p : prefix) *ops.Add() = p;
  std::map<int, int> moved;
  for (int i = 0; i < block->OpSize(); ++i) {
    moved[i] = ops.size();
    *ops.Add() = *block->Op(i).proto();
    for (auto& p : after[i]) *ops.Add() = p;
  }
  block->proto()->mutable_ops()->Swap(&ops);
  std::map<int, int> op_param;
  for (const auto& [i, k] : s->op_param) op_param[moved[i]] = k;
  s->op_param = op_param;
  std::map<int, std::vector<std::pair<std::string, int>>> partial_sums;
  for (auto& [i, terms] : s->partial_sums) partial_sums[moved[i]] = std::move(terms);
  s->partial_sums = std::move(partial_sums);
  return Status::OK();
}

Status SplitPerRank(State* s) {
  const bool owner = s->config.mode == SyncMode::kOwner;
  for (int r = 0; r < s->config.nranks; ++r) {
    ProgramDesc startup = s->startup;
    ProgramDesc main = s->main;
    BlockDesc* sb = startup.GlobalBlock();
    for (int i = 0; i < sb->OpSize(); ++i)
      if (sb->Op(i).Type() == "comm_init") sb->Op(i).SetAttr("rank", r);
    if (owner) {
      BlockDesc* mb = main.GlobalBlock();
      // Partial sums keep the terms of this rank's parameters; with none, the rank adds zero.
      for (const auto& [i, terms] : s->partial_sums) {
        OpDesc op = mb->Op(i);
        std::vector<std::string> mine;
        for (const auto& [var, k] : terms)
          if (s->params[k].owner == r) mine.push_back(var);
        if (!mine.empty()) {
          op.SetInput("X", mine);
          continue;
        }
        VarDesc out = mb->FindVarRecursive(op.Output("Out")[0]);
        std::vector<int64_t> shape;
        for (int64_t d : out.Dims().vec()) shape.push_back(std::max<int64_t>(d, 1));
        if (shape.empty()) shape.push_back(1);
        op.RemoveInput("X");
        op.SetType("fill_constant");
        op.SetAttr("shape", shape);
        op.SetAttr("value", 0.0f);
        op.SetAttr("dtype", static_cast<int>(out.Dtype()));
      }
      std::set<std::string> state;  // optimizer state of parameters this rank does not own
      for (int i = mb->OpSize() - 1; i >= 0; --i) {
        auto it = s->op_param.find(i);
        if (it == s->op_param.end() || s->params[it->second].owner == r) continue;
        OpDesc op = mb->Op(i);
        if (IsUpdateOp(op)) {
          for (const auto& slot : op.InputSlots()) {
            if (slot == "Param" || slot == "Grad" || slot == "LearningRate") continue;
            for (const auto& v : op.Input(slot)) {
              VarDesc d = mb->FindVar(v);
              if (d && d.Persistable() && !d.IsParameter()) state.insert(v);
            }
          }
        }
        mb->RemoveOp(i);
      }
      for (const auto& v : state) {
        mb->RemoveVar(v);
        for (int i = sb->OpSize() - 1; i >= 0; --i) {
          auto outs = sb->Op(i).OutputArgumentNames();
          bool only_state = !outs.empty() && std::all_of(outs.begin(), outs.end(), [&](auto& o) {
            return state.count(o) > 0;
          });
          if (only_state) sb->RemoveOp(i);
        }
        sb->RemoveVar(v);
      }
    }
    s->rank_startup.push_back(std::move(startup));
    s->rank_main.push_back(std::move(main));
  }
  return Status::OK();
}

struct Pass {
  PassInfo info;
  Status (*run)(State*);
};

const std::vector<Pass>& Pipeline() {
  static const std::vector<Pass> passes = {
      {{"check-program", "rejects transpiled programs and programs without optimizer ops", false},
       CheckProgram},
      {{"find-gradients", "pairs each optimized parameter with the gradient backward writes",
        false},
       FindGradients},
      {{"assign-owners", "owner mode: one owner rank per parameter (by bytes or name hash)", false},
       AssignOwners},
      {{"plan-buckets", "groups small gradients into fused buckets; resolves algorithm auto", true},
       PlanBuckets},
      {{"insert-comm-init", "comm_init in startup; the communicator var in both programs", false},
       InsertCommInit},
      {{"broadcast-params", "broadcasts every parameter from rank 0 after initialization", true},
       BroadcastParams},
      {{"insert-grad-sync", "allreduce (or reduce + broadcast) right after each bucket's grads",
        false},
       InsertGradSync},
      {{"split-per-rank", "per-rank programs; owner mode keeps only owned optimizer ops", false},
       SplitPerRank},
  };
  return passes;
}

Status Verify(const State& s, const std::string& pass) {
  auto check = [&](const ProgramDesc& p, const std::string& what) -> Status {
    Status st = VerifyProgram(p);
    if (!st.ok())
      return Status(st.code(), "after pass '" + pass + "', the " + what +
                                   " program does not verify: " + st.message());
    return Status::OK();
  };
  if (s.rank_main.empty()) {
    LOOM_RETURN_IF_ERROR(check(s.startup, "startup"));
    return check(s.main, "main");
  }
  for (size_t r = 0; r < s.rank_main.size(); ++r) {
    LOOM_RETURN_IF_ERROR(check(s.rank_startup[r], "rank " + std::to_string(r) + " startup"));
    LOOM_RETURN_IF_ERROR(check(s.rank_main[r], "rank " + std::to_string(r) + " main"));
  }
  return Status::OK();
}

void FillManifest(State* s) {
  auto& m = s->manifest;
  const auto& c = s->config;
  m.set_nranks(c.nranks);
  for (const auto& p : c.places) m.add_places(p);
  m.set_mode(SyncModeName(c.mode));
  m.set_algorithm(c.algorithm);
  m.set_grad_scale(GradScaleName(c.grad_scale));
  m.set_fuse_grad_size_mb(c.fuse_grad_size_mb);
  m.set_group(c.group);
  m.set_transport(c.transport);
  if (c.grad_scale == GradScale::kSample) m.set_batch_var(s->batch_var);
  for (const auto& p : s->params) {
    auto* mp = m.add_params();
    mp->set_name(p.param);
    mp->set_grad(p.grad);
    mp->set_bytes(p.bytes);
    if (p.owner >= 0) mp->set_owner(p.owner);
    mp->set_bucket(p.bucket);
  }
  for (size_t b = 0; b < s->buckets.size(); ++b) {
    const Bucket& bucket = s->buckets[b];
    auto* mb = m.add_buckets();
    mb->set_id(static_cast<int>(b));
    for (int k : bucket.params) mb->add_grads(s->params[k].grad);
    mb->set_bytes(bucket.bytes);
    mb->set_algorithm(bucket.algorithm);
    mb->set_collective(c.mode == SyncMode::kOwner ? "reduce" : "allreduce");
    mb->set_fused(bucket.fused);
  }
  for (const auto& f : s->frozen) m.add_frozen_params(f);
}

}  // namespace

const std::vector<PassInfo>& DataParallelPasses() {
  static const std::vector<PassInfo> infos = [] {
    std::vector<PassInfo> v;
    for (const auto& p : Pipeline()) v.push_back(p.info);
    return v;
  }();
  return infos;
}

StatusOr<DataParallelResult> TranspileDataParallel(const ProgramDesc& startup,
                                                   const ProgramDesc& main,
                                                   const DataParallelConfig& config) {
  State s(config);
  s.startup = startup;
  s.main = main;
  for (const Pass& pass : Pipeline()) {
    const auto& disabled = config.disabled_passes;
    if (pass.info.optional && pass.run != PlanBuckets &&
        std::find(disabled.begin(), disabled.end(), pass.info.name) != disabled.end())
      continue;
    Status st = pass.run(&s);
    if (!st.ok()) return Status(st.code(), std::string("transpile: ") + st.message());
    s.manifest.add_passes(pass.info.name);
    LOOM_RETURN_IF_ERROR(Verify(s, pass.info.name));
  }
  FillManifest(&s);
  DataParallelResult result;
  result.startup = std::move(s.rank_startup);
  result.main = std::move(s.rank_main);
  result.manifest = s.manifest;
  return result;
}

StatusOr<SyncMode> ParseSyncMode(const std::string& name) {
  if (name == "allreduce") return SyncMode::kAllReduce;
  if (name == "owner" || name == "reduce") return SyncMode::kOwner;
  return InvalidArgument("mode '", name, "' is not one of allreduce, owner");
}

StatusOr<GradScale> ParseGradScale(const std::string& name) {
  if (name == "sample") return GradScale::kSample;
  if (name == "avg") return GradScale::kAvg;
  if (name == "one") return GradScale::kOne;
  return InvalidArgument("grad scale '", name, "' is not one of sample, avg, one");
}

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kOwner ? "owner" : "allreduce"; }

const char* GradScaleName(GradScale scale) {
  switch (scale) {
    case GradScale::kSample: return "sample";
    case GradScale::kAvg: return "avg";
    default: return "one";
  }
}

}  // namespace loom::transpiler
