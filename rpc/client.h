// A trainer's connections to its parameter servers. Connect() authenticates with every server
// (rpc/auth.h) and checks that both sides come from one transpile (the program fingerprint);
// afterwards one I/O thread owns the sockets: it sends what Post() queues (payloads without a
// copy), matches replies to their requests, says every heartbeat interval that this trainer is
// alive, and fails every request to a server that has been silent for the timeout, naming its
// endpoint. Post() never blocks; Wait() blocks until the reply, the server's refusal or that
// failure, so sends overlap whatever the caller does next.
//
// Thread safety: Post and Wait may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpc/message.h"
#include "rpc/options.h"

namespace loom::rpc {

// What this process's clients moved over their sockets: every frame counted (headers,
// payloads, heartbeats, handshakes), process-wide. Tests and benchmarks read it to check the
// bytes a training step costs.
struct ClientTraffic {
  std::atomic<int64_t> bytes_sent{0};
  std::atomic<int64_t> bytes_received{0};
  std::atomic<int64_t> messages_sent{0};

  static ClientTraffic& Get();
  void Reset() {
    bytes_sent = 0;
    bytes_received = 0;
    messages_sent = 0;
  }
};

struct Reply {
  Header header;
  std::vector<zmq::message_t> payloads;  // one per tensor of header.tensors()
};

// The order to send queued messages in: each entry is (is a SEND, its priority). Within each
// run of consecutive SENDs, higher priority first and posting order among equals; every other
// message keeps its place. Returns the permutation.
std::vector<size_t> SendOrder(const std::vector<std::pair<bool, int>>& queued);

class Client {
 public:
  struct Pending;
  using Ticket = std::shared_ptr<Pending>;

  // `state`: this trainer's own state, sent in every HELLO; the servers compare it across
  // trainers (a difference is refused, naming the variable and both trainers).
  static StatusOr<std::unique_ptr<Client>> Connect(const std::vector<std::string>& endpoints,
                                                   int trainer_id, const std::string& fingerprint,
                                                   const Options& options,
                                                   const StateDigests& state = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Queues a request to server `server` (an index into endpoints()); its id is set here.
  Ticket Post(int server, Header header, const Payload* payload = nullptr);
  // The same with several payload frames (a row-sparse value: its ids, then its rows).
  Ticket Post(int server, Header header, std::vector<Payload> payloads);
  // Queues a message the server answers only when it refuses it: a refusal then fails every
  // later wait on that server (a server takes a trainer's messages in order, so the reply to a
  // later request means the earlier one-way messages were taken).
  // Among one-way SENDs queued together (between messages of other kinds, whose order the
  // protocol needs), a higher priority goes first (MXNet's push priority).
  void PostOneWay(int server, Header header, const Payload* payload = nullptr, int priority = 0);
  void PostOneWay(int server, Header header, std::vector<Payload> payloads, int priority = 0);
  // The reply to a posted request; a server's ERROR reply is an error carrying its text.
  StatusOr<Reply> Wait(const Ticket& ticket);
  // The replies to several requests, in their order. Returns as soon as one fails, with the
  // failure that came first: a later one is often its consequence (a server that waited for a
  // trainer that stopped on the first), so the caller learns the cause, not the echo. Requests
  // still unanswered then stay posted; their replies are dropped.
  StatusOr<std::vector<Reply>> WaitAll(const std::vector<Ticket>& tickets);
  // Posts to every server and waits for all replies (WaitAll: the first failure wins).
  Status CallAll(const Header& header);

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  int trainer_id() const { return trainer_id_; }

 private:
  struct Outgoing {
    int server;
    Header header;
    std::vector<Payload> payloads;
    Ticket ticket;
    int priority = 0;
  };
  Client(std::vector<std::string> endpoints, int trainer_id, Options options);
  StateDigests state_;  // sent in every HELLO
  zmq::socket_t NewSocket(const std::string& addr);
  // Authenticates the sockets of `servers`; ipc[s] receives the Unix socket a server offers.
  Status Handshake(const std::string& fingerprint, const std::vector<size_t>& servers,
                   std::vector<std::string>* ipc);
  // Moves the connections to servers on this machine onto the Unix sockets they offer.
  Status MoveToUnixSockets(const std::string& fingerprint, const std::vector<std::string>& ipc);
  // Before the I/O thread runs: an ABORT to every server.
  void AbortSessions(const Status& why);
  void Loop();
  void SendQueued();
  void ReadReplies(int server);
  void CheckLiveness();
  void FailServer(int server, const Status& why);
  void Wake();

  std::vector<std::string> endpoints_;
  int trainer_id_;
  Options options_;
  zmq::context_t ctx_;
  std::vector<std::string> addresses_;  // per server: what its socket connects to (tcp or ipc)
  std::vector<zmq::socket_t> sockets_;  // one DEALER per server
  int wake_fd_ = -1;                    // eventfd: Post() wakes the I/O thread
  std::thread io_;
  std::atomic<bool> stop_{false};

  std::mutex mu_;  // guards queue_ and dead_
  std::deque<Outgoing> queue_;
  std::vector<Status> dead_;  // per server: why it is considered dead (OK: alive)
  // I/O thread only:
  uint64_t next_id_ = 1;
  std::vector<std::map<uint64_t, Ticket>> waiting_;  // per server, by request id
  std::vector<std::chrono::steady_clock::time_point> last_heard_, last_beat_;
};

}  // namespace loom::rpc
