// The trainer side of parameter-server training, shared by the send/recv ops, Python and the
// CLI: one connection set (rpc::Client) per (trainer id, server endpoints) in this process,
// made on first use and kept until CloseTrainer, with the trainer's step counter.
//
// Endpoints in programs are either "host:port" or "pserver:I": the I-th entry of
// PADDLE_PSERVER_ENDPOINTS at run time (what `loom transpile --pservers N` writes, so that one
// transpiled bundle runs on whatever ports `loom launch` picks).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "rpc/client.h"

namespace loom::rpc {

struct TrainerConnection {
  std::unique_ptr<Client> client;
  std::mutex mu;     // guards step
  int64_t step = 0;  // the last step whose barrier was sent
};

// Resolves "pserver:I" entries (see above; base/job_env.h reads the environment); other entries
// are returned as they are.
StatusOr<std::vector<std::string>> ResolveEndpoints(const std::vector<std::string>& endpoints);

// The connection of trainer `trainer_id` to `endpoints` (resolved), connecting on first use;
// `state` (the trainer's own state: name -> digest and first value) goes with the handshake then.
StatusOr<TrainerConnection*> ConnectTrainer(int trainer_id,
                                            const std::vector<std::string>& endpoints,
                                            const std::string& fingerprint,
                                            const StateDigests& state = {});

// Tells every server this trainer is done (COMPLETE) and drops the connection; a trainer that
// never connected is a no-op.
Status CloseTrainer(int trainer_id, const std::vector<std::string>& endpoints);

// Asks every server to save its blocks and optimizer state under dir (each in
// dir/pserver_<index>, written atomically), after this trainer's last step.
Status CheckpointServers(int trainer_id, const std::vector<std::string>& endpoints,
                         const std::string& fingerprint, const std::string& dir);

}  // namespace loom::rpc
