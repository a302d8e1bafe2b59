// The distributed KVStores (MXNet's dist_sync / dist_async) over the parameter-server transport
// (rpc/): workers push and pull keyed arrays to servers. A key larger than the sharding bound
// (LOOM_KVSTORE_BIGARRAY_BOUND elements, default 1000000, as MXNet's) is cut into one contiguous
// slice per server; a smaller key lives on the server a stable hash of its name picks.
//
//   dist_sync   a server merges the pushes of every worker still working for a key (in worker
//               order) before applying the optimizer or storing the sum; a pull after a push
//               waits for that merge
//   dist_async  each push is applied as it arrives; a pull returns the current value
//
// The job comes from `loom launch` (PADDLE_TRAINING_ROLE, PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM,
// PADDLE_PSERVER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT, LOOM_PS_SECRET): a worker's store talks to
// the servers, a server process runs RunKVServer until every worker has closed.
#pragma once

#include <memory>
#include <string>

#include "kvstore/kvstore.h"

namespace loom::kvstore {

// "server", "worker", or "" when the environment names no parameter-server role.
StatusOr<std::string> LaunchRole();

// A worker's store; outside a launched job an error saying how to start one.
StatusOr<std::unique_ptr<KVStore>> CreateDistStore(const std::string& type);

// A server of a dist_sync / dist_async job: serves until every worker has closed.
Status RunKVServer(const std::string& type);

}  // namespace loom::kvstore
