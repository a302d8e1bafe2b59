#include "base/job_env.h"

#include <cstdlib>

namespace loom {
namespace {

std::string Get(const char* name, const char* fallback = nullptr) {
  const char* v = std::getenv(name);
  if ((v == nullptr || *v == '\0') && fallback != nullptr) v = std::getenv(fallback);
  return v != nullptr ? v : "";
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// *out = the variable's value when it is set; an error when it is not a number >= 0.
Status ReadCount(const char* name, int* out) {
  const std::string v = Get(name);
  if (v.empty()) return Status::OK();
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > (1 << 30))
    return InvalidArgument(name, "='", v, "' is not a number >= 0 (`loom launch` sets it)");
  *out = static_cast<int>(x);
  return Status::OK();
}

}  // namespace

const char* JobRoleName(JobRole role) {
  switch (role) {
    case JobRole::kTrainer: return "TRAINER";
    case JobRole::kServer: return "PSERVER";
    case JobRole::kNone: break;
  }
  return "";
}

StatusOr<JobEnv> ReadJobEnv() {
  JobEnv env;
  const std::string role = Get("PADDLE_TRAINING_ROLE", "TRAINING_ROLE");
  if (role == "TRAINER") {
    env.role = JobRole::kTrainer;
  } else if (role == "PSERVER") {
    env.role = JobRole::kServer;
  } else if (!role.empty()) {
    return InvalidArgument("PADDLE_TRAINING_ROLE='", role, "' is neither TRAINER nor PSERVER");
  }
  env.server_endpoints = SplitList(Get("PADDLE_PSERVER_ENDPOINTS", "PADDLE_PSERVERS_IP_PORT_LIST"));
  env.trainer_endpoints = SplitList(Get("PADDLE_TRAINER_ENDPOINTS"));
  env.current_endpoint = Get("PADDLE_CURRENT_ENDPOINT");
  LOOM_RETURN_IF_ERROR(ReadCount("PADDLE_TRAINER_ID", &env.trainer_id));
  LOOM_RETURN_IF_ERROR(ReadCount("PADDLE_PSERVER_ID", &env.server_id));
  LOOM_RETURN_IF_ERROR(ReadCount("PADDLE_TRAINERS_NUM", &env.trainers));
  LOOM_RETURN_IF_ERROR(ReadCount("LOOM_CLIENT_ID", &env.client_id));
  LOOM_RETURN_IF_ERROR(ReadCount("LOOM_NUM_CLIENTS", &env.clients));
  LOOM_RETURN_IF_ERROR(ReadCount("LOOM_CLIENT_RANK", &env.client_rank));
  LOOM_RETURN_IF_ERROR(ReadCount("LOOM_CLIENT_SIZE", &env.client_size));
  LOOM_RETURN_IF_ERROR(ReadCount("OMPI_COMM_WORLD_LOCAL_SIZE", &env.local_processes));
  if (env.local_processes == 0)
    LOOM_RETURN_IF_ERROR(ReadCount("LOOM_LOCAL_PROCESSES", &env.local_processes));
  return env;
}

}  // namespace loom
