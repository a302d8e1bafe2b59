// The job's layout as its processes see it: the environment of each role, the shared secret, the
// ports, and the hosts a hostfile puts the ranks on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/launcher.h"

namespace loom::runtime {
namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

// "host:port" -> host and port. The last colon splits (an IPv6 address has colons of its own);
// "[::1]:6170" gives the host "::1".
void SplitEndpoint(const std::string& endpoint, std::string* host, std::string* port) {
  size_t colon = endpoint.rfind(':');
  *host = endpoint.substr(0, colon);
  *port = colon == std::string::npos ? "" : endpoint.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
}

}  // namespace

const std::vector<std::string>& LaunchVariables() {
  static const std::vector<std::string> kNames = {"PADDLE_TRAINING_ROLE",
                                                  "TRAINING_ROLE",
                                                  "PADDLE_PSERVER_ENDPOINTS",
                                                  "PADDLE_PSERVERS_IP_PORT_LIST",
                                                  "PADDLE_TRAINER_ENDPOINTS",
                                                  "PADDLE_CURRENT_ENDPOINT",
                                                  "PADDLE_PORT",
                                                  "POD_IP",
                                                  "PADDLE_TRAINER_ID",
                                                  "PADDLE_PSERVER_ID",
                                                  "PADDLE_TRAINERS_NUM",
                                                  "PADDLE_PSERVER_NUM",
                                                  "LOOM_NUM_SERVERS",
                                                  "LOOM_ROLE",
                                                  "LOOM_RANK",
                                                  "LOOM_LOCAL_PROCESSES",
                                                  "LOOM_NUM_CLIENTS",
                                                  "LOOM_CLIENT_ID",
                                                  "LOOM_CLIENT_RANK",
                                                  "LOOM_CLIENT_SIZE",
                                                  "LOOM_PS_SECRET",
                                                  "LOOM_PS_LISTEN_FD",
                                                  "LOOM_EMULATE_NODE",
                                                  "LOOM_EMULATE_NODES",
                                                  "LOOM_EMULATE_NETNS"};
  return kNames;
}

std::vector<std::pair<std::string, std::string>> RoleEnvironment(const JobLayout& layout,
                                                                 bool server, int rank) {
  const std::string servers = Join(layout.servers);
  std::vector<std::pair<std::string, std::string>> env = {
      {"PADDLE_PSERVER_ENDPOINTS", servers},  // "" without servers, as Paddle's launcher sets it
      {"PADDLE_TRAINER_ENDPOINTS", Join(layout.workers)},
      {"PADDLE_TRAINERS_NUM", std::to_string(layout.workers.size())},
      {"LOOM_PS_SECRET", layout.secret},
  };
  if (!layout.servers.empty()) {
    env.insert(env.end(), {{"PADDLE_PSERVERS_IP_PORT_LIST", servers},
                           {"PADDLE_PSERVER_NUM", std::to_string(layout.servers.size())},
                           {"LOOM_NUM_SERVERS", std::to_string(layout.servers.size())}});
  }
  const std::string role = server ? "PSERVER" : "TRAINER";
  const std::string& self = server ? layout.servers.at(rank) : layout.workers.at(rank);
  std::string host, port;
  SplitEndpoint(self, &host, &port);
  env.insert(env.end(), {{"PADDLE_TRAINING_ROLE", role},
                         {"TRAINING_ROLE", role},
                         {"PADDLE_CURRENT_ENDPOINT", self},
                         {"POD_IP", host},
                         {"LOOM_ROLE", server ? "server" : "worker"},
                         {"LOOM_RANK", std::to_string(rank)}});
  // The job's processes on this host share its cores (runtime/runner.cc sizes thread pools by it).
  int local = 0;
  for (const auto* list : {&layout.servers, &layout.workers})
    for (const auto& ep : *list) {
      std::string h, p;
      SplitEndpoint(ep, &h, &p);
      local += h == host;
    }
  env.push_back({"LOOM_LOCAL_PROCESSES", std::to_string(local)});
  if (server) {
    env.insert(env.end(), {{"PADDLE_PSERVER_ID", std::to_string(rank)}, {"PADDLE_PORT", port}});
  } else {
    env.push_back({"PADDLE_TRAINER_ID", std::to_string(rank)});
  }
  return env;
}

StatusOr<std::string> JobSecret() {
  const char* given = std::getenv("LOOM_PS_SECRET");
  if (given != nullptr && *given != '\0') return std::string(given);
  unsigned char bytes[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError("cannot open /dev/urandom: ", strerror(errno));
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = read(fd, bytes + got, sizeof(bytes) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got < sizeof(bytes)) return IOError("cannot read 32 bytes from /dev/urandom");
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : bytes) hex += {kHex[b >> 4], kHex[b & 15]};
  return hex;
}

namespace {

// A TCP socket on `address` at `port` (0: one the kernel picks), bound and, with `listen_too`,
// listening; its port in *bound. Returns the descriptor (close-on-exec) or -1 with errno set.
int BindTcp(const addrinfo* address, int port, bool listen_too, int* bound) {
  sockaddr_storage addr = {};
  std::memcpy(&addr, address->ai_addr, address->ai_addrlen);
  uint16_t* port_field = addr.ss_family == AF_INET6
                             ? &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                             : &reinterpret_cast<sockaddr_in*>(&addr)->sin_port;
  *port_field = htons(static_cast<uint16_t>(port));
  int fd = socket(address->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  // As a server binds its own port: one closed a moment ago (TIME_WAIT) is free to take.
  if (listen_too) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), address->ai_addrlen) != 0 ||
      (listen_too && listen(fd, SOMAXCONN) != 0) ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *bound = ntohs(*port_field);
  return fd;
}

StatusOr<addrinfo*> ResolveHost(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0)
    return InvalidArgument("--host '", host, "': ", gai_strerror(rc));
  return found;
}

}  // namespace

StatusOr<std::vector<int>> PickFreePorts(const std::string& host, int count) {
  LOOM_ASSIGN_OR_RETURN(addrinfo * found, ResolveHost(host));
  std::vector<int> ports, sockets;
  Status status;
  for (int i = 0; i < count && status.ok(); ++i) {
    int port = 0;
    int fd = BindTcp(found, 0, false, &port);
    if (fd < 0) {
      status = IOError("cannot bind a TCP port on --host '", host, "': ", strerror(errno));
    } else {
      ports.push_back(port);
      sockets.push_back(fd);
    }
  }
  for (int fd : sockets) close(fd);
  freeaddrinfo(found);
  if (!status.ok()) return status;
  return ports;
}

Listeners::~Listeners() { Close(); }

void Listeners::Close() {
  for (const Listener& l : list_) close(l.fd);
  list_.clear();
}

Status Listeners::Open(const std::string& host, int count, int base_port) {
  Close();
  Status status;
  for (int i = 0; i < count && status.ok(); ++i)
    status = Add(host, base_port > 0 ? base_port + i : 0, i);
  if (!status.ok()) Close();
  return status;
}

Status Listeners::Add(const std::string& host, int port, int server) {
  LOOM_ASSIGN_OR_RETURN(addrinfo * found, ResolveHost(host));
  Listener l;
  l.fd = BindTcp(found, port, true, &l.port);
  const int e = errno;
  freeaddrinfo(found);
  if (l.fd >= 0) {
    list_.push_back(l);
    return Status::OK();
  }
  if (port > 0)
    return Status(
        e == EADDRINUSE ? StatusCode::kAlreadyExists : StatusCode::kIOError,
        StrCat("cannot listen on ", host, ":", port, " for server ", server, ": ", strerror(e),
               e == EADDRINUSE ? " (the port is in use; choose another --port)" : ""));
  return IOError("cannot listen on a TCP port of '", host, "' for server ", server, ": ",
                 strerror(e));
}

StatusOr<std::vector<HostSlots>> ParseHostfile(const std::string& text, const std::string& path) {
  std::vector<HostSlots> hosts;
  std::vector<bool> explicit_slots;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream words(line.substr(0, line.find('#')));
    std::string host, word;
    if (!(words >> host)) continue;
    host = host.substr(host.find('@') + 1);  // "user@host": the user is ssh's business
    int slots = 0;
    while (words >> word) {
      size_t eq = word.find('=');
      std::string key = word.substr(0, eq),
                  value = eq == std::string::npos ? "" : word.substr(eq + 1);
      char* end = nullptr;
      long n = std::strtol(value.c_str(), &end, 10);
      if ((key != "slots" && key != "slot") || value.empty() || *end != '\0' || n < 1 ||
          n > 1 << 20)
        return InvalidArgument(path, ":", number, ": '", word,
                               "' is not understood (expected 'host' or 'host slots=K')");
      slots = static_cast<int>(n);
    }
    size_t i = 0;
    while (i < hosts.size() && hosts[i].host != host) ++i;
    if (i == hosts.size()) {
      hosts.push_back({host, slots > 0 ? slots : 1});
      explicit_slots.push_back(slots > 0);
    } else if (slots > 0 || explicit_slots[i]) {
      // Open MPI refuses it too: a host is given once with slots=K, or once per slot.
      return InvalidArgument(path, ":", number, ": host '", host,
                             "' is listed again; with slots=K list a host once");
    } else {
      hosts[i].slots += 1;
    }
  }
  if (hosts.empty()) return InvalidArgument("hostfile '", path, "' names no host");
  return hosts;
}

std::vector<std::string> MapBySlot(const std::vector<HostSlots>& hosts, int nprocs) {
  const int nhosts = static_cast<int>(hosts.size());
  std::vector<int> counts(nhosts, 0);
  int mapped = 0;
  for (int h = 0; h < nhosts; ++h) {
    counts[h] = std::min(hosts[h].slots, nprocs - mapped);
    mapped += counts[h];
  }
  if (mapped < nprocs && nhosts > 0) {  // oversubscribed: the rest is spread evenly
    const int rest = nprocs - mapped;
    for (int h = 0; h < nhosts; ++h) counts[h] += rest / nhosts + (h < rest % nhosts ? 1 : 0);
  }
  std::vector<std::string> placement;
  for (int h = 0; h < nhosts; ++h) placement.insert(placement.end(), counts[h], hosts[h].host);
  return placement;
}

}  // namespace loom::runtime
