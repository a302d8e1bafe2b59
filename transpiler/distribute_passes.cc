#include "transpiler/distribute_passes.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "framework/op_role.h"
#include "framework/verifier.h"
#include "transpiler/program_edit.h"

namespace loom::transpiler {

using StrList = std::vector<std::string>;

std::string BlockVarName(const std::string& var, int index) { return StrCat(var, ".block", index); }

std::vector<NamedProgram> DistributeState::Programs() const {
  if (trainer_main.empty() && pserver_main.empty()) return {{"startup", &startup}, {"main", &main}};
  std::vector<NamedProgram> out;
  for (size_t s = 0; s < pserver_main.size(); ++s) {
    out.push_back({StrCat("pserver", s, "/startup"), &pserver_startup[s]});
    out.push_back({StrCat("pserver", s, "/main"), &pserver_main[s]});
  }
  for (size_t t = 0; t < trainer_main.size(); ++t) {
    out.push_back({StrCat("trainer", t, "/startup"), &trainer_startup[t]});
    out.push_back({StrCat("trainer", t, "/main"), &trainer_main[t]});
  }
  return out;
}

const DistributedTable* DistributeState::TableOf(const std::string& param) const {
  for (const auto& t : tables)
    if (t.param == param) return &t;
  return nullptr;
}

std::vector<const ParamBlock*> DistributeState::BlocksOf(const std::string& param) const {
  std::vector<const ParamBlock*> out;
  for (const auto& b : blocks)
    if (b.param == param) out.push_back(&b);
  return out;
}

namespace {

// FNV-1a over the single-device main program and every option that shapes the programs:
// trainers and servers of one transpile present the same at the handshake.
std::string Fingerprint(const DistributeState& s) {
  const auto& c = s.config;
  return ProgramFingerprint(
      s.main, StrCat("|pserver|", c.trainers, "|", c.pservers.size(), "|", c.sync_mode, "|",
                     c.slice_var_up, "|", c.split_method, "|", c.min_block_size));
}

StatusOr<PlacementPolicy> ParseSplitMethod(const std::string& m) {
  if (m == "round_robin" || m == "RoundRobin") return PlacementPolicy::kRoundRobin;
  if (m == "hash" || m == "HashName") return PlacementPolicy::kHash;
  if (m == "bytes") return PlacementPolicy::kBytes;
  return InvalidArgument("split method '", m,
                         "' is not one of round_robin (RoundRobin), hash "
                         "(HashName), bytes");
}

Status CheckEndpoint(const std::string& e) {
  if (e.rfind("pserver:", 0) == 0) {
    const std::string n = e.substr(8);
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit)) return Status::OK();
    return InvalidArgument("pserver endpoint '", e, "' is not pserver:N");
  }
  size_t colon = e.rfind(':');
  const std::string port = colon == std::string::npos ? "" : e.substr(colon + 1);
  if (colon == 0 || port.empty() || !std::all_of(port.begin(), port.end(), ::isdigit) ||
      std::stol(port.substr(0, 6)) < 1 || std::stol(port.substr(0, 6)) > 65535)
    return InvalidArgument("pserver endpoint '", e, "' is not host:port");
  return Status::OK();
}

// The ops of the learning-rate schedule (op_role lrsched) in main's block 0.
std::vector<int> LrOps(const BlockDesc& block) {
  std::vector<int> ops;
  for (int i = 0; i < block.OpSize(); ++i)
    if (block.Op(i).Role() & kOpRoleLRSched) ops.push_back(i);
  return ops;
}

}  // namespace

StatusOr<bool> CheckDistributeConfig(DistributeState& s) {
  const auto& c = s.config;
  if (c.trainers < 1 || c.trainers > 4096)
    return InvalidArgument("trainers must be in 1..4096, got ", c.trainers);
  if (c.pservers.empty()) return InvalidArgument("no parameter servers (pservers is empty)");
  std::set<std::string> seen;
  for (const auto& e : c.pservers) {
    LOOM_RETURN_IF_ERROR(CheckEndpoint(e));
    if (!seen.insert(e).second) return InvalidArgument("pserver endpoint '", e, "' given twice");
  }
  if (c.min_block_size < 1)
    return InvalidArgument("min_block_size must be >= 1, got ", c.min_block_size);
  if (c.client_size < 1 || c.client_rank < 0 || c.client_rank >= c.client_size)
    return InvalidArgument("client rank ", c.client_rank, " is not a rank of a client of ",
                           c.client_size, " processes");
  LOOM_ASSIGN_OR_RETURN(s.policy, ParseSplitMethod(c.split_method));
  LOOM_RETURN_IF_ERROR(CheckSingleDeviceInput(s.startup, s.main));
  s.fingerprint = Fingerprint(s);
  return false;
}

namespace {

// The tables a lookup_table with is_distributed reads in block 0.
std::set<std::string> DistributedTableNames(const ProgramDesc& main) {
  std::set<std::string> names;
  const BlockDesc* block = main.GlobalBlock();
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (op.Type() == "lookup_table" && op.Attr<bool>("is_distributed", false) && op.HasInput("W"))
      names.insert(op.Input("W")[0]);
  }
  return names;
}

// A distributed table's gradient is pushed row by row: its lookup_table_grad ops write a
// SelectedRows whatever is_sparse said.
Status MakeTableGradientsSparse(ProgramDesc* main, const std::set<std::string>& tables) {
  BlockDesc* block = main->GlobalBlock();
  bool changed = false;
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (op.Type() != "lookup_table_grad" || !op.HasInput("W") || !tables.count(op.Input("W")[0]))
      continue;
    if (!op.Attr<bool>("is_sparse", false)) {
      op.SetAttr("is_sparse", true);
      changed = true;
    }
  }
  if (!changed) return Status::OK();
  for (int i = 0; i < block->OpSize(); ++i)
    LOOM_RETURN_IF_ERROR(InferVarTypeAtCompileTime(block, i));
  return Status::OK();
}

// Only the table's lookups, their gradients and its update op may read a distributed table: the
// trainers never hold it.
Status CheckTableReaders(const ProgramDesc& main, const std::string& table) {
  for (int b = 0; b < main.NumBlocks(); ++b) {
    const BlockDesc* block = main.Block(b);
    for (int i = 0; i < block->OpSize(); ++i) {
      OpDesc op = block->Op(i);
      auto in = op.InputArgumentNames();
      if (std::find(in.begin(), in.end(), table) == in.end()) continue;
      const bool lookup = op.Type() == "lookup_table" && op.Attr<bool>("is_distributed", false);
      if (b == 0 && (lookup || op.Type() == "lookup_table_grad" || IsUpdateOp(op))) continue;
      return InvalidArgument(
          "distributed lookup table '", table, "' is read by ", OpLocation(op.Type(), b, i),
          ": only lookup_table ops with is_distributed=True (in block 0), their gradients and "
          "the table's update op may read it (the table lives on the parameter servers only)");
    }
  }
  return Status::OK();
}

// 64-bit FNV-1a of a name: the seed of a table whose initializer has none (seed 0 draws a
// fresh one on one device; every server must draw the same rows).
int64_t NameSeed(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h & 0x7fffffffffffffffull);
}

// The row initializer of a table, from the single-device startup's op that writes it.
Status TableInitializer(const ProgramDesc& startup, DistributedTable* t) {
  const BlockDesc* block = startup.GlobalBlock();
  for (int i = block->OpSize() - 1; i >= 0; --i) {
    OpDesc op = block->Op(i);
    auto outs = op.OutputArgumentNames();
    if (std::find(outs.begin(), outs.end(), t->param) == outs.end()) continue;
    const std::string& type = op.Type();
    if (type == "uniform_random") {
      t->init = "uniform";
      t->init_a = op.Attr<float>("min", -1.0f);
      t->init_b = op.Attr<float>("max", 1.0f);
    } else if (type == "gaussian_random") {
      t->init = "gaussian";
      t->init_a = op.Attr<float>("mean", 0.0f);
      t->init_b = op.Attr<float>("std", 1.0f);
    } else if (type == "fill_constant") {
      t->init = "constant";
      t->init_a = op.Attr<float>("value", 0.0f);
    } else {
      return Unimplemented("distributed lookup table '", t->param, "' is initialized by ",
                           OpLocation(type, 0, i),
                           " of the startup program: servers create a table's rows from "
                           "uniform_random, gaussian_random or fill_constant");
    }
    const int seed = op.Attr<int>("seed", 0);
    t->seed = seed != 0 ? seed : NameSeed(t->param);
    return Status::OK();
  }
  return InvalidArgument("distributed lookup table '", t->param,
                         "' is not initialized by the startup program");
}

// The is_sparse embeddings (not distributed) whose SelectedRows gradient can travel as rows:
// one lookup_table_grad writes it and only the table's optimizer op reads it (a regularizer
// or clipping that reads the gradient needs it dense on the trainer).
std::set<std::string> SparseGradientTables(const ProgramDesc& main,
                                           const std::set<std::string>& tables) {
  std::map<std::string, std::string> grad_of;  // table -> its gradient
  const BlockDesc* b0 = main.GlobalBlock();
  for (int i = 0; i < b0->OpSize(); ++i) {
    OpDesc op = b0->Op(i);
    if (op.Type() != "lookup_table_grad" || !op.Attr<bool>("is_sparse", false) ||
        !op.HasInput("W") || !op.HasOutput("W@GRAD") || tables.count(op.Input("W")[0]))
      continue;
    grad_of[op.Input("W")[0]] = op.Output("W@GRAD")[0];
  }
  std::set<std::string> out;
  for (const auto& [table, grad] : grad_of) {
    int writers = 0;
    bool only_update = true;
    for (int b = 0; b < main.NumBlocks(); ++b) {
      const BlockDesc* block = main.Block(b);
      for (int i = 0; i < block->OpSize(); ++i) {
        OpDesc op = block->Op(i);
        auto outs = op.OutputArgumentNames();
        auto ins = op.InputArgumentNames();
        if (std::find(outs.begin(), outs.end(), grad) != outs.end()) ++writers;
        if (std::find(ins.begin(), ins.end(), grad) != ins.end() &&
            !(b == 0 && IsUpdateOp(op) && UpdatedPair(op).first == table))
          only_update = false;
      }
    }
    if (writers == 1 && only_update) out.insert(table);
  }
  return out;
}

StatusOr<DistributedTable> DescribeTable(const DistributeState& s, const OptimizedParam& p) {
  DistributedTable t;
  t.param = p.param;
  t.grad = p.grad;
  t.dtype = p.dtype;
  const BlockDesc* block = s.main.GlobalBlock();
  const DDim dims = block->FindVar(p.param).Dims();
  if (dims.size() != 2 || dims[0] < 1 || dims[1] < 1)
    return InvalidArgument("distributed lookup table '", p.param, "' has dims ", dims.ToString(),
                           ": a table is [rows, width]");
  t.height = dims[0];
  t.width = dims[1];
  const int at = FindUpdateOp(*block, p.param);
  const OpDesc update = block->Op(at);
  const bool lazy_adam = update.Type() == "adam" && update.Attr<bool>("lazy_mode", false);
  if (update.Type() != "sgd" && update.Type() != "adagrad" && !lazy_adam)
    return Unimplemented("distributed lookup table '", p.param, "' is updated by ",
                         OpLocation(update.Type(), 0, at),
                         update.Type() == "adam" ? " without lazy_mode" : "",
                         ": parameter servers update distributed tables with sgd, adagrad or "
                         "adam(lazy_mode=True) only");
  t.optimizer = update.Type();
  t.lr = update.Input("LearningRate")[0];
  // The value the startup fills an accumulator with (fill_constant only, its str_value when
  // set, as the op reads it; 0 when none).
  auto initial = [&](const std::string& slot, double* value) -> Status {
    const std::string var = update.Input(slot)[0];
    const BlockDesc* sb = s.startup.GlobalBlock();
    *value = 0;
    for (int i = 0; i < sb->OpSize(); ++i) {
      OpDesc op = sb->Op(i);
      auto outs = op.OutputArgumentNames();
      if (std::find(outs.begin(), outs.end(), var) == outs.end()) continue;
      if (op.Type() != "fill_constant")
        return Unimplemented("distributed lookup table '", p.param, "': ", update.Type(), "'s ",
                             slot, " '", var, "' starts from ", OpLocation(op.Type(), 0, i),
                             "; servers take fill_constant accumulators only");
      const std::string text = op.Attr<std::string>("str_value", "");
      char* end = nullptr;
      *value = text.empty() ? op.Attr<float>("value", 0.0f) : std::strtod(text.c_str(), &end);
      if (!text.empty() && *end != '\0')
        return InvalidArgument(OpLocation(op.Type(), 0, i), " of the startup program: str_value '",
                               text, "' is not a number");
    }
    return Status::OK();
  };
  std::vector<std::string> zero_moments;
  if (t.optimizer == "adagrad") {
    t.epsilon = update.Attr<float>("epsilon", 1e-6f);
    zero_moments = {"Moment"};
  } else if (t.optimizer == "adam") {
    t.epsilon = update.Attr<float>("epsilon", 1e-8f);
    t.beta1 = update.Attr<float>("beta1", 0.9f);
    t.beta2 = update.Attr<float>("beta2", 0.999f);
    LOOM_RETURN_IF_ERROR(initial("Beta1Pow", &t.beta1_pow));
    LOOM_RETURN_IF_ERROR(initial("Beta2Pow", &t.beta2_pow));
    zero_moments = {"Moment1", "Moment2"};
  }
  // The server's rows start their moments at 0: another initial accumulator is refused.
  for (const auto& slot : zero_moments) {
    double v = 0;
    LOOM_RETURN_IF_ERROR(initial(slot, &v));
    if (v != 0.0)
      return Unimplemented("distributed lookup table '", p.param, "': ", t.optimizer, "'s ", slot,
                           " '", update.Input(slot)[0], "' starts at ", v,
                           "; servers start a row's moments at 0 (initial_accumulator_value=0)");
  }
  LOOM_RETURN_IF_ERROR(CheckTableReaders(s.main, p.param));
  LOOM_RETURN_IF_ERROR(TableInitializer(s.startup, &t));
  return t;
}

}  // namespace

StatusOr<bool> FindDistributeGradients(DistributeState& s) {
  const std::set<std::string> tables = DistributedTableNames(s.main);
  LOOM_RETURN_IF_ERROR(MakeTableGradientsSparse(&s.main, tables));
  // Hybrid mode allreduces gradients in the client first: dense ones only.
  std::set<std::string> sparse;
  if (s.config.client_size == 1) sparse = SparseGradientTables(s.main, tables);
  std::set<std::string> keep = tables;
  keep.insert(sparse.begin(), sparse.end());
  LOOM_RETURN_IF_ERROR(DensifySparseGradients(&s.main, keep).status());
  LOOM_ASSIGN_OR_RETURN(s.grads, AnalyzeGradients(s.main));
  for (const auto& p : s.grads.params)
    if (sparse.count(p.param)) s.sparse_params.insert(p.param);
  std::vector<OptimizedParam> dense;
  for (const auto& p : s.grads.params) {
    if (!tables.count(p.param)) {
      dense.push_back(p);
      continue;
    }
    if (s.config.client_size > 1)
      return Unimplemented("distributed lookup table '", p.param,
                           "': hybrid mode (client size > 1) exchanges dense gradients only");
    LOOM_ASSIGN_OR_RETURN(DistributedTable t, DescribeTable(s, p));
    s.tables.push_back(std::move(t));
  }
  for (const auto& name : tables)
    if (!s.TableOf(name))
      return Unimplemented("distributed lookup table '", name,
                           "' has no optimizer op: servers serve trained tables only");
  s.grads.params = std::move(dense);
  for (const auto& p : s.grads.params)
    if (p.dtype != proto::FP32 && p.dtype != proto::FP64)
      return Unimplemented("parameter '", p.param, "' is ", DataTypeName(p.dtype),
                           ": parameter servers update fp32 and fp64 parameters");
  const BlockDesc* block = s.main.GlobalBlock();
  for (int i : LrOps(*block)) s.lr_ops.push_back(block->Op(i).Type());
  return false;
}

// Fluid's slicing: split = min(servers, numel / min_block_size) (at least 1) blocks of
// ceil(numel / split) elements rounded up to whole rows; the last block takes what is left.
StatusOr<bool> SliceParams(DistributeState& s) {
  const int servers = static_cast<int>(s.config.pservers.size());
  const BlockDesc* block = s.main.GlobalBlock();
  for (const auto& p : s.grads.params) {
    DDim dims = block->FindVar(p.param).Dims();
    const int64_t numel = dims.numel();
    const int64_t rows = dims.size() ? dims[0] : 1;
    const int64_t width = rows > 0 ? numel / rows : 1;
    int64_t split = 1;
    if (s.config.slice_var_up)
      split = std::max<int64_t>(1, std::min<int64_t>(servers, numel / s.config.min_block_size));
    int64_t per = (numel + split - 1) / split;
    int64_t block_rows = std::max<int64_t>(1, (per + width - 1) / std::max<int64_t>(width, 1));
    int64_t nblocks = std::max<int64_t>(1, (rows + block_rows - 1) / block_rows);
    const int64_t elem_bytes = numel > 0 ? p.bytes / numel : 4;
    for (int64_t b = 0; b < nblocks; ++b) {
      ParamBlock pb;
      pb.param = p.param;
      pb.grad = p.grad;
      pb.index = static_cast<int>(b);
      pb.sliced = nblocks > 1;
      pb.name = pb.sliced ? BlockVarName(p.param, pb.index) : p.param;
      pb.grad_name = pb.sliced ? BlockVarName(p.grad, pb.index) : p.grad;
      pb.row_begin = b * block_rows;
      pb.row_end = std::min(rows, (b + 1) * block_rows);
      pb.bytes = (pb.row_end - pb.row_begin) * width * elem_bytes;
      s.blocks.push_back(pb);
    }
  }
  return false;
}

StatusOr<bool> PlaceBlocks(DistributeState& s) {
  std::vector<PlacementItem> items;
  for (const auto& b : s.blocks) items.push_back({b.name, b.bytes});
  Placement placement = PlaceItems(items, static_cast<int>(s.config.pservers.size()), s.policy);
  for (size_t i = 0; i < s.blocks.size(); ++i) s.blocks[i].server = placement.owner[i];
  s.server_bytes = placement.load;
  s.imbalance = placement.Imbalance();
  return false;
}

namespace {

// A double as text that reads back as the same double.
std::string ExactText(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// A server's programs under construction.
struct ServerBuild {
  ProgramDesc main, startup;
  std::set<std::string> init;  // single-device variables its startup initializes
  // Startup copies after initialization: (from, to, rows [begin, end) or whole when end < 0).
  struct Copy {
    std::string from, to;
    int64_t begin, end;
  };
  std::vector<Copy> copies;
};

DDim BlockDims(const DDim& full, const ParamBlock& b) {
  DDim d = full;
  if (d.size() > 0) d[0] = b.row_end - b.row_begin;
  return d;
}

// Declares in the server's block 0 the variable `name` like `orig` of the single-device program,
// with dims and persistability of its own.
void DeclareOn(BlockDesc* block, const VarDesc& orig, const std::string& name, const DDim& dims,
               bool persistable) {
  VarDesc v = block->Var(name);
  v.proto()->CopyFrom(*orig.proto());
  v.proto()->set_name(name);
  v.SetDims(dims);
  v.SetPersistable(persistable);
}

// How many update ops read each variable (the learning rate is read by all of them).
std::map<std::string, int> UpdateOpReaders(const BlockDesc& block) {
  std::map<std::string, int> readers;
  for (int i = 0; i < block.OpSize(); ++i) {
    OpDesc op = block.Op(i);
    if (!IsUpdateOp(op)) continue;
    std::set<std::string> once;
    for (const auto& v : op.InputArgumentNames()) once.insert(v);
    for (const auto& v : once) ++readers[v];
  }
  return readers;
}

// One optimize sub-block for block b: the update op of b's parameter, renamed to the block's
// variables; its state sliced like the parameter (or copied per block when of another shape).
void AddOptimizeBlock(const DistributeState& s, const ParamBlock& b,
                      const std::map<std::string, int>& readers, ServerBuild* sb) {
  const BlockDesc* mb = s.main.GlobalBlock();
  BlockDesc* b0 = sb->main.GlobalBlock();
  OpDesc update = mb->Op(FindUpdateOp(*mb, b.param));
  const DDim param_dims = mb->FindVar(b.param).Dims();
  BlockDesc* ob = sb->main.AppendBlock(*b0);
  OpDesc op = ob->AppendOp();
  op.proto()->CopyFrom(*update.proto());
  std::set<std::string> vars;
  for (const auto& v : update.InputArgumentNames()) vars.insert(v);
  for (const auto& v : update.OutputArgumentNames()) vars.insert(v);
  for (const auto& v : vars) {
    VarDesc orig = mb->FindVar(v);
    if (!orig) continue;
    std::string to = v;
    if (v == b.param) {
      to = b.name;
      DeclareOn(b0, orig, to, BlockDims(param_dims, b), true);
      sb->init.insert(v);
      if (b.sliced) sb->copies.push_back({v, to, b.row_begin, b.row_end});
    } else if (v == b.grad) {
      to = b.grad_name;
      DeclareOn(b0, orig, to, BlockDims(param_dims, b), false);
    } else if (readers.count(v) && readers.at(v) > 1) {  // shared: the learning rate
      DeclareLike(b0, orig);
      sb->init.insert(v);
    } else {  // this parameter's optimizer state
      const bool like_param = orig.Dims() == param_dims;
      to = b.sliced ? BlockVarName(v, b.index) : v;
      DeclareOn(b0, orig, to, like_param ? BlockDims(param_dims, b) : orig.Dims(),
                orig.Persistable());
      if (orig.Persistable()) {
        sb->init.insert(v);
        if (b.sliced)
          sb->copies.push_back({v, to, like_param ? b.row_begin : 0, like_param ? b.row_end : -1});
      }
    }
    if (to != v) {
      op.RenameInput(v, to);
      op.RenameOutput(v, to);
    }
  }
}

// The learning-rate schedule's ops, in a sub-block; their variables in block 0.
int AddLrBlock(const DistributeState& s, ServerBuild* sb) {
  const BlockDesc* mb = s.main.GlobalBlock();
  std::vector<int> ops = LrOps(*mb);
  if (ops.empty()) return -1;
  BlockDesc* b0 = sb->main.GlobalBlock();
  BlockDesc* lb = sb->main.AppendBlock(*b0);
  for (int i : ops) {
    OpDesc src = mb->Op(i);
    lb->AppendOp().proto()->CopyFrom(*src.proto());
    for (const auto& names : {src.InputArgumentNames(), src.OutputArgumentNames()})
      for (const auto& v : names)
        if (VarDesc d = mb->FindVar(v)) {
          DeclareLike(b0, d);
          if (d.Persistable()) sb->init.insert(v);
        }
  }
  return lb->Idx();
}

// The server's startup: the single-device startup's ops for what it initializes, then the
// copies that cut them into blocks.
void BuildServerStartup(const DistributeState& s, ServerBuild* sb) {
  const BlockDesc* src = s.startup.GlobalBlock();
  BlockDesc* out = sb->startup.GlobalBlock();
  for (int i = 0; i < src->OpSize(); ++i) {
    OpDesc op = src->Op(i);
    auto outs = op.OutputArgumentNames();
    if (std::none_of(outs.begin(), outs.end(), [&](auto& o) { return sb->init.count(o) > 0; }))
      continue;
    out->AppendOp().proto()->CopyFrom(*op.proto());
    for (const auto& names : {op.InputArgumentNames(), outs})
      for (const auto& v : names)
        if (VarDesc d = src->FindVar(v)) DeclareLike(out, d);
  }
  Insertions tail;
  for (const auto& c : sb->copies) {
    VarDesc to = sb->main.GlobalBlock()->FindVar(c.to);
    DeclareLike(out, to);
    if (c.end < 0) {
      tail[out->OpSize() - 1].push_back(
          MakeOp("assign", {{"X", {c.from}}}, {{"Out", {c.to}}}, {}, kOpRoleForward));
    } else {
      tail[out->OpSize() - 1].push_back(
          MakeOp("slice", {{"Input", {c.from}}}, {{"Out", {c.to}}},
                 {{"axes", std::vector<int>{0}},
                  {"starts", std::vector<int>{static_cast<int>(c.begin)}},
                  {"ends", std::vector<int>{static_cast<int>(c.end)}}},
                 kOpRoleForward));
    }
  }
  InsertOps(out, std::move(tail));
}

}  // namespace

StatusOr<bool> BuildServerPrograms(DistributeState& s) {
  const int servers = static_cast<int>(s.config.pservers.size());
  const auto readers = UpdateOpReaders(*s.main.GlobalBlock());
  for (int srv = 0; srv < servers; ++srv) {
    ServerBuild sb;
    int lr_block = AddLrBlock(s, &sb);
    StrList params, grads;
    std::vector<int> opt_blocks;
    for (const auto& b : s.blocks) {
      if (b.server != srv) continue;
      AddOptimizeBlock(s, b, readers, &sb);
      params.push_back(b.name);
      grads.push_back(b.grad_name);
      opt_blocks.push_back(sb.main.NumBlocks() - 1);
    }
    BlockDesc* b0 = sb.main.GlobalBlock();
    // Every server holds a shard of every distributed table, and the learning rate its sgd
    // reads (the rows themselves are made on first touch, not by the startup).
    StrList tables, table_lr, table_init, table_opt;
    std::vector<float> table_eps, table_beta1, table_beta2;
    StrList table_beta1_pow, table_beta2_pow;  // exact doubles ("%.17g")
    std::vector<int> table_dtype;
    std::vector<int64_t> table_width, table_seed;
    std::vector<float> table_a, table_b;
    for (const auto& t : s.tables) {
      if (!b0->HasVar(t.lr)) DeclareLike(b0, s.main.GlobalBlock()->FindVar(t.lr));
      sb.init.insert(t.lr);
      tables.push_back(t.param);
      table_lr.push_back(t.lr);
      table_opt.push_back(t.optimizer);
      table_eps.push_back(t.epsilon);
      table_beta1.push_back(t.beta1);
      table_beta2.push_back(t.beta2);
      table_beta1_pow.push_back(ExactText(t.beta1_pow));
      table_beta2_pow.push_back(ExactText(t.beta2_pow));
      table_init.push_back(t.init);
      table_dtype.push_back(static_cast<int>(t.dtype));
      table_width.push_back(t.width);
      table_seed.push_back(t.seed);
      table_a.push_back(t.init_a);
      table_b.push_back(t.init_b);
    }
    StrList persist;
    for (const VarDesc& v : b0->AllVars())
      if (v.Persistable() && v.Type() == proto::VarType::DENSE_TENSOR) persist.push_back(v.Name());
    OpDesc serve = b0->AppendOp();
    serve.proto()->CopyFrom(
        MakeOp("listen_and_serv", {}, {},
               {{"endpoint", s.config.pservers[srv]},
                {"pserver_id", srv},
                {"Fanin", s.config.trainers},
                {"sync_mode", s.config.sync_mode},
                {"param_blocks", params},
                {"grad_blocks", grads},
                {"optimize_blocks", opt_blocks},
                {"lr_blocks", lr_block >= 0 ? std::vector<int>{lr_block} : std::vector<int>{}},
                {"checkpoint_vars", persist},
                {"fingerprint", s.fingerprint},
                {"sparse_tables", tables},
                {"sparse_lr", table_lr},
                {"sparse_optimizers", table_opt},
                {"sparse_epsilons", table_eps},
                {"sparse_beta1", table_beta1},
                {"sparse_beta2", table_beta2},
                {"sparse_beta1_pow", table_beta1_pow},
                {"sparse_beta2_pow", table_beta2_pow},
                {"sparse_dtypes", table_dtype},
                {"sparse_widths", table_width},
                {"sparse_inits", table_init},
                {"sparse_init_a", table_a},
                {"sparse_init_b", table_b},
                {"sparse_seeds", table_seed},
                {"pservers", servers}},
               kOpRoleRPC));
    BuildServerStartup(s, &sb);
    s.pserver_main.push_back(std::move(sb.main));
    s.pserver_startup.push_back(std::move(sb.startup));
  }
  // The state several servers hold alike from the start (learning rates, the schedule's
  // counters, accumulators of equal shape): each server reports it at the handshake and the
  // trainer compares, so servers started with different settings are found before a step.
  std::map<std::string, std::pair<int, std::string>> seen;  // name -> (servers, dims)
  for (const auto& main : s.pserver_main) {
    const OpDesc serve = main.GlobalBlock()->Op(main.GlobalBlock()->OpSize() - 1);
    const auto blocks = serve.Attr<StrList>("param_blocks", {});
    for (const auto& name : serve.Attr<StrList>("checkpoint_vars", {})) {
      if (std::find(blocks.begin(), blocks.end(), name) != blocks.end()) continue;
      const std::string dims = main.GlobalBlock()->FindVar(name).Dims().ToString();
      auto [it, first] = seen.emplace(name, std::make_pair(0, dims));
      it->second.first += it->second.second == dims ? 1 : -servers;  // other dims: never shared
    }
  }
  StrList shared;
  for (const auto& [name, count] : seen)
    if (count.first >= 2) shared.push_back(name);
  for (auto& main : s.pserver_main)
    main.GlobalBlock()->Op(main.GlobalBlock()->OpSize() - 1).SetAttr("shared_state", shared);
  return true;
}

namespace {

// The last op of block 0 before the parameter's update op that writes its gradient (backward,
// or a regularization / clipping op of the optimizer that runs on the trainer).
int LastWriter(const BlockDesc& block, const std::string& grad, int end) {
  for (int i = end - 1; i >= 0; --i) {
    auto outs = block.Op(i).OutputArgumentNames();
    if (std::find(outs.begin(), outs.end(), grad) != outs.end()) return i;
  }
  return -1;
}

AttributeMap RpcAttrs(const DistributeState& s, int trainer) {
  return {
      {"endpoints", s.config.pservers}, {"trainer_id", trainer}, {"fingerprint", s.fingerprint}};
}

// recv of every block, then concat of the sliced parameters' blocks.
std::vector<proto::OpDesc> FetchParams(const DistributeState& s, int trainer, BlockDesc* block) {
  StrList outs, epmap, names;
  for (const auto& b : s.blocks) {
    outs.push_back(b.name);
    epmap.push_back(s.config.pservers[b.server]);
    names.push_back(b.name);
    if (b.sliced) {
      VarDesc p = block->FindVar(b.param);
      DeclareOn(block, p, b.name, BlockDims(p.Dims(), b), false);
      block->FindVar(b.name).SetIsParameter(false);
    }
  }
  AttributeMap attrs = RpcAttrs(s, trainer);
  attrs["epmap"] = epmap;
  attrs["recv_varnames"] = names;
  std::vector<proto::OpDesc> ops{MakeOp("recv", {}, {{"Out", outs}}, attrs, kOpRoleRPC)};
  for (const auto& p : s.grads.params) {
    auto blocks = s.BlocksOf(p.param);
    if (blocks.size() < 2) continue;
    StrList xs;
    for (const auto* b : blocks) xs.push_back(b->name);
    ops.push_back(MakeOp("concat", {{"X", xs}}, {{"Out", {p.param}}}, {{"axis", 0}}, kOpRoleRPC));
  }
  return ops;
}

// A distributed table's lookups become prefetches from the servers, its gradient ops write the
// SelectedRows without reading the table, and each gradient is pushed to the servers by row
// (send_sparse) right after its last writer.
void RewriteTableOps(const DistributeState& s, int trainer, BlockDesc* block, Insertions* ins) {
  if (s.tables.empty()) return;
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if ((op.Type() != "lookup_table" && op.Type() != "lookup_table_grad") || !op.HasInput("W"))
      continue;
    const DistributedTable* t = s.TableOf(op.Input("W")[0]);
    if (!t) continue;
    AttributeMap attrs = RpcAttrs(s, trainer);
    attrs["table_name"] = t->param;
    attrs["height"] = t->height;
    attrs["width"] = t->width;
    attrs["dtype"] = static_cast<int>(t->dtype);
    attrs["padding_idx"] = op.Attr<int>("padding_idx", -1);
    const int role = op.Role();
    if (op.Type() == "lookup_table") {
      op.proto()->CopyFrom(MakeOp("distributed_lookup_table", {{"Ids", op.Input("Ids")}},
                                  {{"Out", op.Output("Out")}}, attrs, role));
    } else {
      op.proto()->CopyFrom(MakeOp("distributed_lookup_table_grad",
                                  {{"Ids", op.Input("Ids")}, {"Out@GRAD", op.Input("Out@GRAD")}},
                                  {{"W@GRAD", op.Output("W@GRAD")}}, attrs, role));
    }
  }
  // No variable of the table either: a trainer's save_persistables must not look for it.
  for (const auto& t : s.tables) block->RemoveVar(t.param);
  for (const auto& t : s.tables) {
    const int at = LastWriter(*block, t.grad, block->OpSize());
    if (at < 0) continue;
    AttributeMap attrs = RpcAttrs(s, trainer);
    attrs["table_name"] = t.param;
    (*ins)[at].push_back(MakeOp("send_sparse", {{"X", {t.grad}}}, {}, attrs, kOpRoleRPC));
  }
}

ProgramDesc TrainerMain(const DistributeState& s, const ProgramDesc& base, int trainer) {
  ProgramDesc main = base;
  BlockDesc* block = main.GlobalBlock();
  Insertions ins;
  RewriteTableOps(s, trainer, block, &ins);
  for (const auto& p : s.grads.params) {
    int at = LastWriter(*block, p.grad, block->OpSize());
    auto blocks = s.BlocksOf(p.param);
    StrList xs, epmap, names;
    for (const auto* b : blocks) {
      xs.push_back(b->grad_name);
      epmap.push_back(s.config.pservers[b->server]);
      names.push_back(b->grad_name);
    }
    if (s.sparse_params.count(p.param)) {  // its rows, to each block's owner
      std::vector<int64_t> sections;
      for (const auto* b : blocks) sections.push_back(b->row_end - b->row_begin);
      AttributeMap attrs = RpcAttrs(s, trainer);
      attrs["sections"] = sections;
      attrs["epmap"] = epmap;
      attrs["send_varnames"] = names;
      ins[at].push_back(MakeOp("send_sparse", {{"X", {p.grad}}}, {}, attrs, kOpRoleRPC));
      continue;
    }
    if (blocks.size() > 1) {
      std::vector<int64_t> sections;
      VarDesc g = block->FindVar(p.grad);
      for (const auto* b : blocks) {
        sections.push_back(b->row_end - b->row_begin);
        DeclareOn(block, g, b->grad_name, BlockDims(g.Dims(), *b), false);
      }
      ins[at].push_back(MakeOp("split_byref", {{"X", {p.grad}}}, {{"Out", xs}},
                               {{"sections", sections}}, kOpRoleRPC));
    }
    AttributeMap attrs = RpcAttrs(s, trainer);
    attrs["epmap"] = epmap;
    attrs["send_varnames"] = names;
    ins[at].push_back(MakeOp("send", {{"X", xs}}, {}, attrs, kOpRoleRPC));
  }
  const int last = block->OpSize() - 1;
  SlotList barrier_in;
  if (!s.grads.batch_var.empty()) barrier_in.push_back({"Samples", {s.grads.batch_var}});
  ins[last].push_back(MakeOp("send_barrier", barrier_in, {}, RpcAttrs(s, trainer), kOpRoleRPC));
  for (auto& op : FetchParams(s, trainer, block)) ins[last].push_back(std::move(op));
  if (s.config.sync_mode)
    ins[last].push_back(MakeOp("fetch_barrier", {}, {}, RpcAttrs(s, trainer), kOpRoleRPC));
  InsertOps(block, std::move(ins));
  return main;
}

}  // namespace

StatusOr<bool> BuildTrainerPrograms(DistributeState& s) {
  // What every trainer shares: no optimizer ops or state, no learning-rate schedule.
  ProgramDesc main = s.main, startup = s.startup;
  RemoveOptimizerOps(&main, &startup, [](const OpDesc& op) { return IsUpdateOp(op); });
  BlockDesc* mb = main.GlobalBlock();
  std::vector<int> lr = LrOps(*mb);
  for (auto it = lr.rbegin(); it != lr.rend(); ++it) mb->RemoveOp(*it);
  // The startup initializes no parameter: the servers' values are fetched instead.
  std::set<std::string> served;
  for (const auto& p : s.grads.params) served.insert(p.param);
  for (const auto& t : s.tables) served.insert(t.param);  // never on a trainer
  BlockDesc* sb = startup.GlobalBlock();
  for (const auto& t : s.tables) sb->RemoveVar(t.param);
  for (int i = sb->OpSize() - 1; i >= 0; --i) {
    auto outs = sb->Op(i).OutputArgumentNames();
    if (!outs.empty() &&
        std::all_of(outs.begin(), outs.end(), [&](auto& o) { return served.count(o) > 0; }))
      sb->RemoveOp(i);
  }
  // The state a trainer holds itself (persistables its main program reads that the servers do
  // not serve: batch-norm statistics, a scale kept in a global variable): the startup's fetch
  // reports its digests in the handshake, and the servers compare them across trainers.
  std::set<std::string> read;
  for (int b = 0; b < main.NumBlocks(); ++b)
    for (int i = 0; i < main.Block(b)->OpSize(); ++i)
      for (const auto& v : main.Block(b)->Op(i).InputArgumentNames()) read.insert(v);
  StrList own;
  for (const auto& v : read) {
    VarDesc d = mb->FindVar(v);
    if (d && d.Persistable() && d.Type() == proto::VarType::DENSE_TENSOR && !served.count(v))
      own.push_back(v);
  }
  for (int t = 0; t < s.config.trainers; ++t) {
    ProgramDesc ts = startup;
    Insertions ins;
    for (auto& op : FetchParams(s, t, ts.GlobalBlock())) {
      if (op.type() == "recv" && !own.empty()) {
        OpDesc(&op).SetAttr("trainer_state", own);
        for (const auto& v : own)
          if (!ts.GlobalBlock()->HasVar(v)) DeclareLike(ts.GlobalBlock(), mb->FindVar(v));
      }
      ins[ts.GlobalBlock()->OpSize() - 1].push_back(std::move(op));
    }
    InsertOps(ts.GlobalBlock(), std::move(ins));
    s.trainer_startup.push_back(std::move(ts));
    s.trainer_main.push_back(TrainerMain(s, main, t));
  }
  return true;
}

namespace {

constexpr const char* kClientComm = "@LOOM_CLIENT_COMM@";
constexpr const char* kClientWeight = "@LOOM_CLIENT_WEIGHT@";
constexpr const char* kClientSamples = "@LOOM_CLIENT_SAMPLES@";

bool IsRpcOp(const OpDesc& op) { return (op.Role() & kOpRoleRPC) != 0; }

// Removes every op of block 0 that talks to the servers (and the splits and concats that serve
// them): what a client's ranks other than 0 leave to rank 0.
void RemoveRpcOps(BlockDesc* block) {
  for (int i = block->OpSize() - 1; i >= 0; --i)
    if (IsRpcOp(block->Op(i))) block->RemoveOp(i);
}

// broadcast of every served parameter from the client's rank 0, in the analysis' order (the
// same on every rank).
std::vector<proto::OpDesc> BroadcastParams(const DistributeState& s) {
  std::vector<proto::OpDesc> ops;
  for (const auto& p : s.grads.params)
    ops.push_back(MakeOp("broadcast", {{"X", {p.param}}, {"Comm", {kClientComm}}},
                         {{"Out", {p.param}}}, {{"root", 0}}, kOpRoleCommunication));
  return ops;
}

void JoinClientStartup(const DistributeState& s, ProgramDesc* startup) {
  const auto& c = s.config;
  BlockDesc* block = startup->GlobalBlock();
  DeclareCommunicator(block, kClientComm);
  Insertions ins;
  ins[-1].push_back(MakeOp("comm_init", {}, {{"Comm", {kClientComm}}},
                           {{"nranks", c.client_size},
                            {"rank", c.client_rank},
                            {"group", std::string("client")},
                            {"transport", std::string("mpi")},
                            {"fingerprint", s.fingerprint}},
                           kOpRoleCommunication));
  const int last = block->OpSize() - 1;
  if (c.client_rank != 0) {
    // No fetch from the servers: the parameters get their dims here and rank 0's values below.
    for (const auto& p : s.grads.params) {
      VarDesc v = s.main.GlobalBlock()->FindVar(p.param);
      std::vector<int64_t> shape = v.Dims().vec();
      ins[last].push_back(
          MakeOp("fill_constant", {}, {{"Out", {p.param}}},
                 {{"shape", shape}, {"value", 0.0f}, {"dtype", static_cast<int>(v.Dtype())}},
                 kOpRoleCommunication));
    }
  }
  for (auto& op : BroadcastParams(s)) ins[last].push_back(std::move(op));
  InsertOps(block, std::move(ins));
  if (c.client_rank != 0) RemoveRpcOps(block);
}

void JoinClientMain(const DistributeState& s, ProgramDesc* main) {
  const auto& c = s.config;
  BlockDesc* block = main->GlobalBlock();
  DeclareCommunicator(block, kClientComm);
  Insertions ins;
  // Each rank's share of the client's batch (and the client's sample count, which rank 0 tells
  // the servers): the client's gradient is then its batch's mean gradient.
  SlotList weight;
  const bool by_rows = !s.grads.batch_var.empty();
  if (by_rows) {
    VarDesc w = block->Var(kClientWeight);
    w.SetType(proto::VarType::DENSE_TENSOR);
    w.SetDtype(proto::FP64);
    w.SetDims(DDim({1}));
    VarDesc n = block->Var(kClientSamples);
    n.SetType(proto::VarType::DENSE_TENSOR);
    n.SetDtype(proto::INT64);
    n.SetDims(DDim({1}));
    ins[-1].push_back(MakeOp("sample_weight", {{"X", {s.grads.batch_var}}, {"Comm", {kClientComm}}},
                             {{"Out", {kClientWeight}}, {"Total", {kClientSamples}}}, {},
                             kOpRoleCommunication));
    weight.push_back({"Weight", {kClientWeight}});
  }
  // The allreduce of a gradient goes right before the first op that sends it (its split or its
  // send, placed after the gradient's last writer).
  for (const auto& p : s.grads.params) {
    int first = -1;
    for (int i = 0; i < block->OpSize() && first < 0; ++i) {
      const OpDesc op = block->Op(i);
      if (!IsRpcOp(op)) continue;
      auto in = op.InputArgumentNames();
      if (std::find(in.begin(), in.end(), p.grad) != in.end()) first = i;
    }
    if (first < 0) continue;
    SlotList inputs{{"X", {p.grad}}, {"Comm", {kClientComm}}};
    inputs.insert(inputs.end(), weight.begin(), weight.end());
    ins[first - 1].push_back(MakeOp("allreduce", inputs, {{"Out", {p.grad}}},
                                    {{"reduce_type", std::string(by_rows ? "sum" : "avg")}},
                                    kOpRoleCommunication));
  }
  const int last = block->OpSize() - 1;
  for (auto& op : BroadcastParams(s)) ins[last].push_back(std::move(op));
  InsertOps(block, std::move(ins));
  if (c.client_rank != 0) {
    RemoveRpcOps(block);
    return;
  }
  if (!by_rows) return;
  for (int i = 0; i < block->OpSize(); ++i) {
    OpDesc op = block->Op(i);
    if (op.Type() == "send_barrier") op.SetInput("SampleCount", {kClientSamples});
  }
}

}  // namespace

StatusOr<bool> JoinClients(DistributeState& s) {
  if (s.config.client_size <= 1) return false;
  for (size_t t = 0; t < s.trainer_main.size(); ++t) {
    JoinClientStartup(s, &s.trainer_startup[t]);
    JoinClientMain(s, &s.trainer_main[t]);
  }
  return true;
}

}  // namespace loom::transpiler
