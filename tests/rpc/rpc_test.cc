// The parameter-server transport: authentication both ways, fingerprints, message validation
// (malformed, truncated, oversized, unauthenticated messages are refused and never reach the
// server's owner), a port in use, and a dead server ending every wait within the timeout.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "rpc/client.h"
#include "rpc/server.h"

namespace loom::rpc {
namespace {

using std::chrono::milliseconds;

// A port free now, below the kernel's ephemeral range (32768 and up), so that no outgoing
// connection of a test running beside this one (an mpirun's daemons) takes it before the server
// binds it.
std::string FreeEndpoint() {
  static std::mt19937 rng(std::random_device{}());
  for (;;) {
    const int port = std::uniform_int_distribution<int>(20000, 31999)(rng);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return "127.0.0.1:" + std::to_string(port);
  }
}

// Success paths must never meet the silence timeout, however slow the machine: it is long here.
Options TestOptions(const std::string& secret = "s3cret") {
  Options o;
  o.secret = secret;
  o.heartbeat = milliseconds(100);
  o.timeout = milliseconds(10000);
  o.connect_timeout = milliseconds(3000);
  return o;
}

// For the tests where silence is what is tested: a peer that sent nothing for 800 ms is dead.
Options SilenceTestOptions() {
  Options o = TestOptions();
  o.timeout = milliseconds(800);
  return o;
}

// A server on its own thread that answers every request with REPLY (GETs with a 4-float
// payload) and counts what reached it.
class EchoServer {
 public:
  explicit EchoServer(const std::string& secret = "s3cret", std::string fingerprint = "fp",
                      bool answer = true, std::string at = "", int ended_trainer = -1,
                      int pause_ms = 0) {
    endpoint = at.empty() ? FreeEndpoint() : at;
    ServerOptions so;
    so.rpc = TestOptions(secret);
    so.trainers = 4;
    so.fingerprint = std::move(fingerprint);
    so.max_payload_bytes = 1 << 20;
    so.name = "test server";
    server = std::move(Server::Bind(endpoint, so).value());
    if (ended_trainer >= 0) server->EndSession(ended_trainer);
    thread = std::thread([this, answer, pause_ms] {
      while (!stop) {
        // A slow server: between its polls the trainer's handshake waits.
        if (pause_ms > 0) std::this_thread::sleep_for(milliseconds(pause_ms));
        for (auto& r : server->Poll(milliseconds(20))) {
          ++delivered;
          {
            std::lock_guard<std::mutex> lock(mu);
            address[r.trainer_id] = server->PeerAddress(r.trainer_id);
          }
          if (!answer) continue;  // alive (heartbeats are answered), but never replies
          if (r.header.kind() == Header::GET) {
            static const float data[4] = {1, 2, 3, 4};
            Header h;
            auto* t = h.add_tensors();
            t->set_name(r.header.tensors(0).name());
            t->set_dtype(5);
            t->add_dims(4);
            t->set_nbytes(16);
            server->Reply(r, h, {Payload{data, 16, nullptr}});
          } else {
            server->Reply(r, {});
          }
        }
      }
    });
  }
  ~EchoServer() { Stop(); }
  void Stop() {
    stop = true;
    if (thread.joinable()) thread.join();
    server.reset();
  }
  std::string endpoint;
  std::unique_ptr<Server> server;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<int> delivered{0};
  std::mutex mu;
  std::map<int, std::string> address;  // where each trainer's last request came from
  std::string AddressOf(int trainer) {
    std::lock_guard<std::mutex> lock(mu);
    return address[trainer];
  }
};

Header Get(const std::string& name) {
  Header h;
  h.set_kind(Header::GET);
  h.add_tensors()->set_name(name);
  return h;
}

TEST(RpcTest, AuthenticatedTrainerGetsReplies) {
  EchoServer s;
  auto c = Client::Connect({s.endpoint}, 1, "fp", TestOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r = (*c)->Wait((*c)->Post(0, Get("w")));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->payloads.size(), 1u);
  EXPECT_EQ(r->payloads[0].size(), 16u);
  EXPECT_EQ(static_cast<const float*>(r->payloads[0].data())[3], 4.0f);
  EXPECT_EQ(s.delivered.load(), 1);
}

TEST(RpcTest, LocalTrainersMoveToTheServersUnixSocket) {
  EchoServer s;
  auto local = Client::Connect({s.endpoint}, 1, "fp", TestOptions());
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_TRUE((*local)->Wait((*local)->Post(0, Get("w"))).ok());
  // Over the Unix socket the peer has no IP address; over TCP it is 127.0.0.1.
  EXPECT_NE(s.AddressOf(1), "127.0.0.1");
  Options tcp = TestOptions();
  tcp.ipc = false;
  auto remote = Client::Connect({s.endpoint}, 2, "fp", tcp);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_TRUE((*remote)->Wait((*remote)->Post(0, Get("w"))).ok());
  EXPECT_EQ(s.AddressOf(2), "127.0.0.1");
  const std::string sock = IpcAddress(s.endpoint, TestOptions()).substr(6);
  EXPECT_EQ(access(sock.c_str(), F_OK), 0);
  s.Stop();
  EXPECT_NE(access(sock.c_str(), F_OK), 0) << "the server leaves " << sock << " behind";
}

TEST(RpcTest, WrongSecretIsRefusedAndTheServerServesTheOthers) {
  EchoServer s;
  auto bad = Client::Connect({s.endpoint}, 0, "fp", TestOptions("wrong"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("secrets differ"), std::string::npos)
      << bad.status().ToString();
  auto good = Client::Connect({s.endpoint}, 1, "fp", TestOptions());
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE((*good)->Wait((*good)->Post(0, Get("w"))).ok());
  EXPECT_GE(s.server->refused(), 1);
}

TEST(RpcTest, DifferentProgramsAreDetectedAtTheHandshake) {
  EchoServer s("s3cret", "aaaa");
  auto c = Client::Connect({s.endpoint}, 0, "bbbb", TestOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("aaaa"), std::string::npos) << c.status().ToString();
  EXPECT_NE(c.status().message().find("bbbb"), std::string::npos) << c.status().ToString();
}

TEST(RpcTest, TrainerIdOutOfRangeIsRefused) {
  EchoServer s;
  auto c = Client::Connect({s.endpoint}, 9, "fp", TestOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("out of range"), std::string::npos);
}

TEST(RpcTest, PortInUseIsAnErrorNamingIt) {
  EchoServer s;
  ServerOptions so;
  so.rpc = TestOptions();
  auto second = Server::Bind(s.endpoint, so);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find(s.endpoint), std::string::npos);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

// A server started by `loom launch` serves on the socket the launcher listens on at its port
// (LOOM_PS_LISTEN_FD): binding the port itself would fail, as the launcher holds it.
TEST(RpcTest, ServesOnTheListeningSocketTheLauncherPassed) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  ServerOptions so;
  so.rpc = TestOptions();
  so.trainers = 1;
  so.fingerprint = "fp";
  // Without the variable the port is in use; a descriptor at another port is not taken.
  ASSERT_EQ(Server::Bind(endpoint, so).status().code(), StatusCode::kAlreadyExists);
  setenv("LOOM_PS_LISTEN_FD", std::to_string(fd).c_str(), 1);
  const std::string other = FreeEndpoint();
  auto elsewhere = Server::Bind(other, so);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.status().ToString();
  elsewhere->reset();
  auto s = Server::Bind(endpoint, so);
  unsetenv("LOOM_PS_LISTEN_FD");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::atomic<int> served{0};
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) served += static_cast<int>((*s)->Poll(milliseconds(20)).size());
  });
  Options o = TestOptions();
  o.ipc = false;  // over the TCP socket, not the Unix one beside it
  auto c = Client::Connect({endpoint}, 0, "fp", o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  stop = true;
  loop.join();
  s->reset();  // the server closes the socket it was given
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(RpcTest, AHostNameIsBoundAtItsAddress) {
  const std::string port = FreeEndpoint().substr(10);  // after "127.0.0.1:"
  ServerOptions so;
  so.rpc = TestOptions();
  so.trainers = 1;
  so.fingerprint = "fp";
  auto s = Server::Bind("localhost:" + port, so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::atomic<bool> stop{false};
  std::thread loop([&] {
    while (!stop) (*s)->Poll(milliseconds(20));
  });
  Options o = TestOptions();
  o.ipc = false;
  auto c = Client::Connect({"127.0.0.1:" + port}, 0, "fp", o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  stop = true;
  loop.join();
  EXPECT_FALSE(Server::Bind("no-such-host.invalid:" + port, so).ok());
}

TEST(RpcTest, QueuedSendsGoByPriorityWithinTheirRun) {
  // SEND(p0) SEND(p5) SEND(p1) BARRIER SEND(p0) SEND(p9): the barrier stays between the runs.
  std::vector<size_t> order =
      SendOrder({{true, 0}, {true, 5}, {true, 1}, {false, 0}, {true, 0}, {true, 9}});
  EXPECT_EQ(order, (std::vector<size_t>{1, 2, 0, 3, 5, 4}));
  EXPECT_EQ(SendOrder({{true, 2}, {true, 2}, {true, 2}}), (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(SendOrder({}).empty());
}

TEST(RpcTest, AHostThatDoesNotResolveIsAnErrorAtOnce) {
  // An error of its own kind (not the connect timeout's).
  auto c = Client::Connect({"no-such-host.invalid:6174"}, 0, "fp", TestOptions());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("cannot resolve host 'no-such-host.invalid'"),
            std::string::npos)
      << c.status().ToString();
}

TEST(RpcTest, BadEndpointsAreErrors) {
  EXPECT_FALSE(TcpAddress("localhost").ok());
  EXPECT_FALSE(TcpAddress("h:0").ok());
  EXPECT_FALSE(TcpAddress("h:99999").ok());
  EXPECT_EQ(TcpAddress("127.0.0.1:6174").value(), "tcp://127.0.0.1:6174");
}

// Raw frames from a peer that is not a Loom client.
void SendRaw(zmq::socket_t& s, std::vector<std::string> frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq::message_t m(frames[i].data(), frames[i].size());
    s.send(m, i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

TEST(RpcTest, MalformedMessagesAreRefusedAndNeverDelivered) {
  EchoServer s;
  zmq::context_t ctx(1);
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect("tcp://" + s.endpoint);
  Header send;
  send.set_kind(Header::SEND);
  send.set_trainer_id(0);
  send.set_name("w@GRAD");
  send.set_dtype(5);
  send.add_dims(4);
  send.set_nbytes(16);
  send.set_step(1);
  const std::string header = send.SerializeAsString();
  SendRaw(raw, {"garbage that is no protobuf \xff\xff"});
  SendRaw(raw, {header});                                       // SEND without its payload
  SendRaw(raw, {header, std::string(12, 'x')});                 // truncated payload
  SendRaw(raw, {header, std::string(16, 'x'), "third frame"});  // too many frames
  SendRaw(raw, {header, std::string(16, 'x')});                 // well-formed, unauthenticated
  Header huge = send;
  huge.clear_dims();
  huge.add_dims(int64_t(1) << 40);
  huge.set_nbytes(int64_t(4) << 40);
  SendRaw(raw, {huge.SerializeAsString(), std::string(16, 'x')});  // lies about its size
  Header bad_dtype = send;
  bad_dtype.set_dtype(99);
  SendRaw(raw, {bad_dtype.SerializeAsString(), std::string(16, 'x')});
  // Bigger than any block the server holds: dropped by ZeroMQ before it is read.
  SendRaw(raw, {header, std::string((1 << 20) + (128 << 10), 'x')});
  auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  while (s.server->refused() < 7 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_GE(s.server->refused(), 7);
  EXPECT_EQ(s.delivered.load(), 0);
  // The server still serves a real trainer.
  auto c = Client::Connect({s.endpoint}, 2, "fp", TestOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Wait((*c)->Post(0, Get("w"))).ok());
}

TEST(RpcTest, ADeadServerEndsEveryWaitWithinTheTimeout) {
  auto s = std::make_unique<EchoServer>();
  auto c = Client::Connect({s->endpoint}, 0, "fp", SilenceTestOptions());
  ASSERT_TRUE(c.ok());
  const std::string ep = s->endpoint;
  s->Stop();
  auto begin = std::chrono::steady_clock::now();
  auto r = (*c)->Wait((*c)->Post(0, Get("w")));
  auto took = std::chrono::steady_clock::now() - begin;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find(ep), std::string::npos) << r.status().ToString();
  EXPECT_LT(took, milliseconds(3000));
  // Later requests fail at once.
  EXPECT_FALSE((*c)->Wait((*c)->Post(0, Get("w"))).ok());
}

TEST(RpcTest, AServerRestartedOnItsEndpointRefusesTheOldConnection) {
  auto s = std::make_unique<EchoServer>();
  const std::string ep = s->endpoint;
  auto c = Client::Connect({ep}, 0, "fp", TestOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Wait((*c)->Post(0, Get("w"))).ok());
  s.reset();
  EchoServer again("s3cret", "fp", true, ep);
  // The connection comes back to the new server, which never authenticated it: its next
  // message (a heartbeat or this GET) is refused with the reason, well before the silence
  // timeout.
  auto begin = std::chrono::steady_clock::now();
  StatusOr<Reply> r = Status::OK();
  do {
    r = (*c)->Wait((*c)->Post(0, Get("w")));
  } while (r.ok() && std::chrono::steady_clock::now() - begin < milliseconds(3000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("never authenticated"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(again.delivered.load(), 0);
}

// A trainer whose session with the server on its endpoint ended (the last job's server, still
// serving that job's other trainers) is refused for now and asks again until the next server
// binds the endpoint; that one serves it, the old one never does.
TEST(RpcTest, ASessionThatEndedIsRefusedForNowAndTheTrainerWaitsForTheNextServer) {
  auto old = std::make_unique<EchoServer>("s3cret", "fp", true, "", /*ended_trainer=*/1);
  const std::string ep = old->endpoint;
  std::thread restart([&] {
    std::this_thread::sleep_for(milliseconds(600));  // the trainer is refused meanwhile
    old.reset();
  });
  std::unique_ptr<EchoServer> next;
  std::thread start([&] {
    restart.join();
    next = std::make_unique<EchoServer>("s3cret", "fp", true, ep);
  });
  Options o = TestOptions();
  o.connect_timeout = milliseconds(10000);
  auto c = Client::Connect({ep}, 1, "fp", o);
  start.join();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Wait((*c)->Post(0, Get("w"))).ok());
  EXPECT_EQ(next->delivered.load(), 1);
}

// A server slower than the trainer's retry interval: the trainer sends its hello again while
// its proof waits to be read; the server ignores the hello it already answered, and the
// trainer takes the reply to its proof (it once waited for a second challenge until its
// connect timeout, while the server counted it silent).
TEST(RpcTest, ASlowServersReplyEndsTheHandshakeAfterTheHelloWasSentAgain) {
  // Its challenge comes after the trainer's third resent hello, when the interval reached its
  // 2 s cap; its reply to the proof 2.5 s later, after the next resend.
  EchoServer s("s3cret", "fp", true, "", -1, /*pause_ms=*/2500);
  Options o = TestOptions();
  o.heartbeat = milliseconds(1000);
  o.timeout = milliseconds(10000);
  o.connect_timeout = milliseconds(15000);
  o.ipc = false;
  auto c = Client::Connect({s.endpoint}, 0, "fp", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->Wait((*c)->Post(0, Get("w"))).ok());
}

TEST(RpcTest, ARefusalForNowThatLastsEndsAtTheConnectTimeoutQuotingIt) {
  EchoServer s("s3cret", "fp", true, "", /*ended_trainer=*/2);
  Options o = TestOptions();
  o.connect_timeout = milliseconds(1200);
  auto c = Client::Connect({s.endpoint}, 2, "fp", o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find("already ended its session with trainer 2"),
            std::string::npos)
      << c.status().ToString();
  // Another trainer id is served meanwhile.
  auto other = Client::Connect({s.endpoint}, 3, "fp", o);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
}

TEST(RpcTest, AServerThatNeverAnswersEndsTheWaitAtTheCallTimeout) {
  EchoServer s("s3cret", "fp", /*answer=*/false);
  Options o = TestOptions();
  o.call_timeout = milliseconds(1500);
  auto c = Client::Connect({s.endpoint}, 0, "fp", o);
  ASSERT_TRUE(c.ok());
  auto r = (*c)->Wait((*c)->Post(0, Get("w")));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("GET 'w'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(s.endpoint), std::string::npos) << r.status().ToString();
}

TEST(RpcTest, WaitAllReturnsEveryReplyInTheOrderAsked) {
  EchoServer a, b;
  auto c = Client::Connect({a.endpoint, b.endpoint}, 0, "fp", TestOptions());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto r =
      (*c)->WaitAll({(*c)->Post(1, Get("v")), (*c)->Post(0, Get("w")), (*c)->Post(1, Get("x"))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].header.tensors(0).name(), "v");
  EXPECT_EQ((*r)[1].header.tensors(0).name(), "w");
  EXPECT_EQ((*r)[2].header.tensors(0).name(), "x");
  EXPECT_EQ(a.delivered.load(), 1);
  EXPECT_EQ(b.delivered.load(), 2);
}

// A trainer waits on two servers: one alive but not answering (it waits for another trainer),
// one dead. The wait ends with the dead one's failure at its silence timeout, not at the call
// timeout behind the first server's request, and names the dead server.
TEST(RpcTest, WaitAllEndsAtTheFirstFailureWhileOtherRequestsAreStillOpen) {
  EchoServer waiting("s3cret", "fp", /*answer=*/false);
  auto dead = std::make_unique<EchoServer>();
  Options o = SilenceTestOptions();
  o.call_timeout = milliseconds(20000);
  auto c = Client::Connect({waiting.endpoint, dead->endpoint}, 0, "fp", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string ep = dead->endpoint;
  dead->Stop();
  auto begin = std::chrono::steady_clock::now();
  auto r = (*c)->WaitAll({(*c)->Post(0, Get("w")), (*c)->Post(1, Get("v"))});
  auto took = std::chrono::steady_clock::now() - begin;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find(ep), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("sent nothing"), std::string::npos) << r.status().ToString();
  EXPECT_LT(took, milliseconds(10000));
  // CallAll waits the same way.
  Header h;
  h.set_kind(Header::COMPLETE);
  Status st = (*c)->CallAll(h);
  EXPECT_NE(st.message().find(ep), std::string::npos) << st.ToString();
}

TEST(RpcTest, NoServerAtAllIsATimeoutNamingTheEndpoint) {
  Options o = TestOptions();
  o.connect_timeout = milliseconds(300);
  const std::string ep = FreeEndpoint();
  auto c = Client::Connect({ep}, 0, "fp", o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout);
  EXPECT_NE(c.status().message().find(ep), std::string::npos);
}

TEST(RpcTest, HeadersAreValidatedField_by_field) {
  auto decode = [](const Header& h, int64_t payload) {
    std::string b = h.SerializeAsString();
    std::vector<int64_t> sizes;
    if (payload >= 0) sizes.push_back(payload);
    return DecodeHeader(b.data(), b.size(), sizes).status();
  };
  Header h;
  h.set_kind(Header::SEND);
  h.set_name("g");
  h.set_dtype(6);
  h.add_dims(2);
  h.add_dims(3);
  h.set_nbytes(48);
  h.set_step(1);
  EXPECT_TRUE(decode(h, 48).ok());
  EXPECT_FALSE(decode(h, 47).ok());
  EXPECT_FALSE(decode(h, -1).ok());
  Header neg = h;
  neg.set_dims(0, -2);
  EXPECT_FALSE(decode(neg, 48).ok());
  Header get;
  get.set_kind(Header::GET);
  EXPECT_FALSE(decode(get, -1).ok());  // no blocks
  get.add_tensors();
  EXPECT_FALSE(decode(get, -1).ok());  // a block without a name
  get.mutable_tensors(0)->set_name("w");
  EXPECT_TRUE(decode(get, -1).ok());
  EXPECT_FALSE(decode(get, 4).ok());  // a GET carries no payload
  Header reply;
  reply.set_kind(Header::REPLY);
  auto* t = reply.add_tensors();
  t->set_name("w");
  t->set_dtype(5);
  t->add_dims(2);
  t->set_nbytes(8);
  EXPECT_TRUE(decode(reply, 8).ok());
  EXPECT_FALSE(decode(reply, 12).ok());  // the payload disagrees with its tensor
  reply.add_tensors()->CopyFrom(reply.tensors(0));
  EXPECT_FALSE(decode(reply, 8).ok());  // two tensors, one payload
  Header hello;
  hello.set_kind(Header::HELLO);
  hello.set_trainer_id(0);
  hello.set_nonce("short");
  EXPECT_FALSE(decode(hello, -1).ok());
  std::string big(kMaxHeaderBytes + 1, 'x');
  EXPECT_FALSE(DecodeHeader(big.data(), big.size(), {}).ok());
}

}  // namespace
}  // namespace loom::rpc
