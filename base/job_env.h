// The job a launcher describes in this process's environment: the process's role, its index
// among its peers, and the job's endpoints. `loom launch` sets these under Paddle's names
// (runtime/launch_env.cc writes them), so that Fluid scripts and Loom read the same variables.
// ReadJobEnv is the one place that reads them; everything else takes a JobEnv.
// Thread-safety: ReadJobEnv reads the environment; call it while no thread changes it.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace loom {

enum class JobRole { kNone, kTrainer, kServer };

struct JobEnv {
  // PADDLE_TRAINING_ROLE (or TRAINING_ROLE): TRAINER or PSERVER; kNone when unset.
  JobRole role = JobRole::kNone;
  // PADDLE_PSERVER_ENDPOINTS, or the later spelling PADDLE_PSERVERS_IP_PORT_LIST ("host:port,...").
  std::vector<std::string> server_endpoints;
  std::vector<std::string> trainer_endpoints;  // PADDLE_TRAINER_ENDPOINTS
  std::string current_endpoint;                // PADDLE_CURRENT_ENDPOINT
  int trainer_id = -1;                         // PADDLE_TRAINER_ID; -1 when unset
  int server_id = -1;                          // PADDLE_PSERVER_ID; -1 when unset
  int trainers = 0;                            // PADDLE_TRAINERS_NUM; 0 when unset
  // MPI clients of a KVStore or hybrid job (loom launch --clients C): this process's client
  // (LOOM_CLIENT_ID; -1 when unset) of LOOM_NUM_CLIENTS, and its rank in that client's MPI world
  // (LOOM_CLIENT_RANK; -1 when unset) of LOOM_CLIENT_SIZE.
  int client_id = -1;
  int clients = 0;
  int client_rank = -1;
  int client_size = 0;
  // The processes of this job on this host: OMPI_COMM_WORLD_LOCAL_SIZE under mpirun, else
  // LOOM_LOCAL_PROCESSES (`loom launch`); 0 when neither is set.
  int local_processes = 0;
};

// The job from the environment. A variable that is set but malformed (a role other than TRAINER
// and PSERVER, an index that is not a number >= 0) is InvalidArgument naming it; unset ones keep
// JobEnv's defaults.
StatusOr<JobEnv> ReadJobEnv();

// "TRAINER", "PSERVER" or "" (kNone): the spelling of the environment.
const char* JobRoleName(JobRole role);

}  // namespace loom
