#include "rpc/options.h"

#include <cstdio>
#include <cstdlib>

namespace loom::rpc {
namespace {

Status ReadMs(const char* name, std::chrono::milliseconds* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return Status::OK();
  char* end = nullptr;
  long long ms = std::strtoll(v, &end, 10);
  if (*end != '\0' || ms <= 0 || ms > 24LL * 3600 * 1000)
    return InvalidArgument(name, "='", v, "' is not a number of milliseconds in [1, 86400000]");
  *out = std::chrono::milliseconds(ms);
  return Status::OK();
}

}  // namespace

StatusOr<Options> OptionsFromEnv() {
  Options o;
  if (const char* s = std::getenv("LOOM_PS_SECRET")) o.secret = s;
  LOOM_RETURN_IF_ERROR(ReadMs("LOOM_PS_HEARTBEAT_MS", &o.heartbeat));
  LOOM_RETURN_IF_ERROR(ReadMs("LOOM_PS_TIMEOUT_MS", &o.timeout));
  LOOM_RETURN_IF_ERROR(ReadMs("LOOM_PS_CONNECT_TIMEOUT_MS", &o.connect_timeout));
  LOOM_RETURN_IF_ERROR(ReadMs("LOOM_PS_STEP_TIMEOUT_MS", &o.step_timeout));
  LOOM_RETURN_IF_ERROR(ReadMs("LOOM_PS_CALL_TIMEOUT_MS", &o.call_timeout));
  if (const char* v = std::getenv("LOOM_PS_IPC")) o.ipc = std::string(v) != "0";
  if (const char* v = std::getenv("LOOM_PS_IPC_DIR"); v && *v) o.ipc_dir = v;
  if (o.heartbeat * 2 > o.timeout)
    return InvalidArgument("LOOM_PS_TIMEOUT_MS (", o.timeout.count(),
                           ") must be at least twice LOOM_PS_HEARTBEAT_MS (", o.heartbeat.count(),
                           ")");
  return o;
}

StatusOr<std::string> TcpAddress(const std::string& endpoint) {
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size())
    return InvalidArgument("endpoint '", endpoint, "' is not host:port");
  std::string port = endpoint.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535)
    return InvalidArgument("endpoint '", endpoint, "': port '", port, "' is not in 1..65535");
  return "tcp://" + endpoint;
}

std::string IpcAddress(const std::string& endpoint, const Options& options) {
  if (!options.ipc) return "";
  size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos) return "";
  const std::string host = endpoint.substr(0, colon);
  if (host != "localhost" && host.rfind("127.", 0) != 0) return "";
  return StrCat("ipc://", options.ipc_dir, "/loom-ps-", endpoint.substr(colon + 1), ".sock");
}

}  // namespace loom::rpc
