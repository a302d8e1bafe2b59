#include "rpc/client.h"

#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "base/deadline.h"
#include "base/interrupt.h"
#include "rpc/auth.h"

namespace loom::rpc {

struct Client::Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Clock::time_point when;  // when done
  Status status;
  Reply reply;
  std::string what;  // "GET 'w' to 127.0.0.1:6174", for a wait that times out
};

namespace {

using std::chrono::milliseconds;

void Complete(const Client::Ticket& t, Status status, Reply reply = {}) {
  std::lock_guard<std::mutex> lock(t->mu);
  t->status = std::move(status);
  t->reply = std::move(reply);
  t->when = Clock::now();
  t->done = true;
  t->cv.notify_all();
}

void SendFrames(zmq::socket_t& socket, std::vector<zmq::message_t>& frames) {
  int64_t bytes = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    bytes += static_cast<int64_t>(frames[i].size());  // before send empties the frame
    socket.send(frames[i],
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  ClientTraffic::Get().bytes_sent += bytes;
  ClientTraffic::Get().messages_sent += 1;
}

// Every frame of the next message, or none when nothing is waiting.
std::vector<zmq::message_t> RecvFrames(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  zmq::message_t m;
  if (!socket.recv(m, zmq::recv_flags::dontwait)) return frames;
  bool more = m.more();
  int64_t bytes = static_cast<int64_t>(m.size());
  frames.push_back(std::move(m));
  while (more) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);
    more = next.more();
    bytes += static_cast<int64_t>(next.size());
    frames.push_back(std::move(next));
  }
  ClientTraffic::Get().bytes_received += bytes;
  return frames;
}

Status CallTimeout(int trainer, const std::string& what, milliseconds timeout) {
  return Timeout("trainer ", trainer, ": no answer to ", what, " within ", timeout.count(),
                 " ms (LOOM_PS_CALL_TIMEOUT_MS)");
}

Status ErrorOf(const Header& h, const std::string& endpoint) {
  int code = h.code();
  if (code <= 0 || code > static_cast<int>(StatusCode::kAborted))
    code = static_cast<int>(StatusCode::kFailedPrecondition);
  return Status(static_cast<StatusCode>(code),
                StrCat("parameter server ", endpoint, ": ", h.text()));
}

}  // namespace

Client::Client(std::vector<std::string> endpoints, int trainer_id, Options options)
    : endpoints_(std::move(endpoints)),
      trainer_id_(trainer_id),
      options_(std::move(options)),
      ctx_(1) {}

StatusOr<std::unique_ptr<Client>> Client::Connect(const std::vector<std::string>& endpoints,
                                                  int trainer_id, const std::string& fingerprint,
                                                  const Options& options,
                                                  const StateDigests& state) {
  if (endpoints.empty()) return InvalidArgument("no parameter server endpoints");
  std::unique_ptr<Client> c(new Client(endpoints, trainer_id, options));
  c->state_ = state;
  for (const auto& ep : endpoints) {
    LOOM_ASSIGN_OR_RETURN(std::string addr, TcpAddress(ep));
    // A host name that does not resolve is a typo, not a server still starting: said at once.
    std::string host = ep.substr(0, ep.rfind(':'));
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
      host = host.substr(1, host.size() - 2);  // IPv6
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (host != "*" && getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0)
      return InvalidArgument("trainer ", trainer_id, ": parameter server endpoint '", ep,
                             "': cannot resolve host '", host, "'");
    if (found) freeaddrinfo(found);
    c->addresses_.push_back(addr);
    c->sockets_.push_back(c->NewSocket(addr));
  }
  std::vector<size_t> all(endpoints.size());
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;
  std::vector<std::string> ipc(endpoints.size());
  if (Status hs = c->Handshake(fingerprint, all, &ipc); !hs.ok()) {
    // The hellos still queued go out as the sockets close: a server that refuses this trainer
    // (its state differs) then ends its job with the reason too, instead of waiting for it.
    for (auto& socket : c->sockets_) socket.set(zmq::sockopt::linger, 1000);
    return hs;
  }
  LOOM_RETURN_IF_ERROR(c->MoveToUnixSockets(fingerprint, ipc));
  size_t n = endpoints.size();
  c->dead_.assign(n, Status::OK());
  c->waiting_.resize(n);
  auto now = std::chrono::steady_clock::now();
  c->last_heard_.assign(n, now);
  c->last_beat_.assign(n, now);
  c->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wake_fd_ < 0) return ResourceExhausted("eventfd failed");
  c->io_ = std::thread([raw = c.get()] { raw->Loop(); });
  return c;
}

Client::~Client() {
  stop_ = true;
  Wake();
  if (io_.joinable()) io_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
  sockets_.clear();
  ctx_.close();
}

zmq::socket_t Client::NewSocket(const std::string& addr) {
  zmq::socket_t s(ctx_, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
  s.connect(addr);
  return s;
}

// A server on this machine offers a Unix socket in its CHALLENGE (rpc/server.cc): faster than
// TCP over loopback. The connection moves there after authenticating over TCP, and
// authenticates again on the new one; a server that offers none, or one on another machine, stays
// on TCP.
Status Client::MoveToUnixSockets(const std::string& fingerprint,
                                 const std::vector<std::string>& ipc) {
  std::vector<size_t> moved;
  for (size_t s = 0; s < ipc.size(); ++s) {
    if (ipc[s].empty() || !options_.ipc || IpcAddress(endpoints_[s], options_) != ipc[s]) continue;
    struct stat st;
    if (::stat(ipc[s].c_str() + 6, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    addresses_[s] = ipc[s];
    sockets_[s] = NewSocket(ipc[s]);
    moved.push_back(s);
  }
  if (moved.empty()) return Status::OK();
  std::vector<std::string> unused(ipc.size());
  return Handshake(fingerprint, moved, &unused);
}

// HELLO -> CHALLENGE (the server proves the secret) -> AUTH (this trainer proves it) -> REPLY,
// with every server at once, within the connect timeout. A server that does not answer within
// the retry interval (its HELLO went to a server instance that ended before reading it: a job
// that just finished on the same endpoint) is sent the hello again, the interval doubling up to
// 2 s; so is a server that refuses for now (an ERROR with `retry`: its session with this
// trainer ended, a later job's server may come). Any other refusal ends the handshake.
Status Client::Handshake(const std::string& fingerprint, const std::vector<size_t>& servers,
                         std::vector<std::string>* ipc) {
  const size_t n = sockets_.size();
  enum State { kHelloSent, kAuthSent, kDone, kRetryLater };
  struct Attempt {
    State state = kDone;  // servers not asked are done
    std::string nonce;
    Clock::time_point next;  // kHelloSent / kAuthSent: when to ask again; kRetryLater: when to
    milliseconds interval{250};
    std::string refused;     // the last transient refusal, for the timeout's message
    bool auth_sent = false;  // its REPLY may come after the hello was sent again
    std::map<std::string, uint64_t> shared;  // the CHALLENGE's state digests
    std::map<std::string, double> values;    // and their first values
  };
  std::vector<Attempt> at(n);
  // The same hello (one nonce per server) each time: a server that gets it twice answers
  // alike, and a resent one goes wherever the socket is connected by then (ZeroMQ reconnects
  // to the next server on the endpoint by itself).
  auto hello = [&](size_t s) {
    Attempt& a = at[s];
    a.state = kHelloSent;
    if (a.nonce.empty()) a.nonce = NewNonce();
    a.next = Clock::now() + a.interval;
    a.interval = std::min(a.interval * 2, milliseconds(2000));
    Header h;
    h.set_kind(Header::HELLO);
    h.set_trainer_id(trainer_id_);
    h.set_fingerprint(fingerprint);
    h.set_nonce(a.nonce);
    for (const auto& [name, digest] : state_.digest) (*h.mutable_state())[name] = digest;
    for (const auto& [name, v] : state_.first) (*h.mutable_params())[name] = v;
    auto frames = Encode(h);
    SendFrames(sockets_[s], frames);
  };
  for (size_t s : servers) hello(s);
  Deadline deadline = DeadlineAfter(options_.connect_timeout);
  Clock::time_point last_beat = Clock::now();
  size_t done = n - servers.size();
  while (done < n) {
    const auto now = Clock::now();
    if (now >= deadline) {
      for (size_t s = 0; s < n; ++s)
        if (at[s].state != kDone)
          return Timeout("trainer ", trainer_id_, ": parameter server ", endpoints_[s],
                         " did not answer within ", options_.connect_timeout.count(), " ms",
                         at[s].refused.empty() ? " (not started, or a wrong endpoint?"
                                               : StrCat(" (it last said: ", at[s].refused, ";"),
                         " LOOM_PS_CONNECT_TIMEOUT_MS)");
    }
    for (size_t s = 0; s < n; ++s)
      if (at[s].state != kDone && now >= at[s].next) hello(s);
    // A server done with its handshake counts this trainer's silence from then on: it hears a
    // heartbeat while slower servers (a far node, a long link) are still answering.
    if (now - last_beat >= options_.heartbeat) {
      for (size_t s = 0; s < n; ++s) {
        if (at[s].state != kDone) continue;
        Header beat;
        beat.set_kind(Header::HEARTBEAT);
        beat.set_trainer_id(trainer_id_);
        auto frames = Encode(beat);
        SendFrames(sockets_[s], frames);
      }
      last_beat = now;
    }
    if (InterruptRequested())
      return Interrupted(StrCat("trainer ", trainer_id_, " connected to its parameter servers"));
    std::vector<zmq::pollitem_t> items;
    for (auto& s : sockets_) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
    PollSockets(&items, std::min(milliseconds(50), TimeLeft(deadline)));
    for (size_t s = 0; s < n; ++s) {
      if (!(items[s].revents & ZMQ_POLLIN)) continue;
      auto frames = RecvFrames(sockets_[s]);
      if (frames.empty()) continue;
      Attempt& a = at[s];
      auto m = Decode(&frames);
      if (!m.ok())
        return m.status().WithContext(StrCat("parameter server ", endpoints_[s], " handshake"));
      const Header& h = m->header;
      if (h.kind() == Header::ERROR && h.retry() && a.state != kDone) {
        a.refused = h.text();
        a.state = kRetryLater;
        a.next = Clock::now() + a.interval;
        continue;
      }
      if (h.kind() == Header::ERROR) return ErrorOf(h, endpoints_[s]);
      if (a.state == kHelloSent && h.kind() == Header::CHALLENGE) {
        bool server_ok =
            ProofMatches(h.mac(), Proof(options_.secret, "server", a.nonce, trainer_id_));
        Header auth;
        auth.set_kind(Header::AUTH);
        auth.set_trainer_id(trainer_id_);
        auth.set_mac(Proof(options_.secret, "trainer", h.nonce(), trainer_id_));
        auto frames2 = Encode(auth);
        SendFrames(sockets_[s], frames2);
        if (!server_ok)
          return FailedPrecondition("trainer ", trainer_id_, ": parameter server ", endpoints_[s],
                                    " could not prove LOOM_PS_SECRET (the secrets differ)");
        a.state = kAuthSent;
        a.auth_sent = true;
        a.next = Clock::now() + a.interval;
        (*ipc)[s] = h.text();
        a.shared = std::map<std::string, uint64_t>(h.state().begin(), h.state().end());
        a.values.insert(h.params().begin(), h.params().end());
      } else if (a.state != kDone && a.auth_sent && h.kind() == Header::REPLY) {
        a.state = kDone;
        ++done;
      }
    }
  }
  // Servers of one job hold their shared state alike from the start (a learning rate lives in
  // each server's startup program, so servers started with other settings pass the program
  // fingerprint): the first difference between two servers is an error naming both.
  std::map<std::string, size_t> first;  // name -> the first server reporting it
  for (size_t s : servers) {
    for (const auto& entry : at[s].shared) {
      const std::string& name = entry.first;  // (clang 14 lambdas take no structured binding)
      auto [it, inserted] = first.emplace(name, s);
      if (inserted || at[it->second].shared.at(name) == entry.second) continue;
      auto value = [&](size_t k) {
        auto v = at[k].values.find(name);
        return v == at[k].values.end() ? std::string("?") : StrCat(v->second);
      };
      Status why = FailedPrecondition(
          "trainer ", trainer_id_, ": parameter servers ", endpoints_[it->second], " and ",
          endpoints_[s], " hold different values of '", name, "' (", value(it->second), " and ",
          value(s),
          "): every server must start from the same state (the same optimizer settings and "
          "startup program), or the blocks they hold train apart");
      AbortSessions(why);
      return why;
    }
  }
  return Status::OK();
}

// Tells every server this trainer stops and why (one way; the sockets get a second to send it
// before they close), so that a sync job ends at once with the reason instead of waiting for
// this trainer's silence.
void Client::AbortSessions(const Status& why) {
  Header h;
  h.set_kind(Header::ABORT);
  h.set_trainer_id(trainer_id_);
  h.set_text(why.message());
  for (auto& socket : sockets_) {
    auto frames = Encode(h);
    SendFrames(socket, frames);
    socket.set(zmq::sockopt::linger, 1000);
  }
}

void Client::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  ssize_t r = write(wake_fd_, &one, sizeof(one));
  (void)r;
}

Client::Ticket Client::Post(int server, Header header, const Payload* payload) {
  return Post(server, std::move(header),
              payload ? std::vector<Payload>{*payload} : std::vector<Payload>{});
}

Client::Ticket Client::Post(int server, Header header, std::vector<Payload> payloads) {
  auto ticket = std::make_shared<Pending>();
  ticket->what = KindName(header.kind());
  for (int i = 0; i < header.tensors_size() && i < 3; ++i)
    ticket->what += StrCat(i ? ", '" : " '", header.tensors(i).name(), "'");
  if (header.tensors_size() > 3)
    ticket->what += StrCat(" and ", header.tensors_size() - 3, " more");
  if (server < 0 || server >= static_cast<int>(endpoints_.size())) {
    Complete(ticket,
             InvalidArgument("no parameter server ", server, " (", endpoints_.size(), " servers)"));
    return ticket;
  }
  if (header.step() > 0) ticket->what += StrCat(" of step ", header.step());
  ticket->what += " to parameter server " + endpoints_[server];
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({server, std::move(header), std::move(payloads), ticket});
  }
  Wake();
  return ticket;
}

StatusOr<Reply> Client::Wait(const Ticket& t) {
  std::unique_lock<std::mutex> lock(t->mu);
  // The I/O thread completes every request: by its reply, or by declaring its server dead
  // after its silence timeout. A server that is alive but never answers (it waits for a stuck
  // trainer) is bounded by the call timeout; Ctrl-C is asked about between slices.
  const Deadline deadline = DeadlineAfter(options_.call_timeout);
  while (!t->cv.wait_for(lock, std::min(milliseconds(100), TimeLeft(deadline)),
                         [&] { return t->done; })) {
    if (Clock::now() >= deadline) return CallTimeout(trainer_id_, t->what, options_.call_timeout);
    if (InterruptRequested())
      return Interrupted(StrCat("trainer ", trainer_id_, " waited for ", t->what));
  }
  if (!t->status.ok()) return t->status;
  return std::move(t->reply);
}

void Client::PostOneWay(int server, Header header, const Payload* payload, int priority) {
  PostOneWay(server, std::move(header),
             payload ? std::vector<Payload>{*payload} : std::vector<Payload>{}, priority);
}

void Client::PostOneWay(int server, Header header, std::vector<Payload> payloads, int priority) {
  if (server < 0 || server >= static_cast<int>(endpoints_.size())) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({server, std::move(header), std::move(payloads), nullptr, priority});
  }
  Wake();
}

StatusOr<std::vector<Reply>> Client::WaitAll(const std::vector<Ticket>& tickets) {
  // Waits on the first unanswered ticket a slice at a time and looks at the others between
  // slices: a failure elsewhere is seen within a slice, a reply ends the slice at once.
  constexpr milliseconds kSlice(20);
  const Deadline deadline = DeadlineAfter(options_.call_timeout);
  for (;;) {
    Ticket failed, open;
    Clock::time_point failed_at;
    for (const auto& t : tickets) {
      std::lock_guard<std::mutex> lock(t->mu);
      if (!t->done) {
        if (!open) open = t;
      } else if (!t->status.ok() && (!failed || t->when < failed_at)) {
        failed = t;
        failed_at = t->when;
      }
    }
    if (failed) {
      std::lock_guard<std::mutex> lock(failed->mu);
      return failed->status;
    }
    if (!open) break;
    if (Clock::now() >= deadline)
      return CallTimeout(trainer_id_, open->what, options_.call_timeout);
    if (InterruptRequested())
      return Interrupted(StrCat("trainer ", trainer_id_, " waited for ", open->what));
    std::unique_lock<std::mutex> lock(open->mu);
    open->cv.wait_for(lock, std::min<milliseconds>(kSlice, TimeLeft(deadline)),
                      [&] { return open->done; });
  }
  std::vector<Reply> replies;
  replies.reserve(tickets.size());
  for (const auto& t : tickets) {
    std::lock_guard<std::mutex> lock(t->mu);
    replies.push_back(std::move(t->reply));
  }
  return replies;
}

Status Client::CallAll(const Header& header) {
  std::vector<Ticket> tickets;
  for (size_t s = 0; s < endpoints_.size(); ++s)
    tickets.push_back(Post(static_cast<int>(s), header));
  return WaitAll(tickets).status();
}

void Client::Loop() {
  // Signals go to the threads that wait for them (Python's main thread), never to this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  while (!stop_) {
    std::vector<zmq::pollitem_t> items;
    for (auto& s : sockets_) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    PollSockets(&items, std::min(options_.heartbeat, milliseconds(100)));
    if (items.back().revents & ZMQ_POLLIN) {
      uint64_t count;
      ssize_t r = read(wake_fd_, &count, sizeof(count));
      (void)r;
    }
    SendQueued();
    for (size_t s = 0; s < sockets_.size(); ++s)
      if (items[s].revents & ZMQ_POLLIN) ReadReplies(static_cast<int>(s));
    CheckLiveness();
  }
  // Nothing is answered any more: whoever still waits learns why.
  for (size_t s = 0; s < sockets_.size(); ++s)
    FailServer(static_cast<int>(s), Aborted("trainer ", trainer_id_, ": the connection to ",
                                            endpoints_[s], " was closed"));
  SendQueued();
}

std::vector<size_t> SendOrder(const std::vector<std::pair<bool, int>>& queued) {
  std::vector<size_t> order(queued.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin;
    while (end < order.size() && queued[end].first) ++end;
    std::stable_sort(order.begin() + begin, order.begin() + end,
                     [&](size_t a, size_t b) { return queued[a].second > queued[b].second; });
    begin = end + 1;
  }
  return order;
}

void Client::SendQueued() {
  std::deque<Outgoing> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
  }
  std::vector<std::pair<bool, int>> kinds;
  for (const auto& o : queued) kinds.push_back({o.header.kind() == Header::SEND, o.priority});
  std::vector<Outgoing> batch;
  for (size_t i : SendOrder(kinds)) batch.push_back(std::move(queued[i]));
  for (auto& o : batch) {
    Status dead;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dead = dead_[o.server];
    }
    if (!dead.ok()) {
      if (o.ticket) Complete(o.ticket, dead);
      continue;
    }
    uint64_t id = next_id_++;
    o.header.set_id(id);
    o.header.set_trainer_id(trainer_id_);
    if (o.ticket) waiting_[o.server][id] = o.ticket;
    auto frames = Encode(o.header, o.payloads);
    SendFrames(sockets_[o.server], frames);
  }
}

void Client::ReadReplies(int s) {
  for (;;) {
    auto frames = RecvFrames(sockets_[s]);
    if (frames.empty()) return;
    last_heard_[s] = std::chrono::steady_clock::now();
    auto m = Decode(&frames);
    if (!m.ok()) {
      FailServer(s, Internal("parameter server ", endpoints_[s],
                             " sent a malformed message: ", m.status().message()));
      return;
    }
    auto it = waiting_[s].find(m->header.id());
    if (it == waiting_[s].end()) {
      // A one-way message was refused: the connection's later waits fail with why.
      if (m->header.kind() == Header::ERROR) FailServer(s, ErrorOf(m->header, endpoints_[s]));
      continue;  // else a heartbeat's answer
    }
    Ticket t = it->second;
    waiting_[s].erase(it);
    if (m->header.kind() == Header::ERROR) {
      Complete(t, ErrorOf(m->header, endpoints_[s]));
    } else {
      Reply r;
      r.header = std::move(m->header);
      r.payloads = std::move(m->payloads);
      Complete(t, Status::OK(), std::move(r));
    }
  }
}

void Client::CheckLiveness() {
  auto now = std::chrono::steady_clock::now();
  for (size_t s = 0; s < sockets_.size(); ++s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!dead_[s].ok()) continue;
    }
    if (now - last_heard_[s] > options_.timeout) {
      FailServer(static_cast<int>(s),
                 Timeout("trainer ", trainer_id_, ": parameter server ", endpoints_[s],
                         " sent nothing for ", options_.timeout.count(),
                         " ms (LOOM_PS_TIMEOUT_MS): it died or is unreachable"));
      continue;
    }
    if (now - last_beat_[s] >= options_.heartbeat) {
      Header h;
      h.set_kind(Header::HEARTBEAT);
      h.set_trainer_id(trainer_id_);
      auto frames = Encode(h);
      SendFrames(sockets_[s], frames);
      last_beat_[s] = now;
    }
  }
}

void Client::FailServer(int s, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_[s].ok()) dead_[s] = why;
  }
  for (auto& [id, t] : waiting_[s]) Complete(t, why);
  waiting_[s].clear();
}

ClientTraffic& ClientTraffic::Get() {
  static ClientTraffic traffic;
  return traffic;
}

}  // namespace loom::rpc
