#include "transpiler/data_parallel_passes.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "framework/op_role.h"
#include "transpiler/program_edit.h"

namespace loom::transpiler {

using collective::Collective;
using collective::CollectiveName;

Collective GradCollective(const DataParallelState& s) {
  return s.owner_mode() ? Collective::kReduce : Collective::kAllReduce;
}

std::vector<NamedProgram> DataParallelState::Programs() const {
  if (rank_main.empty()) return {{"startup", &startup}, {"main", &main}};
  std::vector<NamedProgram> out;
  for (size_t r = 0; r < rank_main.size(); ++r) {
    out.push_back({StrCat("rank", r, "/startup"), &rank_startup[r]});
    out.push_back({StrCat("rank", r, "/main"), &rank_main[r]});
  }
  return out;
}

namespace {

// FNV-1a over the single-device main program (startup programs may differ per rank: each may
// draw its own initial values, which the broadcast replaces) and every option that shapes the
// ranks' programs.
std::string Fingerprint(const DataParallelState& s) {
  const auto& c = s.config;
  return ProgramFingerprint(
      s.main, StrCat("|", c.nranks, "|", SyncModeName(c.mode), "|",
                     collective::AlgorithmName(c.algorithm), "|", c.fuse_grad_size_mb, "|",
                     GradScaleName(c.grad_scale), "|", PlacementPolicyName(c.owner_policy), "|",
                     collective::GetTransport(c.transport).name, "|", c.topology, "|",
                     c.tree_max_bytes, c.grad_compression.empty() ? "" : "|" + c.grad_compression));
}

}  // namespace

StatusOr<bool> CheckProgram(DataParallelState& s) {
  const auto& c = s.config;
  if (c.nranks < 1 || c.nranks > collective::kMaxWorldSize)
    return InvalidArgument("world size ", c.nranks, " is outside 1..", collective::kMaxWorldSize);
  CollectiveSetup setup{c.nranks, c.transport, c.algorithm, c.topology, c.tree_max_bytes};
  auto chooser = AlgorithmChooser::Create(setup);
  if (!chooser.ok()) return chooser.status();
  s.chooser = std::move(chooser).value();
  LOOM_RETURN_IF_ERROR(CheckPlacesFit(c.places, c.nranks, s.chooser->transport()));
  if (c.fuse_grad_size_mb < 0)
    return InvalidArgument("fuse_grad_size_mb must be >= 0, got ", c.fuse_grad_size_mb);
  if (!c.grad_compression.empty()) {
    if (c.grad_compression == "bf16")
      return Unimplemented("gradient compression bf16 is not built yet (fp16 is)");
    if (c.grad_compression != "fp16")
      return InvalidArgument("gradient compression must be fp16 (or empty: none), got '",
                             c.grad_compression, "'");
    if (c.mode != SyncMode::kAllReduce)
      return InvalidArgument(
          "gradient compression fp16 needs allreduce mode (owner mode "
          "reduces gradients uncompressed)");
    if (s.chooser->transport().device != collective::DeviceKind::kCpu)
      return InvalidArgument("gradient compression fp16 runs on CPU places (transport '",
                             s.chooser->transport().name, "' moves device memory)");
  }
  s.fingerprint = Fingerprint(s);
  LOOM_RETURN_IF_ERROR(CheckSingleDeviceInput(s.startup, s.main));
  return false;
}

StatusOr<bool> FindGradients(DataParallelState& s) {
  // Sparse gradients are exchanged as rows (sparse_allreduce) between CPU places; on CUDA
  // places the gradient kernels write them dense.
  bool cuda = s.config.transport == collective::TransportId::kNccl ||
              s.config.transport == collective::TransportId::kCudaP2P;
  for (const Place& p : s.config.places) cuda |= p.is_cuda();
  if (cuda) LOOM_RETURN_IF_ERROR(DensifySparseGradients(&s.main).status());
  LOOM_ASSIGN_OR_RETURN(s.grads, AnalyzeGradients(s.main));
  return false;
}

StatusOr<bool> AssignOwners(DataParallelState& s) {
  if (!s.owner_mode()) return false;
  LOOM_ASSIGN_OR_RETURN(bool changed, TagOptimizerOps(&s.main, s.grads));
  const PlacementPolicy policy = s.config.owner_policy;
  std::vector<PlacementItem> items;
  for (const auto& p : s.grads.params) items.push_back({p.param, p.bytes});
  Placement placement = PlaceItems(items, s.config.nranks, policy);
  for (size_t k = 0; k < items.size(); ++k) s.owner[items[k].name] = placement.owner[k];
  s.owner_bytes = placement.load;
  s.owner_imbalance = placement.Imbalance();
  return changed;
}

StatusOr<bool> PlanGradBuckets(DataParallelState& s) {
  // Owner mode reduces each gradient to its own owner: nothing to fuse.
  const double mb = s.owner_mode() ? 0 : s.config.fuse_grad_size_mb;
  s.buckets = PlanBuckets(s.main, s.grads.params, static_cast<int64_t>(mb * (1 << 20)));
  s.buckets_planned = true;
  return false;
}

StatusOr<bool> InsertCommInit(DataParallelState& s) {
  BlockDesc* sb = s.startup.GlobalBlock();
  if (!s.config.keep_startup_init) {
    while (sb->OpSize() > 0) sb->RemoveOp(sb->OpSize() - 1);
  }
  DeclareCommunicator(sb, kCommVar);
  DeclareCommunicator(s.main.GlobalBlock(), kCommVar);
  const auto& c = s.config;
  OpDesc op = sb->InsertOp(0);
  op.SetType("comm_init");
  op.SetOutput("Comm", {kCommVar});
  op.SetAttr("nranks", c.nranks);
  op.SetAttr("rank", 0);  // set per rank by split-per-rank
  op.SetAttr("group", c.group);
  op.SetAttr("transport", std::string(collective::GetTransport(c.transport).name));
  op.SetAttr("topology", c.topology);
  op.SetAttr("timeout_ms", c.timeout_ms);
  op.SetAttr("tree_max_bytes", c.tree_max_bytes);
  op.SetAttr("fingerprint", s.fingerprint);
  op.SetRole(kOpRoleCommunication);
  return true;
}

StatusOr<bool> BroadcastParams(DataParallelState& s) {
  BlockDesc* sb = s.startup.GlobalBlock();
  bool changed = false;
  for (const VarDesc& v : s.main.GlobalBlock()->AllVars()) {
    if (!v.IsParameter()) continue;
    if (!sb->HasVar(v.Name())) DeclareLike(sb, v);
    int64_t bytes = std::max<int64_t>(v.Dims().numel(), 0) * SizeOf(v.Dtype());
    OpDesc op = sb->AppendOp(
        CollectiveName(Collective::kBroadcast), {{"X", {v.Name()}}, {"Comm", {kCommVar}}},
        {{"Out", {v.Name()}}},
        {{"root", 0}, {"algorithm", s.chooser->Resolve(Collective::kBroadcast, bytes)}});
    op.SetRole(kOpRoleCommunication);
    changed = true;
  }
  return changed;
}

StatusOr<bool> CheckPersistables(DataParallelState& s) {
  // Every persistable dense tensor some op of main reads, in name order (the same list on
  // every rank): parameters (after their broadcast), learning rates, optimizer state, counters.
  std::set<std::string> read;
  for (int b = 0; b < s.main.NumBlocks(); ++b) {
    BlockDesc* block = s.main.Block(b);
    for (int i = 0; i < block->OpSize(); ++i)
      for (const auto& name : block->Op(i).InputArgumentNames()) read.insert(name);
  }
  BlockDesc* mb = s.main.GlobalBlock();
  BlockDesc* sb = s.startup.GlobalBlock();
  std::vector<std::string> vars;
  for (const auto& name : read) {
    if (!mb->HasVar(name)) continue;
    VarDesc v = mb->Var(name);
    if (!v.Persistable() || v.Type() != proto::VarType::DENSE_TENSOR) continue;
    if (!sb->HasVar(name)) DeclareLike(sb, v);
    vars.push_back(name);
  }
  if (vars.empty()) return false;
  // `vars` is the list every rank compares; X, what this rank holds of it (split-per-rank
  // drops the optimizer state a rank does not own), orders the check after their initializers.
  OpDesc op =
      sb->AppendOp("check_persistables", {{"X", vars}, {"Comm", {kCommVar}}}, {}, {{"vars", vars}});
  op.SetRole(kOpRoleCommunication);
  return true;
}

namespace {

// sample_weight first, and the weight input of every gradient collective.
StatusOr<SlotList> SampleWeight(DataParallelState& s, Insertions* ops) {
  if (s.config.grad_scale != GradScale::kSample) return SlotList{};
  if (s.grads.batch_var.empty())
    return InvalidArgument(
        "grad scale 'sample' weighs each rank by its batch rows, but the "
        "program reads no batch-shaped input (dims [-1, ...]); use grad "
        "scale avg or one");
  VarDesc w = s.main.GlobalBlock()->Var(kSampleWeightVar);
  w.SetType(proto::VarType::DENSE_TENSOR);
  w.SetDtype(proto::FP64);  // exact for float64 gradients
  w.SetDims(DDim({1}));
  w.SetStopGradient(true);
  (*ops)[-1].push_back(MakeOp("sample_weight", {{"X", {s.grads.batch_var}}, {"Comm", {kCommVar}}},
                              {{"Out", {kSampleWeightVar}}}, {}, kOpRoleCommunication));
  return SlotList{{"Weight", {kSampleWeightVar}}};
}

// A fused bucket's gradients become views of one buffer (coalesce_grads, at the front); its
// allreduce (owner mode: reduce to the owner) follows the last op producing one of them.
void SyncBucket(DataParallelState& s, size_t b, const SlotList& weight, Insertions* ops) {
  GradBucket& bucket = s.buckets[b];
  BlockDesc* block = s.main.GlobalBlock();
  const bool owner = s.owner_mode();
  const Collective kind = GradCollective(s);
  bucket.algorithm = s.chooser->Resolve(kind, bucket.bytes);
  if (bucket.fused) {
    std::string fused = StrCat("@LOOM_FUSED_GRADS_", b, "@");
    VarDesc f = block->Var(fused);
    f.SetType(proto::VarType::DENSE_TENSOR);
    f.SetDtype(bucket.dtype);
    f.SetDims(DDim({bucket.bytes / static_cast<int64_t>(SizeOf(bucket.dtype))}));
    f.SetStopGradient(true);
    (*ops)[-1].push_back(MakeOp("coalesce_grads", {{"Params", bucket.params}},
                                {{"Grads", bucket.grads}, {"Fused", {fused}}}, {},
                                kOpRoleBackward));
  }
  int position = -1;
  for (const auto& g : bucket.grads) position = std::max(position, LastGradWriter(*block, g));
  SlotList ins = {{"X", bucket.grads}, {"Comm", {kCommVar}}};
  ins.insert(ins.end(), weight.begin(), weight.end());
  const std::string reduce_type = s.config.grad_scale == GradScale::kAvg ? "avg" : "sum";
  VarDesc g = block->FindVarRecursive(bucket.grads[0]);
  if (g && g.Type() == proto::VarType::SELECTED_ROWS) {
    // A sparse gradient: every rank gets the merged rows (owner mode too; only the owner's
    // update reads them).
    bucket.algorithm = "auto";
    (*ops)[position].push_back(MakeOp("sparse_allreduce", ins, {{"Out", bucket.grads}},
                                      {{"reduce_type", reduce_type}},
                                      kOpRoleBackward | kOpRoleCommunication));
    return;
  }
  AttributeMap attrs = {{"reduce_type", reduce_type}, {"algorithm", bucket.algorithm}};
  if (!s.config.grad_compression.empty() && bucket.dtype == proto::FP32)
    attrs["wire_dtype"] = s.config.grad_compression;
  if (owner) attrs["root"] = s.owner.at(bucket.params[0]);
  (*ops)[position].push_back(MakeOp(CollectiveName(kind), ins, {{"Out", bucket.grads}}, attrs,
                                    kOpRoleBackward | kOpRoleCommunication));
}

}  // namespace

StatusOr<bool> InsertGradSync(DataParallelState& s) {
  // Without plan-buckets every gradient is synchronized alone.
  if (!s.buckets_planned) s.buckets = PlanBuckets(s.main, s.grads.params, 0);
  Insertions ops;
  LOOM_ASSIGN_OR_RETURN(SlotList weight, SampleWeight(s, &ops));
  for (size_t b = 0; b < s.buckets.size(); ++b) SyncBucket(s, b, weight, &ops);
  BlockDesc* block = s.main.GlobalBlock();
  const int role = kOpRoleOptimize | kOpRoleCommunication;
  // Owner mode: each rank sums the terms of its own parameters (split-per-rank); the ranks then
  // add up their partial sums.
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (!s.owner_mode() || !IsPartialSum(op)) continue;
    const std::string out = op.Output("Out")[0];
    VarDesc v = block->FindVarRecursive(out);
    int64_t bytes = v ? std::max<int64_t>(v.Dims().numel(), 1) * SizeOf(v.Dtype()) : 8;
    ops[i].push_back(MakeOp(CollectiveName(Collective::kAllReduce),
                            {{"X", {out}}, {"Comm", {kCommVar}}}, {{"Out", {out}}},
                            {{"reduce_type", std::string("sum")},
                             {"algorithm", s.chooser->Resolve(Collective::kAllReduce, bytes)}},
                            role));
  }
  // Owner mode: the owner broadcasts the parameter it updated.
  for (const OptimizedParam& p : s.owner_mode() ? s.grads.params : std::vector<OptimizedParam>{})
    ops[FindUpdateOp(*block, p.param)].push_back(
        MakeOp(CollectiveName(Collective::kBroadcast), {{"X", {p.param}}, {"Comm", {kCommVar}}},
               {{"Out", {p.param}}},
               {{"root", s.owner.at(p.param)},
                {"algorithm", s.chooser->Resolve(Collective::kBroadcast, p.bytes)}},
               role));
  InsertOps(block, std::move(ops));
  return true;
}

namespace {

// Owner mode, rank r: a partial sum keeps the terms of r's parameters; with none, r adds zero.
void KeepOwnTerms(const DataParallelState& s, int r, BlockDesc* mb) {
  for (int i = 0; i < mb->OpSize(); ++i) {
    OpDesc op = mb->Op(i);
    if (!IsPartialSum(op)) continue;
    std::vector<std::string> terms = op.Input("X"), served = ServedParams(op), mine;
    for (size_t t = 0; t < terms.size() && t < served.size(); ++t)
      if (auto it = s.owner.find(served[t]); it != s.owner.end() && it->second == r)
        mine.push_back(terms[t]);
    if (!mine.empty()) {
      op.SetInput("X", mine);
      continue;
    }
    VarDesc out = mb->FindVarRecursive(op.Output("Out")[0]);
    std::vector<int64_t> shape;
    for (int64_t d : out.Dims().vec()) shape.push_back(std::max<int64_t>(d, 1));
    if (shape.empty()) shape.push_back(1);
    op.RemoveInput("X");
    op.RemoveAttr(kOpRoleVarAttr);  // it serves no parameter now
    op.SetType("fill_constant");
    op.SetAttr("shape", shape);
    op.SetAttr("value", 0.0f);
    op.SetAttr("dtype", static_cast<int>(out.Dtype()));
  }
}

}  // namespace

StatusOr<bool> SplitPerRank(DataParallelState& s) {
  for (int r = 0; r < s.config.nranks; ++r) {
    ProgramDesc startup = s.startup;
    ProgramDesc main = s.main;
    BlockDesc* sb = startup.GlobalBlock();
    for (int i = 0; i < sb->OpSize(); ++i)
      if (sb->Op(i).Type() == "comm_init") sb->Op(i).SetAttr("rank", r);
    if (s.owner_mode()) {
      KeepOwnTerms(s, r, main.GlobalBlock());
      // Optimizer ops serving one parameter run on its owner only.
      RemoveOptimizerOps(&main, &startup, [&](const OpDesc& op) {
        auto served = ServedParams(op);
        if (served.empty() || IsPartialSum(op)) return false;
        auto it = s.owner.find(served[0]);
        return it != s.owner.end() && it->second != r;
      });
      for (int i = 0; i < sb->OpSize(); ++i) {
        OpDesc op = sb->Op(i);
        if (op.Type() != "check_persistables") continue;
        std::vector<std::string> held;
        for (const auto& v : op.Input("X"))
          if (sb->HasVar(v)) held.push_back(v);
        op.SetInput("X", held);
      }
    }
    s.rank_startup.push_back(std::move(startup));
    s.rank_main.push_back(std::move(main));
  }
  return true;
}

}  // namespace loom::transpiler
