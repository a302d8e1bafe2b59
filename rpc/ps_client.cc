#include "rpc/ps_client.h"

#include <cstdlib>
#include <map>
#include <memory>

#include "base/job_env.h"

namespace loom::rpc {
namespace {

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}

// One trainer's (id, endpoints) entry. Its own mutex is held while it connects, so that the
// registry's is never held across a network wait: another trainer of this process may need
// it meanwhile (to close, which is what a server still serving an earlier job waits for
// before this connection can go through).
struct Slot {
  std::mutex mu;
  TrainerConnection* conn = nullptr;
};

// Connections live until CloseTrainer; ones left open at exit are never destroyed (their I/O
// threads end with the process; servers notice the silence), so exit order cannot deadlock.
std::map<std::string, std::shared_ptr<Slot>>& Registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Slot>>();
  return *r;
}

std::string Key(int trainer_id, const std::vector<std::string>& endpoints) {
  std::string key = std::to_string(trainer_id);
  for (const auto& e : endpoints) key += "|" + e;
  return key;
}

}  // namespace

StatusOr<std::vector<std::string>> ResolveEndpoints(const std::vector<std::string>& endpoints) {
  std::vector<std::string> env;
  bool env_read = false;
  std::vector<std::string> out;
  for (const auto& e : endpoints) {
    if (e.rfind("pserver:", 0) != 0) {
      out.push_back(e);
      continue;
    }
    if (!env_read) {
      LOOM_ASSIGN_OR_RETURN(JobEnv job, ReadJobEnv());
      env = std::move(job.server_endpoints);
      if (env.empty())
        return FailedPrecondition("the program names parameter server '", e,
                                  "' by index, but PADDLE_PSERVER_ENDPOINTS is not set (start "
                                  "the job with `loom launch`, or set it to host:port,...)");
      env_read = true;
    }
    char* end = nullptr;
    long i = std::strtol(e.c_str() + 8, &end, 10);
    if (*end != '\0' || i < 0 || i >= static_cast<long>(env.size()))
      return InvalidArgument("parameter server '", e, "': PADDLE_PSERVER_ENDPOINTS lists ",
                             env.size(), " servers");
    out.push_back(env[i]);
  }
  return out;
}

StatusOr<TrainerConnection*> ConnectTrainer(int trainer_id,
                                            const std::vector<std::string>& endpoints,
                                            const std::string& fingerprint,
                                            const StateDigests& state) {
  LOOM_ASSIGN_OR_RETURN(auto resolved, ResolveEndpoints(endpoints));
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto& entry = Registry()[Key(trainer_id, resolved)];
    if (!entry) entry = std::make_shared<Slot>();
    slot = entry;
  }
  std::lock_guard<std::mutex> lock(slot->mu);
  if (slot->conn) return slot->conn;
  LOOM_ASSIGN_OR_RETURN(Options options, OptionsFromEnv());
  LOOM_ASSIGN_OR_RETURN(auto client,
                        Client::Connect(resolved, trainer_id, fingerprint, options, state));
  auto* conn = new TrainerConnection();
  conn->client = std::move(client);
  slot->conn = conn;
  return conn;
}

Status CloseTrainer(int trainer_id, const std::vector<std::string>& endpoints) {
  LOOM_ASSIGN_OR_RETURN(auto resolved, ResolveEndpoints(endpoints));
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(Key(trainer_id, resolved));
    if (it == Registry().end()) return Status::OK();
    slot = it->second;
    Registry().erase(it);
  }
  TrainerConnection* conn = nullptr;
  {
    std::lock_guard<std::mutex> lock(slot->mu);
    conn = slot->conn;
    slot->conn = nullptr;
  }
  if (conn == nullptr) return Status::OK();  // it never connected
  std::unique_ptr<TrainerConnection> owned(conn);
  // The servers take this after the trainer's earlier one-way messages; a refusal of one of
  // those fails this call.
  Header h;
  h.set_kind(Header::COMPLETE);
  return conn->client->CallAll(h);
}

Status CheckpointServers(int trainer_id, const std::vector<std::string>& endpoints,
                         const std::string& fingerprint, const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(TrainerConnection * conn,
                        ConnectTrainer(trainer_id, endpoints, fingerprint));
  Header h;
  h.set_kind(Header::CHECKPOINT);
  h.set_text(dir);
  return conn->client->CallAll(h);
}

}  // namespace loom::rpc
