// Bindings for parameter-server training: the DistributeTranspiler's C++ pipeline and the
// trainer's connection to its servers (close, checkpoint). loom.transpiler drives them.
#include <google/protobuf/text_format.h>
#include <pybind11/stl.h>

#include "base/job_env.h"
#include "framework/scope.h"
#include "kvstore/sparse_table.h"
#include "operators/distributed/lookup_sparse_table.h"
#include "python/core/common.h"
#include "rpc/client.h"
#include "rpc/ps_client.h"
#include "transpiler/distribute.h"

namespace loom::python {

void RegisterDistributed(py::module_& m) {
  m.def(
      "rpc_traffic",
      [] {
        auto& t = rpc::ClientTraffic::Get();
        py::dict d;
        d["bytes_sent"] = t.bytes_sent.load();
        d["bytes_received"] = t.bytes_received.load();
        d["messages_sent"] = t.messages_sent.load();
        return d;
      },
      "Bytes and messages this process's parameter-server clients sent and received (every "
      "frame: headers, payloads, heartbeats), since the start or reset_rpc_traffic().");
  m.def(
      "reset_rpc_traffic", [] { rpc::ClientTraffic::Get().Reset(); },
      "Sets rpc_traffic()'s counters to zero.");
  m.def(
      "job_env",
      [] {
        const JobEnv job = ValueOrThrow(ReadJobEnv());
        py::dict d;
        d["role"] = std::string(JobRoleName(job.role));
        d["server_endpoints"] = job.server_endpoints;
        d["trainer_endpoints"] = job.trainer_endpoints;
        d["current_endpoint"] = job.current_endpoint;
        d["trainer_id"] = job.trainer_id;
        d["server_id"] = job.server_id;
        d["trainers"] = job.trainers;
        d["client_id"] = job.client_id;
        d["clients"] = job.clients;
        d["client_rank"] = job.client_rank;
        d["client_size"] = job.client_size;
        d["local_processes"] = job.local_processes;
        return d;
      },
      "The job the launcher describes in this process's environment (base/job_env.h, the one "
      "reader of PADDLE_TRAINING_ROLE, PADDLE_TRAINER_ID, ...): a dict; role is 'TRAINER', "
      "'PSERVER' or '', unset indices are -1 and unset counts 0. Malformed values raise.");
  m.def(
      "transpile_pserver",
      [](const ProgramDesc& startup, const ProgramDesc& main, int trainers,
         const std::vector<std::string>& pservers, bool sync_mode, bool slice_var_up,
         const std::string& split_method, int64_t min_block_size, int client_size,
         int client_rank) {
        transpiler::DistributeConfig c;
        c.trainers = trainers;
        c.pservers = pservers;
        c.sync_mode = sync_mode;
        c.slice_var_up = slice_var_up;
        c.split_method = split_method;
        c.min_block_size = min_block_size;
        c.client_size = client_size;
        c.client_rank = client_rank;
        auto r = ValueOrThrow(transpiler::TranspileDistribute(startup, main, c));
        auto wrap = [](std::vector<ProgramDesc>& v) {
          std::vector<std::shared_ptr<ProgramDesc>> out;
          for (auto& p : v) out.push_back(std::make_shared<ProgramDesc>(std::move(p)));
          return out;
        };
        std::string text;
        google::protobuf::TextFormat::PrintToString(r.manifest, &text);
        return py::make_tuple(wrap(r.trainer_startup), wrap(r.trainer_main),
                              wrap(r.pserver_startup), wrap(r.pserver_main), text);
      },
      py::arg("startup"), py::arg("main"), py::arg("trainers"), py::arg("pservers"),
      py::arg("sync_mode") = true, py::arg("slice_var_up") = true,
      py::arg("split_method") = "round_robin", py::arg("min_block_size") = 8192,
      py::arg("client_size") = 1, py::arg("client_rank") = 0,
      "Transpiles a single-device (startup, main) for parameter servers: returns (trainer "
      "startups, trainer mains, server startups, server mains, the manifest as text). With "
      "client_size > 1 (hybrid mode) each trainer is an MPI client of client_size processes and "
      "the trainer programs are those of rank client_rank.");
  m.def(
      "ps_close",
      [](int trainer_id, const std::vector<std::string>& endpoints) {
        py::gil_scoped_release release;
        ThrowIfError(rpc::CloseTrainer(trainer_id, endpoints));
      },
      py::arg("trainer_id"), py::arg("endpoints"),
      "Tells every server this trainer is done and closes its connections (exe.close()).");
  m.def(
      "ps_checkpoint",
      [](int trainer_id, const std::vector<std::string>& endpoints, const std::string& fingerprint,
         const std::string& dir) {
        py::gil_scoped_release release;
        ThrowIfError(rpc::CheckpointServers(trainer_id, endpoints, fingerprint, dir));
      },
      py::arg("trainer_id"), py::arg("endpoints"), py::arg("fingerprint"), py::arg("dir"),
      "Makes every server save its blocks and optimizer state under dir/pserver_<id>.");
  m.def(
      "load_sparse_table",
      [](Scope& scope, const std::string& table, const std::string& path) {
        auto loaded = [&] {
          py::gil_scoped_release release;
          return kvstore::SparseTable::Load(path);
        }();
        ThrowIfError(loaded.status());
        *scope.Var(kvstore::LoadedTableVar(table))
             ->GetMutable<std::shared_ptr<kvstore::SparseTable>>() = std::move(*loaded);
      },
      py::arg("scope"), py::arg("table"), py::arg("path"),
      "Loads a server's shard of distributed table `table` (a LOOMSPTB file) into the scope, "
      "where listen_and_serv takes it when it starts.");
  m.def(
      "merge_table_shards",
      [](Scope& scope, const std::string& var, const std::vector<std::string>& paths) {
        auto merged = [&] {
          py::gil_scoped_release release;
          return ops::MergeTableShards(paths);
        }();
        ThrowIfError(merged.status());
        *scope.Var(var)->GetMutable<SelectedRows>() = std::move(merged->rows);
        return ops::InitializerAttr(merged->init);
      },
      py::arg("scope"), py::arg("var"), py::arg("paths"),
      "Merges the shard files of a distributed table (one LOOMSPTB per server) into a "
      "SelectedRows variable `var` of the scope; returns the lookup_sparse_table op's "
      "row_initializer attribute.");
}

}  // namespace loom::python
