// A parameter server's socket: it binds its endpoint (and only that address), authenticates
// trainers (rpc/auth.h), checks their program fingerprint against its own, answers heartbeats,
// validates every message (rpc/message.h) and hands the requests of authenticated trainers to
// its owner, which answers them with Reply(). Refused messages are logged with the peer's
// address and the reason and never reach the owner. Poll() never waits on any one trainer, so a
// slow trainer does not hold up the others.
//
// Thread safety: one thread (the owner's) uses a Server; refused() may be read from any.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rpc/message.h"
#include "rpc/options.h"

namespace loom::rpc {

struct Request {
  std::string peer;  // ZeroMQ routing id of the connection
  int trainer_id = -1;
  Header header;
  std::vector<zmq::message_t> payloads;  // SEND: its one tensor
};

struct ServerOptions {
  Options rpc;
  int trainers = 1;              // trainer ids are 0 .. trainers-1
  std::string fingerprint;       // trainers must present the same
  size_t max_payload_bytes = 0;  // larger messages are dropped by ZeroMQ before they are read
  std::string name;              // for logs, e.g. "pserver 0 (127.0.0.1:6174)"
  // The server's initial state that other servers hold alike (name -> digest, and its first
  // value for messages), sent in every CHALLENGE for the trainer to compare.
  std::map<std::string, uint64_t> state;
  std::map<std::string, double> state_values;
};

class Server {
 public:
  // Binds endpoint ("host:port"); a port in use is an error naming it.
  static StatusOr<std::unique_ptr<Server>> Bind(const std::string& endpoint, ServerOptions options);
  ~Server();

  // Requests of authenticated trainers that arrived within `wait` (handshakes, heartbeats and
  // refusals are handled here).
  std::vector<Request> Poll(std::chrono::milliseconds wait);
  void Reply(const Request& to, Header header, const std::vector<Payload>& payloads = {});
  void ReplyError(const Request& to, const Status& error);
  // When trainer t was last heard from; nullopt when it never authenticated.
  std::optional<std::chrono::steady_clock::time_point> LastHeard(int trainer) const;
  // "127.0.0.1:45122" of trainer t's connection (empty if unknown).
  std::string PeerAddress(int trainer) const;
  // Trainer `trainer` has ended its session with this server (it closed): a later HELLO with
  // its id comes from a later job meant for the next server on this endpoint, and is refused
  // for now (the trainer retries until its connect deadline), never served.
  void EndSession(int trainer);
  // Why the job cannot go on, found at a handshake (trainers whose own state differs); OK
  // otherwise. The owner ends with it.
  const Status& fatal() const { return fatal_; }
  // Messages refused so far (any thread may read it).
  int64_t refused() const { return refused_.load(); }
  const std::string& endpoint() const { return endpoint_; }

 private:
  struct Peer {
    int trainer_id = -1;
    std::string nonce;  // the challenge sent
    std::string client_nonce;
    bool authenticated = false;
    std::string auth_mac;  // the proof it authenticated with (a resent one is answered alike)
    std::string address;
  };
  Server(std::string endpoint, ServerOptions options);
  void Handle(std::vector<zmq::message_t>* frames, std::vector<Request>* out);
  void Handshake(const std::string& peer, Peer* p, const Header& h);
  Status CompareTrainerState(const Header& h);
  void Refuse(const std::string& peer, const std::string& address, int trainer,
              const std::string& why);
  // Refuses and tells the peer why (an ERROR; `retry`: for now only).
  void RefuseWithError(const std::string& peer, const Peer& p, uint64_t id, const std::string& why,
                       StatusCode code, bool retry = false);
  void Send(const std::string& peer, std::vector<zmq::message_t> frames);

  std::string endpoint_;
  std::string ipc_path_;  // the Unix socket file this server made (removed when it ends)
  ServerOptions options_;
  zmq::context_t ctx_;
  zmq::socket_t socket_;
  std::map<std::string, Peer> peers_;  // by routing id
  std::map<int, std::string> trainer_peer_;
  std::map<int, std::chrono::steady_clock::time_point> last_heard_;
  std::set<int> ended_;         // trainers whose session ended (EndSession)
  int state_trainer_ = -1;      // the first trainer that reported its own state
  StateDigests trainer_state_;  // what it reported
  Status fatal_;
  std::atomic<int64_t> refused_{0};
};

}  // namespace loom::rpc
