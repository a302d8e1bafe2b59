#include "transpiler/distribute.h"

#include "transpiler/distribute_passes.h"

namespace loom::transpiler {
namespace {

// The pipeline, in order: the one declaration of its passes.
const std::vector<Pass<DistributeState>>& Pipeline() {
  static const std::vector<Pass<DistributeState>> passes = {
      {{"check-config",
        "checks trainers, endpoints and split method; rejects transpiled programs and programs "
        "without optimizer ops",
        false},
       CheckDistributeConfig},
      {{"find-gradients",
        "pairs each optimized parameter with its gradient (op_role_var), finds the batch input "
        "and the learning-rate schedule",
        false},
       FindDistributeGradients},
      {{"slice-params",
        "cuts each parameter into min(servers, numel / min_block_size) blocks of whole rows",
        false},
       SliceParams},
      {{"place-blocks", "places the blocks on servers (round_robin, hash or bytes)", false},
       PlaceBlocks},
      {{"build-pservers",
        "per server: listen_and_serv with one optimize sub-block per block (state sliced alike) "
        "and the learning-rate block; a startup that initializes and slices",
        false},
       BuildServerPrograms},
      {{"build-trainers",
        "per trainer: no optimizer ops; split_byref + send after each gradient's last writer; "
        "send_barrier, recv + concat, fetch_barrier (sync); a startup that fetches the parameters",
        false},
       BuildTrainerPrograms},
      {{"join-clients",
        "hybrid (client size > 1): comm_init over the client's MPI world; each gradient "
        "allreduced in the client weighted by batch rows before it is sent; only the client's "
        "rank 0 talks to the servers (with the client's sample count) and broadcasts the "
        "parameters",
        false},
       JoinClients},
  };
  return passes;
}

void FillManifest(const DistributeState& s, const std::vector<PassRecord>& records,
                  proto::DistributeManifest* m) {
  const auto& c = s.config;
  m->set_mode(c.client_size > 1 ? "hybrid" : "pserver");
  m->set_trainers(c.trainers);
  for (const auto& e : c.pservers) m->add_pservers(e);
  m->set_sync_mode(c.sync_mode);
  m->set_split_method(PlacementPolicyName(s.policy));
  m->set_slice_var_up(c.slice_var_up);
  m->set_min_block_size(c.min_block_size);
  for (const auto& b : s.blocks) {
    auto* mb = m->add_blocks();
    mb->set_param(b.param);
    mb->set_name(b.name);
    mb->set_grad(b.grad_name);
    mb->set_index(b.index);
    mb->set_row_begin(b.row_begin);
    mb->set_row_end(b.row_end);
    mb->set_server(b.server);
    mb->set_bytes(b.bytes);
  }
  for (int64_t bytes : s.server_bytes) m->add_server_bytes(bytes);
  m->set_imbalance(s.imbalance);
  for (const auto& r : records) m->add_passes(r.name);
  m->set_fingerprint(s.fingerprint);
  m->set_batch_var(s.grads.batch_var);
  for (const auto& op : s.lr_ops) m->add_lr_ops(op);
  for (const auto& t : s.tables) {
    auto* mt = m->add_tables();
    mt->set_param(t.param);
    mt->set_grad(t.grad);
    mt->set_height(t.height);
    mt->set_width(t.width);
    mt->set_initializer(t.init);
    mt->set_seed(t.seed);
    mt->set_optimizer(t.optimizer);
  }
  for (const auto& p : s.sparse_params) m->add_sparse_grads(p);
  if (c.client_size > 1) {
    m->set_client_size(c.client_size);
    m->set_client_rank(c.client_rank);
  }
}

}  // namespace

std::vector<PassInfo> DistributePasses() { return PassInfos(Pipeline()); }

StatusOr<DistributeResult> TranspileDistribute(const ProgramDesc& startup, const ProgramDesc& main,
                                               const DistributeConfig& config) {
  DistributeState s(config);
  s.startup = startup;
  s.main = main;
  LOOM_ASSIGN_OR_RETURN(
      std::vector<PassRecord> records,
      RunPipeline("transpile --mode pserver", Pipeline(), s, config.pass_options));
  DistributeResult result;
  FillManifest(s, records, &result.manifest);
  result.trainer_startup = std::move(s.trainer_startup);
  result.trainer_main = std::move(s.trainer_main);
  result.pserver_startup = std::move(s.pserver_startup);
  result.pserver_main = std::move(s.pserver_main);
  return result;
}

}  // namespace loom::transpiler
