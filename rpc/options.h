// Settings of the parameter-server transport, from the environment (docs/DISTRIBUTED.md):
//   LOOM_PS_SECRET                 the shared secret both sides prove (empty: a warning, and only
//                                  peers with an empty secret are accepted)
//   LOOM_PS_HEARTBEAT_MS           how often each side says it is alive (default 1000)
//   LOOM_PS_TIMEOUT_MS             a peer silent this long is dead (default 30000)
//   LOOM_PS_CONNECT_TIMEOUT_MS     how long a trainer waits for a server to answer its first
//                                  hello, and a server for every trainer to show up (default
//                                  120000)
//   LOOM_PS_STEP_TIMEOUT_MS        a sync server waiting this long for the trainers still missing
//                                  from a step (alive, but stuck) ends with an error naming them
//                                  (default 600000)
//   LOOM_PS_CALL_TIMEOUT_MS        a trainer waiting this long for any one answer gives up, naming
//                                  the server and the request (default 1200000)
//   LOOM_PS_IPC                    0: peers on this machine talk over TCP too (default 1: a
//                                  server on a loopback endpoint also listens on a Unix socket,
//                                  LOOM_PS_IPC_DIR/loom-ps-PORT.sock, LOOM_PS_IPC_DIR default /tmp,
//                                  and trainers on the machine use it)
#pragma once

#include <chrono>
#include <string>

#include "base/status.h"

namespace loom::rpc {

struct Options {
  std::string secret;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{120000};
  std::chrono::milliseconds step_timeout{600000};
  std::chrono::milliseconds call_timeout{1200000};
  bool ipc = true;
  std::string ipc_dir = "/tmp";
};

// Options from the environment; malformed numbers are errors naming the variable.
StatusOr<Options> OptionsFromEnv();

// "host:port" -> "tcp://host:port"; errors name what is malformed.
StatusOr<std::string> TcpAddress(const std::string& endpoint);

// The Unix-socket address a server on a loopback endpoint also listens on ("ipc://DIR/
// loom-ps-PORT.sock"); empty when the endpoint is not loopback or ipc is off.
std::string IpcAddress(const std::string& endpoint, const Options& options);

}  // namespace loom::rpc
