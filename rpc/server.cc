#include "rpc/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rpc/auth.h"

namespace loom::rpc {

Server::Server(std::string endpoint, ServerOptions options)
    : endpoint_(std::move(endpoint)),
      options_(std::move(options)),
      ctx_(1),
      socket_(ctx_, zmq::socket_type::router) {}

Server::~Server() {
  socket_.close();
  ctx_.close();
  if (!ipc_path_.empty()) ::unlink(ipc_path_.c_str());
}

namespace {

// ZeroMQ binds addresses and interface names, not host names: a host name (as a hostfile gives
// it, or "localhost") is bound at the address it resolves to, and only there.
StatusOr<std::string> BindAddress(const std::string& endpoint) {
  LOOM_ASSIGN_OR_RETURN(std::string addr, TcpAddress(endpoint));
  const size_t colon = endpoint.rfind(':');
  std::string host = endpoint.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return addr;  // IPv6
  unsigned char buf[sizeof(in6_addr)];
  if (host == "*" || inet_pton(AF_INET, host.c_str(), buf) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr)
    return InvalidArgument("parameter server endpoint '", endpoint, "': cannot resolve host '",
                           host, "'");
  char ip[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, ip, sizeof(ip));
  freeaddrinfo(found);
  return StrCat("tcp://", ip, endpoint.substr(colon));
}

// The listening socket `loom launch` opened for this server (LOOM_PS_LISTEN_FD), when it listens
// on endpoint's port; -1 otherwise (no such variable, not a listening TCP socket, another port,
// or already taken by an earlier Bind of this process).
int InheritedListener(const std::string& endpoint) {
  static std::atomic<bool> taken{false};
  const char* text = std::getenv("LOOM_PS_LISTEN_FD");
  if (text == nullptr || *text == '\0' || taken.load()) return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  if (*end != '\0' || fd < 3 || fd > 1 << 20) return -1;
  int listening = 0;
  socklen_t len = sizeof(listening);
  sockaddr_storage addr{};
  socklen_t addr_len = sizeof(addr);
  if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 ||
      !listening ||
      getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0 ||
      (addr.ss_family != AF_INET && addr.ss_family != AF_INET6))
    return -1;
  const int port =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || endpoint.substr(colon + 1) != std::to_string(port)) return -1;
  if (taken.exchange(true)) return -1;
  fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);  // this process's children do not get it
  return static_cast<int>(fd);
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Bind(const std::string& endpoint, ServerOptions options) {
  LOOM_ASSIGN_OR_RETURN(std::string addr, BindAddress(endpoint));
  std::unique_ptr<Server> s(new Server(endpoint, std::move(options)));
  // Replies still queued when the server ends (errors telling trainers why) get a second to go.
  s->socket_.set(zmq::sockopt::linger, 1000);
  s->socket_.set(zmq::sockopt::sndhwm, 0);
  s->socket_.set(zmq::sockopt::rcvhwm, 0);
  s->socket_.set(zmq::sockopt::router_handover, 1);
  if (s->options_.max_payload_bytes > 0)
    s->socket_.set(zmq::sockopt::maxmsgsize,
                   static_cast<int64_t>(s->options_.max_payload_bytes + kMaxHeaderBytes));
  try {
    // Launched: serve on the socket the launcher holds for this port (it listens already).
    if (int fd = InheritedListener(endpoint); fd >= 0) s->socket_.set(zmq::sockopt::use_fd, fd);
    s->socket_.bind(addr);
    s->socket_.set(zmq::sockopt::use_fd, -1);
  } catch (const zmq::error_t& e) {
    return Status(e.num() == EADDRINUSE ? StatusCode::kAlreadyExists : StatusCode::kIOError,
                  StrCat("parameter server cannot listen on ", endpoint, ": ", e.what(),
                         e.num() == EADDRINUSE ? " (the port is in use)" : ""));
  }
  // Trainers on this machine skip TCP: a Unix socket beside the loopback port (authenticated
  // like any connection). Failing to create it only costs speed.
  if (std::string ipc = IpcAddress(endpoint, s->options_.rpc); !ipc.empty()) {
    try {
      s->socket_.bind(ipc);
      s->ipc_path_ = ipc.substr(6);  // after "ipc://"
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "loom %s: no Unix socket %s (%s); local trainers use TCP\n",
                   s->options_.name.c_str(), ipc.c_str(), e.what());
    }
  }
  return s;
}

std::vector<Request> Server::Poll(std::chrono::milliseconds wait) {
  std::vector<Request> out;
  std::vector<zmq::pollitem_t> items{{socket_.handle(), 0, ZMQ_POLLIN, 0}};
  PollSockets(&items, wait);
  if (!(items[0].revents & ZMQ_POLLIN)) return out;
  for (;;) {
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    if (!socket_.recv(m, zmq::recv_flags::dontwait)) break;
    bool more = m.more();
    frames.push_back(std::move(m));
    while (more) {
      zmq::message_t next;
      (void)socket_.recv(next, zmq::recv_flags::none);
      more = next.more();
      frames.push_back(std::move(next));
    }
    Handle(&frames, &out);
  }
  return out;
}

void Server::Handle(std::vector<zmq::message_t>* frames, std::vector<Request>* out) {
  std::string peer = frames->front().to_string();
  std::string address;
  if (frames->size() > 1) {
    const char* a = (*frames)[1].gets("Peer-Address");
    if (a) address = a;
  }
  frames->erase(frames->begin());
  auto m = Decode(frames);
  Peer& p = peers_[peer];
  if (p.address.empty()) p.address = address;
  if (!m.ok()) return Refuse(peer, p.address, p.trainer_id, m.status().message());
  const Header& h = m->header;
  if (!p.authenticated) return Handshake(peer, &p, h);
  if (h.kind() == Header::HELLO && h.nonce() == p.client_nonce) return;  // a resent hello
  if (h.kind() == Header::AUTH && h.mac() == p.auth_mac) {  // a resent proof: answered alike
    Header r;
    r.set_kind(Header::REPLY);
    Send(peer, Encode(r));
    return;
  }
  if (h.kind() == Header::HELLO || h.kind() == Header::AUTH)
    return Refuse(peer, p.address, p.trainer_id, "handshake message after the handshake");
  if (h.trainer_id() != p.trainer_id)
    return Refuse(
        peer, p.address, p.trainer_id,
        StrCat("trainer id ", h.trainer_id(), " on trainer ", p.trainer_id, "'s connection"));
  last_heard_[p.trainer_id] = std::chrono::steady_clock::now();
  if (h.kind() == Header::HEARTBEAT) {
    Header r;
    r.set_kind(Header::REPLY);
    Send(peer, Encode(r));
    return;
  }
  Request req;
  req.peer = peer;
  req.trainer_id = p.trainer_id;
  req.header = std::move(m->header);
  req.payloads = std::move(m->payloads);
  out->push_back(std::move(req));
}

void Server::Handshake(const std::string& peer, Peer* p, const Header& h) {
  if (h.kind() == Header::HELLO) {
    if (h.trainer_id() < 0 || h.trainer_id() >= options_.trainers)
      return RefuseWithError(
          peer, *p, h.id(),
          StrCat("trainer id ", h.trainer_id(), " is out of range: this job has ",
                 options_.trainers, " trainers"),
          StatusCode::kInvalidArgument);
    if (ended_.count(h.trainer_id()))
      return RefuseWithError(
          peer, *p, h.id(),
          StrCat(options_.name, " already ended its session with trainer ", h.trainer_id(),
                 " (it closed) and serves the job's other trainers until they close"),
          StatusCode::kFailedPrecondition, /*retry=*/true);
    if (h.fingerprint() != options_.fingerprint)
      return RefuseWithError(
          peer, *p, h.id(),
          StrCat("trainer ", h.trainer_id(), "'s program (fingerprint ", h.fingerprint(),
                 ") is not the one ", options_.name, " serves (fingerprint ", options_.fingerprint,
                 "): trainers and servers must come from one transpile"),
          StatusCode::kFailedPrecondition);
    if (Status differs = CompareTrainerState(h); !differs.ok()) {
      if (fatal_.ok()) fatal_ = differs;
      return RefuseWithError(peer, *p, h.id(), differs.message(), differs.code());
    }
    p->trainer_id = h.trainer_id();
    // The same hello again (the trainer resends one that went unanswered): the same challenge.
    if (p->nonce.empty() || p->client_nonce != h.nonce()) p->nonce = NewNonce();
    p->client_nonce = h.nonce();
    Header c;
    c.set_kind(Header::CHALLENGE);
    c.set_nonce(p->nonce);
    c.set_mac(Proof(options_.rpc.secret, "server", p->client_nonce, p->trainer_id));
    if (!ipc_path_.empty())
      c.set_text("ipc://" + ipc_path_);  // trainers on this machine move there
    for (const auto& [name, digest] : options_.state) (*c.mutable_state())[name] = digest;
    for (const auto& [name, v] : options_.state_values) (*c.mutable_params())[name] = v;
    Send(peer, Encode(c));
    return;
  }
  if (h.kind() == Header::AUTH && !p->nonce.empty()) {
    if (!ProofMatches(h.mac(), Proof(options_.rpc.secret, "trainer", p->nonce, p->trainer_id))) {
      p->nonce.clear();
      return RefuseWithError(peer, *p, h.id(),
                             "authentication failed: the trainer does not know LOOM_PS_SECRET",
                             StatusCode::kFailedPrecondition);
    }
    p->authenticated = true;
    p->auth_mac = h.mac();
    // A trainer's newest connection is the one replies go to (it may move to the Unix socket).
    trainer_peer_[p->trainer_id] = peer;
    last_heard_[p->trainer_id] = std::chrono::steady_clock::now();
    Header r;
    r.set_kind(Header::REPLY);
    Send(peer, Encode(r));
    return;
  }
  // Anything else from a connection that never authenticated here: a trainer whose server was
  // restarted on this endpoint (its connection came back to the new one), or whose session
  // ended. Told at once, so that it stops with this reason instead of waiting for replies.
  RefuseWithError(
      peer, *p, h.id(),
      StrCat("a ", KindName(h.kind()), " on a connection that never authenticated with ",
             options_.name, " (was the server restarted, or did this trainer's session end?)"),
      StatusCode::kFailedPrecondition);
}

void Server::RefuseWithError(const std::string& peer, const Peer& p, uint64_t id,
                             const std::string& why, StatusCode code, bool retry) {
  if (!retry) Refuse(peer, p.address, p.trainer_id, why);  // a retry is expected: not logged
  Header e;
  e.set_kind(Header::ERROR);
  e.set_id(id);
  e.set_text(why);
  e.set_code(static_cast<int>(code));
  if (retry) e.set_retry(true);
  Send(peer, Encode(e));
}

void Server::EndSession(int trainer) { ended_.insert(trainer); }

// Trainers of one job start from the same state: the first trainer to report its own is the
// reference, and a later one that holds another value of one of its variables is an error
// naming the variable, both trainers and both values.
Status Server::CompareTrainerState(const Header& h) {
  if (h.state().empty()) return Status::OK();
  if (state_trainer_ < 0 || state_trainer_ == h.trainer_id()) {
    state_trainer_ = h.trainer_id();
    trainer_state_.digest = std::map<std::string, uint64_t>(h.state().begin(), h.state().end());
    trainer_state_.first = std::map<std::string, double>(h.params().begin(), h.params().end());
    return Status::OK();
  }
  for (const auto& entry : h.state()) {
    auto it = trainer_state_.digest.find(entry.first);
    if (it == trainer_state_.digest.end() || it->second == entry.second) continue;
    auto value = [](const auto& values, const std::string& name) {
      auto v = values.find(name);
      return v == values.end() ? std::string("?") : StrCat(v->second);
    };
    return FailedPrecondition(options_.name, ": trainer ", h.trainer_id(),
                              " holds another value of '", entry.first, "' than trainer ",
                              state_trainer_, " (trainer ", state_trainer_, ": ",
                              value(trainer_state_.first, entry.first), ", trainer ",
                              h.trainer_id(), ": ", value(h.params(), entry.first),
                              "): every trainer must start from the same state (the same "
                              "startup program and settings), or the trainers train apart");
  }
  return Status::OK();
}

void Server::Refuse(const std::string& peer, const std::string& address, int trainer,
                    const std::string& why) {
  ++refused_;
  std::fprintf(stderr, "loom %s: refused a message from %s%s: %s\n", options_.name.c_str(),
               address.empty() ? "an unknown peer" : address.c_str(),
               trainer >= 0 ? StrCat(" (trainer ", trainer, ")").c_str() : "", why.c_str());
}

void Server::Send(const std::string& peer, std::vector<zmq::message_t> frames) {
  zmq::message_t id(peer.data(), peer.size());
  // A peer that is gone makes the send fail (router_mandatory is off: it is dropped).
  (void)socket_.send(id, zmq::send_flags::sndmore);
  for (size_t i = 0; i < frames.size(); ++i)
    (void)socket_.send(frames[i],
                       i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

void Server::Reply(const Request& to, Header header, const std::vector<Payload>& payloads) {
  header.set_id(to.header.id());
  if (!header.has_kind()) header.set_kind(Header::REPLY);
  Send(to.peer, Encode(header, payloads));
}

void Server::ReplyError(const Request& to, const Status& error) {
  Header e;
  e.set_kind(Header::ERROR);
  e.set_text(error.message());
  e.set_code(static_cast<int>(error.code()));
  Reply(to, std::move(e));
}

std::optional<std::chrono::steady_clock::time_point> Server::LastHeard(int trainer) const {
  auto it = last_heard_.find(trainer);
  if (it == last_heard_.end()) return std::nullopt;
  return it->second;
}

std::string Server::PeerAddress(int trainer) const {
  auto it = trainer_peer_.find(trainer);
  if (it == trainer_peer_.end()) return "";
  auto p = peers_.find(it->second);
  return p == peers_.end() ? "" : p->second.address;
}

}  // namespace loom::rpc
