#include "collective/transport/mpi.h"

#include "base/copy.h"
#include "collective/transport_registry.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collective/reduce.h"
#include "collective/transport/shm.h"

namespace loom::collective {
namespace {

int g_thread_level = -1;        // granted level; -1 until known
bool g_we_initialized = false;  // MpiInit called MPI_Init_thread
std::mutex g_mpi_mu;            // held around MPI calls below MPI_THREAD_MULTIPLE

// Holds the process-wide MPI lock unless the library is fully thread-safe.
class MpiGuard {
 public:
  MpiGuard() : locked_(g_thread_level < MPI_THREAD_MULTIPLE) {
    if (locked_) g_mpi_mu.lock();
  }
  ~MpiGuard() {
    if (locked_) g_mpi_mu.unlock();
  }
  MpiGuard(const MpiGuard&) = delete;
  MpiGuard& operator=(const MpiGuard&) = delete;

 private:
  bool locked_;
};

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, len);
}

Status CheckThreadLevel() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return FailedPrecondition("MPI is not initialized (call MpiInit first)");
  if (g_thread_level < 0) MPI_Query_thread(&g_thread_level);
  if (g_thread_level < MPI_THREAD_SERIALIZED) {
    return FailedPrecondition("MPI granted ", MpiThreadLevel(),
                              "; the MPI transport needs at least MPI_THREAD_SERIALIZED because "
                              "the communicator's worker thread makes the MPI calls");
  }
  return Status::OK();
}

// The first polls of a wait spin without yielding: a small message's answer usually arrives
// within a few microseconds, and a yield on an oversubscribed core costs more than that (4
// ranks on 2 cores, 4-byte MPI_Iallreduce + MPI_Test: 7.3 us spinning, 13.7 us yielding after
// every poll).
constexpr int kSpinPolls = 512;

// Polls `request` until it completes or the deadline passes. MPI moves large messages only
// while some MPI call runs (no progress thread), so the loop keeps calling MPI_Test: it spins
// (kSpinPolls), then yields between polls, like Open MPI's own blocking calls when ranks are
// oversubscribed; after 50 ms without completion (a peer that is late or gone) it sleeps
// between polls instead.

// With count > 1: until all of `requests` completed (MPI_Testall; `status` has count entries).
Status PollUntil(MPI_Request* request, MPI_Status* status, Deadline deadline, bool* completed,
                 int count = 1) {
  *completed = false;
  // Read the clock only once a wait lasts (most small messages complete within the spin).
  Deadline patient{};
  bool idle = false;
  for (int polls = 0;; ++polls) {
    int flag = 0, rc;
    {
      MpiGuard guard;
      rc = count == 1 ? MPI_Test(request, &flag, status)
                      : MPI_Testall(count, request, &flag, status);
    }
    if (rc != MPI_SUCCESS) return Internal("MPI_Test failed: ", MpiError(rc));
    if (flag) {
      *completed = true;
      return Status::OK();
    }
    if ((polls & 63) == 63) {
      const Deadline now = Clock::now();
      if (now > deadline) return Status::OK();
      if (patient == Deadline{}) patient = now + std::chrono::milliseconds(50);
      idle = now > patient;
    }
    if (idle) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (polls >= kSpinPolls) {
      std::this_thread::yield();
    }
  }
}

// Withdraws a pending request: true once MPI no longer touches its buffer. A cancelled receive
// completes promptly; a send MPI cannot withdraw is let go after a while (false).
bool CancelRequest(MPI_Request* request, bool is_send) {
  if (*request == MPI_REQUEST_NULL) return true;
  {
    MpiGuard guard;
    MPI_Cancel(request);
  }
  MPI_Status ignored;
  bool completed = false;
  const Deadline grace = Clock::now() + std::chrono::milliseconds(is_send ? 200 : 5000);
  if (PollUntil(request, &ignored, grace, &completed).ok() && completed) return true;
  MpiGuard guard;
  if (*request != MPI_REQUEST_NULL) MPI_Request_free(request);
  return false;
}

class MpiRequest final : public Request {
 public:
  MpiRequest(MPI_Request request, bool is_send, int peer, int tag, size_t bytes, bool up_to = false)
      : request_(request),
        is_send_(is_send),
        up_to_(up_to),
        peer_(peer),
        tag_(tag),
        bytes_(bytes) {}
  // An already failed request (e.g. a message too large for one MPI call).
  explicit MpiRequest(Status failure)
      : request_(MPI_REQUEST_NULL), done_(true), status_(std::move(failure)) {}
  ~MpiRequest() override { Cancel(); }

  Status Wait(Deadline deadline) override {
    if (done_) return status_;
    MPI_Status mpi_status;
    bool completed = false;
    Status polled = PollUntil(&request_, &mpi_status, deadline, &completed);
    if (!polled.ok()) {  // e.g. MPI_ERR_TRUNCATE: the peer sent more than was expected
      done_ = true;
      status_ = polled.WithContext(StrCat(is_send_ ? "send to rank " : "receive from rank ", peer_,
                                          " (", bytes_, " bytes)"));
      return status_;
    }
    if (!completed) {
      return Timeout(is_send_ ? "MPI send to rank " : "MPI receive from rank ", peer_, " (", bytes_,
                     " bytes, MPI tag ", tag_, ") did not complete");
    }
    done_ = true;
    if (!is_send_ && !up_to_) {
      int received = 0;
      MPI_Get_count(&mpi_status, MPI_BYTE, &received);
      if (static_cast<size_t>(received) != bytes_) {
        status_ = Internal("message size mismatch on MPI tag ", tag_, ": rank ", peer_, " sent ",
                           received, " bytes, ", bytes_, " expected");
      }
    }
    return status_;
  }

  // True once MPI no longer touches the buffer (completed, or cancelled and waited for).
  bool settled() const { return done_ && !released_; }

  void Cancel() override {
    if (done_) return;
    done_ = true;
    status_ = FailedPrecondition("cancelled");
    released_ = !CancelRequest(&request_, is_send_);
  }

 private:
  MPI_Request request_;
  bool is_send_ = false;
  bool up_to_ = false;  // a receive that accepts a shorter message
  int peer_ = -1;
  int tag_ = 0;
  size_t bytes_ = 0;
  bool done_ = false;
  bool released_ = false;  // let go while MPI may still use the buffer
  Status status_;
};

// Staging buffers for RecvReduce, reused across calls: allocating (and zeroing) a fresh piece
// per receive costs page faults and memory traffic comparable to the reduction itself.
// Used only by the thread that drives the transport.
class StagingPool {
 public:
  std::unique_ptr<unsigned char[]> Take(size_t bytes, size_t* capacity) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].second >= bytes) {
        auto buf = std::move(free_[i].first);
        *capacity = free_[i].second;
        free_.erase(free_.begin() + i);
        return buf;
      }
    }
    *capacity = std::max<size_t>(bytes, 1);
    return std::unique_ptr<unsigned char[]>(new unsigned char[*capacity]);
  }
  void Give(std::unique_ptr<unsigned char[]> buf, size_t capacity) {
    if (free_.size() < 64) free_.emplace_back(std::move(buf), capacity);
  }

 private:
  std::vector<std::pair<std::unique_ptr<unsigned char[]>, size_t>> free_;
};

// Receive into a pooled staging buffer, reduce into dst when the receive completes.
class MpiRecvReduce final : public Request {
 public:
  MpiRecvReduce(StagingPool* pool, std::unique_ptr<unsigned char[]> staging, size_t capacity,
                std::unique_ptr<Request> inner, void* dst, const void* local, size_t bytes,
                const Reduction& reduction)
      : pool_(pool),
        staging_(std::move(staging)),
        capacity_(capacity),
        inner_(std::move(inner)),
        dst_(dst),
        local_(local),
        bytes_(bytes),
        reduction_(reduction) {}
  ~MpiRecvReduce() override {
    inner_->Cancel();
    if (staging_ == nullptr) return;  // received into dst
    auto* mpi = dynamic_cast<MpiRequest*>(inner_.get());
    if (mpi == nullptr || mpi->settled()) {
      pool_->Give(std::move(staging_), capacity_);
    } else {
      staging_.release();  // MPI may still write into it
    }
  }

  Status Wait(Deadline deadline) override {
    if (reduced_) return Status::OK();
    LOOM_RETURN_IF_ERROR(inner_->Wait(deadline));
    const void* received = staging_ != nullptr ? staging_.get() : dst_;
    Reduce(reduction_, dst_, local_, received, bytes_ / DataTypeSize(reduction_.dtype));
    reduced_ = true;
    return Status::OK();
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  StagingPool* pool_;
  std::unique_ptr<unsigned char[]> staging_;
  size_t capacity_;
  std::unique_ptr<Request> inner_;
  void* dst_;
  const void* local_;
  size_t bytes_;
  Reduction reduction_;
  bool reduced_ = false;
};

// fp16 reductions as MPI user operators (MPI has no binary16 type): inout = inout (op) in.
template <ReduceOp kOp>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype*) {
  Reduce(Reduction{DataType::kFloat16, kOp}, inout, inout, in, static_cast<size_t>(*len));
}

MPI_Datatype MpiType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16: return MPI_UINT16_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_DATATYPE_NULL;
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm coll, MPI_Comm p2p, MPI_Comm sig, int tag_ub)
      : coll_(coll), p2p_(p2p), sig_(sig), tag_ub_(tag_ub) {
    MPI_Comm_rank(coll_, &rank_);
    MPI_Comm_size(coll_, &nranks_);
    half_ops_[0] = MakeOp(&HalfOp<ReduceOp::kSum>);
    half_ops_[1] = MakeOp(&HalfOp<ReduceOp::kProd>);
    half_ops_[2] = MakeOp(&HalfOp<ReduceOp::kMax>);
    half_ops_[3] = MakeOp(&HalfOp<ReduceOp::kMin>);
  }
  ~MpiTransport() override {
    // After MPI_Finalize (a Python store destroyed at interpreter teardown, after the exit
    // handler finalized MPI) MPI has released everything, and any MPI call would abort the
    // process: nothing to free.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MpiGuard guard;
    for (MPI_Op& op : half_ops_) MPI_Op_free(&op);
    // Native collectives that timed out stay pending; their requests are never completed.
    MPI_Comm_free(&coll_);
    MPI_Comm_free(&p2p_);
    MPI_Comm_free(&sig_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const char* name() const override { return GetTransport(TransportId::kMpi).display; }

  std::unique_ptr<Request> Send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    return Post(/*is_send=*/true, peer, tag, const_cast<void*>(data), bytes);
  }
  std::unique_ptr<Request> Recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return Post(/*is_send=*/false, peer, tag, data, bytes);
  }
  std::unique_ptr<Request> RecvUpTo(int peer, uint64_t tag, void* data, size_t bytes) override {
    return Post(/*is_send=*/false, peer, tag, data, bytes, /*up_to=*/true);
  }

  std::unique_ptr<Request> RecvReduce(int peer, uint64_t tag, void* dst, const void* local,
                                      size_t bytes, const Reduction& reduction) override {
    size_t capacity = 0;
    // Where dst does not overlap local, the message lands in dst and is reduced there
    // (dst = local op dst, element by element): one buffer less to stream through the cache.
    const auto* d = static_cast<const unsigned char*>(dst);
    const auto* l = static_cast<const unsigned char*>(local);
    if (d + bytes <= l || l + bytes <= d) {
      auto inner = Post(/*is_send=*/false, peer, tag, dst, bytes);
      return std::make_unique<MpiRecvReduce>(&pool_, nullptr, 0, std::move(inner), dst, local,
                                             bytes, reduction);
    }
    auto staging = pool_.Take(bytes, &capacity);
    auto inner = Post(/*is_send=*/false, peer, tag, staging.get(), bytes);
    return std::make_unique<MpiRecvReduce>(&pool_, std::move(staging), capacity, std::move(inner),
                                           dst, local, bytes, reduction);
  }

  // The tagged channel is its own communicator, so a receive of any tag there matches only
  // signature-round messages, from one peer in the order sent. Below 2^24 tags (the standard
  // promises 32767; Open MPI has 2^31) signatures would share tags too often: no channel.
  uint32_t signature_tag_max() const override {
    return tag_ub_ >= (1 << 24) - 1 ? static_cast<uint32_t>(tag_ub_) : 0;
  }
  Status TaggedRound(uint32_t tag, TaggedPeer* peers, Deadline deadline) override;

  bool SupportsNative(Collective kind, DataType dtype) const override { return true; }
  Status RunNative(const NativeCollective& call, Deadline deadline) override;
  bool one_rank_per_process() const override { return true; }
  bool reduces_at_wait() const override { return true; }  // MpiRecvReduce

 private:
  static MPI_Op MakeOp(MPI_User_function* fn) {
    MPI_Op op;
    MpiGuard guard;
    MPI_Op_create(fn, /*commute=*/1, &op);
    return op;
  }

  // The library's tag layout (schedule.h): collectives seq << 8 | phase; point-to-point calls
  // set bit 63 and carry the user tag in bits 8..39.
  std::pair<MPI_Comm, int> MapTag(uint64_t tag) const {
    if (tag >> 63) {
      const uint64_t user = (tag >> 8) & 0x7fffffffu;
      return {p2p_, static_cast<int>(user % (static_cast<uint64_t>(tag_ub_) + 1))};
    }
    const uint64_t window = (static_cast<uint64_t>(tag_ub_) + 1) >> 3;
    const uint64_t seq = tag >> 8, phase = tag & 0xff;
    LOOM_CHECK(phase < 8, "collective phase ", phase, " does not fit the MPI tag layout");
    return {coll_, static_cast<int>((seq % window) << 3 | phase)};
  }

  std::unique_ptr<Request> Post(bool is_send, int peer, uint64_t tag, void* data, size_t bytes,
                                bool up_to = false) {
    LOOM_CHECK(peer >= 0 && peer < nranks_ && peer != rank_, "bad peer ", peer, " for rank ", rank_,
               " of ", nranks_);
    if (bytes > static_cast<size_t>(INT_MAX)) {
      return std::make_unique<MpiRequest>(
          InvalidArgument("message of ", bytes,
                          " bytes exceeds one MPI call (INT_MAX bytes); "
                          "lower pipeline_chunk_bytes"));
    }
    const auto [comm, mpi_tag] = MapTag(tag);
    MPI_Request request;
    int rc;
    {
      MpiGuard guard;
      rc = is_send
               ? MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag, comm, &request)
               : MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, mpi_tag, comm, &request);
    }
    if (rc != MPI_SUCCESS) {
      return std::make_unique<MpiRequest>(Internal(
          is_send ? "MPI_Isend" : "MPI_Irecv", " to/from rank ", peer, " failed: ", MpiError(rc)));
    }
    return std::make_unique<MpiRequest>(request, is_send, peer, mpi_tag, bytes, up_to);
  }

  MPI_Op MpiOp(DataType dtype, ReduceOp op) const {
    const int index = op == ReduceOp::kProd  ? 1
                      : op == ReduceOp::kMax ? 2
                      : op == ReduceOp::kMin ? 3
                                             : 0;  // sum and avg
    if (dtype == DataType::kFloat16) return half_ops_[index];
    const MPI_Op builtin[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    return builtin[index];
  }

  MPI_Comm coll_, p2p_, sig_;
  int tag_ub_;
  // TaggedRound's requests and statuses, kept from round to round (rounds run one at a time).
  std::vector<MPI_Request> round_requests_;
  std::vector<MPI_Status> round_statuses_;
  std::vector<int> round_peers_;
  StagingPool pool_;
  // Staging blocks of timed-out native calls that MPI may still write into.
  std::vector<std::unique_ptr<std::vector<unsigned char>>> abandoned_;
  int rank_ = 0, nranks_ = 1;
  MPI_Op half_ops_[4];
};

Status MpiTransport::RunNative(const NativeCollective& c, Deadline deadline) {
  const size_t elem = DataTypeSize(c.dtype);
  const size_t total = c.kind == Collective::kAllGather || c.kind == Collective::kReduceScatter
                           ? c.count * nranks_
                           : c.count;
  if (total > static_cast<size_t>(INT_MAX)) {
    return InvalidArgument("native MPI collectives take at most INT_MAX elements, got ", total);
  }
  if (c.count == 0) return Status::OK();
  const int count = static_cast<int>(c.count);
  const MPI_Datatype type = MpiType(c.dtype);
  const MPI_Op op = MpiOp(c.dtype, c.op);
  const Reduction reduction{c.dtype, c.op};
  auto staging = std::make_unique<std::vector<unsigned char>>();  // in-place reduce-scatter
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  const char* what = "";
  {
    MpiGuard guard;
    switch (c.kind) {
      case Collective::kAllReduce:
        what = "MPI_Iallreduce";
        rc = MPI_Iallreduce(c.send == c.recv ? MPI_IN_PLACE : c.send, c.recv, count, type, op,
                            coll_, &request);
        break;
      case Collective::kReduce:
        what = "MPI_Ireduce";
        rc = MPI_Ireduce(rank_ == c.root && c.send == c.recv ? MPI_IN_PLACE : c.send, c.recv, count,
                         type, op, c.root, coll_, &request);
        break;
      case Collective::kBroadcast:
        what = "MPI_Ibcast";
        if (rank_ == c.root && c.send != c.recv) CopyBytes(c.recv, c.send, c.count * elem);
        rc = MPI_Ibcast(c.recv, count, type, c.root, coll_, &request);
        break;
      case Collective::kAllGather: {
        what = "MPI_Iallgather";
        const bool in_place = c.send == static_cast<const char*>(c.recv) + rank_ * c.count * elem;
        rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : c.send, count, type, c.recv, count, type,
                            coll_, &request);
        break;
      }
      case Collective::kReduceScatter: {
        what = "MPI_Ireduce_scatter_block";
        // MPI's in-place form expects the block at the front of the buffer; ours sits at rank's
        // offset, so an in-place call reduces into a staging block and copies it back.
        const bool in_place = c.recv == static_cast<const char*>(c.send) + rank_ * c.count * elem;
        void* out = c.recv;
        if (in_place) {
          staging->resize(c.count * elem);
          out = staging->data();
        }
        rc = MPI_Ireduce_scatter_block(c.send, out, count, type, op, coll_, &request);
        break;
      }
    }
  }
  if (rc != MPI_SUCCESS) return Internal(what, " failed: ", MpiError(rc));
  MPI_Status status;
  bool completed = false;
  LOOM_RETURN_IF_ERROR(PollUntil(&request, &status, deadline, &completed));
  if (!completed) {
    // Nonblocking collectives cannot be cancelled; the request stays with MPI (see mpi.h), and
    // so does the staging block it may still write into, until the transport goes away.
    abandoned_.push_back(std::move(staging));
    return Timeout(what, " did not complete on every rank");
  }
  if (!staging->empty()) CopyBytes(c.recv, staging->data(), staging->size());
  if (c.op == ReduceOp::kAvg) {
    if (c.kind == Collective::kAllReduce || c.kind == Collective::kReduceScatter ||
        (c.kind == Collective::kReduce && rank_ == c.root)) {
      collective::Finalize(reduction, c.recv, c.count, nranks_);
    }
  }
  return Status::OK();
}

}  // namespace

const char* MpiThreadLevel() {
  switch (g_thread_level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "not initialized";
}

Status MpiInit(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &g_thread_level);
    if (rc != MPI_SUCCESS) return Internal("MPI_Init_thread failed: ", MpiError(rc));
    g_we_initialized = true;
  } else {
    MPI_Query_thread(&g_thread_level);
  }
  return CheckThreadLevel();
}

Status MpiFinalize() {
  if (!g_we_initialized) return Status::OK();
  g_we_initialized = false;
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) return Internal("MPI_Finalize failed: ", MpiError(rc));
  return Status::OK();
}

void MpiAbort(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
}

bool LaunchedByMpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int MpiWorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int MpiWorldSize() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// Every receive first (a peer's message finds its receive posted), then every send, all polled
// together: one poll loop for the round, no request objects.
Status MpiTransport::TaggedRound(uint32_t tag, TaggedPeer* peers, Deadline deadline) {
  if (tag > signature_tag_max())
    return InvalidArgument("signature tag ", tag, " exceeds MPI_TAG_UB ", tag_ub_);
  const int n = nranks_, peers_n = n - 1;
  round_requests_.assign(2 * peers_n, MPI_REQUEST_NULL);
  round_statuses_.resize(2 * peers_n);
  round_peers_.resize(2 * peers_n);
  MPI_Request* requests = round_requests_.data();
  int posted = 0, rc = MPI_SUCCESS;
  {
    MpiGuard guard;
    for (int r = 0; r < n && rc == MPI_SUCCESS; ++r) {
      if (r == rank_) continue;
      if (peers[r].capacity > static_cast<size_t>(INT_MAX) ||
          peers[r].send_bytes > static_cast<size_t>(INT_MAX)) {
        rc = MPI_ERR_COUNT;
        break;
      }
      round_peers_[posted] = r;
      rc = MPI_Irecv(peers[r].recv, static_cast<int>(peers[r].capacity), MPI_BYTE, r, MPI_ANY_TAG,
                     sig_, &requests[posted]);
      if (rc == MPI_SUCCESS) ++posted;
    }
    for (int r = 0; r < n && rc == MPI_SUCCESS; ++r) {
      if (r == rank_) continue;
      round_peers_[posted] = r;
      rc = MPI_Isend(peers[r].send, static_cast<int>(peers[r].send_bytes), MPI_BYTE, r,
                     static_cast<int>(tag), sig_, &requests[posted]);
      if (rc == MPI_SUCCESS) ++posted;
    }
  }
  auto cancel_pending = [&] {
    for (int i = 0; i < posted; ++i) CancelRequest(&requests[i], /*is_send=*/i >= peers_n);
  };
  if (rc != MPI_SUCCESS) {
    cancel_pending();
    return Internal("posting the signature round failed: ", MpiError(rc));
  }
  bool completed = false;
  Status polled = PollUntil(requests, round_statuses_.data(), deadline, &completed, posted);
  if (!polled.ok() || !completed) {
    // Name the peers whose message did not arrive (receives still pending).
    std::string missing;
    int silent = 0;
    for (int i = 0; i < peers_n; ++i) {
      int flag = 1;
      if (requests[i] != MPI_REQUEST_NULL) {
        MpiGuard guard;
        MPI_Request_get_status(requests[i], &flag, MPI_STATUS_IGNORE);
      }
      if (!flag) missing += StrCat(silent++ > 0 ? ", " : "", round_peers_[i]);
    }
    cancel_pending();
    if (!polled.ok()) return polled.WithContext("signature round");
    if (silent == 0) return Timeout("signature round: sends to the peers did not complete");
    return Timeout("signature round: no message from rank", silent > 1 ? "s " : " ", missing,
                   " on the signature channel");
  }
  for (int i = 0; i < peers_n; ++i) {
    int received = 0;
    MPI_Get_count(&round_statuses_[i], MPI_BYTE, &received);
    TaggedPeer& p = peers[round_peers_[i]];
    p.tag = static_cast<uint32_t>(round_statuses_[i].MPI_TAG);
    p.bytes = static_cast<size_t>(received);
  }
  return Status::OK();
}

namespace {

// A transport over the ranks of `base` (collective over them).
StatusOr<std::unique_ptr<Transport>> NewMpiTransport(MPI_Comm base) {
  LOOM_RETURN_IF_ERROR(CheckThreadLevel());
  MPI_Comm coll, p2p, sig;
  int* tag_ub = nullptr;
  int found = 0;
  {
    MpiGuard guard;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    if (MPI_Comm_dup(base, &coll) != MPI_SUCCESS || MPI_Comm_dup(base, &p2p) != MPI_SUCCESS ||
        MPI_Comm_dup(base, &sig) != MPI_SUCCESS) {
      return Internal("MPI_Comm_dup of the ranks' communicator failed");
    }
    // Errors on our communicators come back as codes (and then as Status), not as an abort.
    MPI_Comm_set_errhandler(coll, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(p2p, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(sig, MPI_ERRORS_RETURN);
  }
  const int ub = found && tag_ub != nullptr ? *tag_ub : 32767;  // 32767: the standard's minimum
  return std::unique_ptr<Transport>(new MpiTransport(coll, p2p, sig, ub));
}

// The shared-memory segment of the ranks of `comm`, all on this node (collective over them):
// null, with *why_not saying why, where any rank cannot use it.
StatusOr<std::shared_ptr<ShmSegment>> ShareMemoryOn(MPI_Comm comm, std::string* why_not) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  // Rank 0 creates the segment and sends its name (empty: it could not).
  constexpr int kNameBytes = 256;
  char name[kNameBytes] = {};
  std::shared_ptr<ShmSegment> segment;
  Status mine;
  if (rank == 0) {
    StatusOr<std::shared_ptr<ShmSegment>> created = CreateShmSegment(n);
    if (created.ok()) {
      segment = *created;
      std::snprintf(name, sizeof(name), "%s", segment->name().c_str());
    } else {
      mine = created.status();
    }
  }
  {
    MpiGuard guard;
    if (MPI_Bcast(name, kNameBytes, MPI_CHAR, 0, comm) != MPI_SUCCESS)
      return Internal("rank ", rank, ": MPI_Bcast of the shared-memory segment's name failed");
  }
  if (name[0] != '\0' && rank != 0) {
    StatusOr<std::shared_ptr<ShmSegment>> opened = OpenShmSegment(name, n);
    if (opened.ok()) {
      segment = *opened;
    } else {
      mine = opened.status();
    }
  }
  if (segment != nullptr) segment->Register(rank);
  // Once every rank has opened and registered, the name goes (the mappings stay) and each
  // rank checks that it can read its peers' memory.
  {
    MpiGuard guard;
    if (MPI_Barrier(comm) != MPI_SUCCESS)
      return Internal("rank ", rank, ": MPI_Barrier after opening shared memory failed");
  }
  if (segment != nullptr) {
    segment->Unlink();
    if (mine.ok()) mine = segment->CheckPeers(rank);
  } else if (mine.ok()) {
    mine = FailedPrecondition("rank 0 could not create the shared-memory segment");
  }
  int ok = mine.ok() ? 1 : 0, all_ok = 0;
  {
    MpiGuard guard;
    if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
      return Internal("rank ", rank, ": MPI_Allreduce of the shared-memory check failed");
  }
  if (!all_ok) {
    if (why_not != nullptr)
      *why_not = mine.ok() ? "another rank could not use shared memory"
                           : StrCat("rank ", rank, ": ", mine.message());
    return std::shared_ptr<ShmSegment>();
  }
  return segment;
}

}  // namespace

StatusOr<std::unique_ptr<Transport>> CreateMpiTransport() {
  return NewMpiTransport(MPI_COMM_WORLD);
}

StatusOr<NodeMap> DetectMpiNodes() {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  constexpr int kBytes = 4096;  // a host's description: its name and a few NICs
  std::string mine = EncodeHost(DetectLocalHost());
  if (mine.size() >= kBytes) mine.resize(kBytes - 1);
  mine.resize(kBytes, '\0');
  std::vector<char> all(static_cast<size_t>(kBytes) * size);
  {
    MpiGuard guard;
    if (MPI_Allgather(mine.data(), kBytes, MPI_CHAR, all.data(), kBytes, MPI_CHAR,
                      MPI_COMM_WORLD) != MPI_SUCCESS)
      return Internal("rank ", rank, ": MPI_Allgather of the ranks' hosts failed");
  }
  std::vector<HostInfo> hosts;
  for (int r = 0; r < size; ++r) {
    const char* text = all.data() + static_cast<size_t>(r) * kBytes;
    StatusOr<HostInfo> host = DecodeHost(std::string(text, strnlen(text, kBytes)));
    if (!host.ok()) return host.status().WithContext(StrCat("rank ", r, "'s host"));
    hosts.push_back(std::move(host).value());
  }
  return BuildNodeMap(hosts);
}

CommunicatorOptions AcrossNodesMpiOptions(CommunicatorOptions options) {
  options.auto_tree_max_bytes = kMpiAcrossNodesTreeMaxBytes;
  options.auto_star_max_ranks = 0;
  options.auto_direct_min_bytes = -1;
  options.auto_direct_max_bytes = -1;
  options.auto_native_min_bytes = -1;
  options.auto_native_max_bytes = -1;
  options.doubling_exchange = true;
  return options;
}

CommunicatorOptions SharedMemoryMpiOptions(CommunicatorOptions options) {
  const CommunicatorOptions in_process = TransportDefaults(GetTransport(TransportId::kInProcess));
  options.auto_tree_max_bytes = in_process.auto_tree_max_bytes;
  options.auto_star_max_ranks = in_process.auto_star_max_ranks;
  options.auto_direct_min_bytes = in_process.auto_direct_min_bytes;
  options.auto_direct_max_bytes = in_process.auto_direct_max_bytes;
  options.auto_native_min_bytes = in_process.auto_native_min_bytes;
  options.auto_native_max_bytes = in_process.auto_native_max_bytes;
  return options;
}

StatusOr<std::unique_ptr<Transport>> ShareNodeMemory(std::unique_ptr<Transport> mpi,
                                                     std::string* why_not) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<ShmSegment> segment,
                        ShareMemoryOn(MPI_COMM_WORLD, why_not));
  if (segment == nullptr) return mpi;
  return WrapSharedMemory(std::move(mpi), std::move(segment));
}

namespace {

// The node-hierarchical transport (shm.h, WrapNodeHierarchy) over `world` for ranks on
// several nodes, the same number on each: a communicator of the node's ranks sets up their segment,
// and one of the ranks with this local index on every node (in node order) carries the shards
// across nodes. `world` back, with *why_not, where a node's ranks cannot share memory.
StatusOr<std::unique_ptr<Transport>> ShareNodesMemory(std::unique_ptr<Transport> world,
                                                      const NodeMap& nodes,
                                                      const CommunicatorOptions& across,
                                                      std::string* why_not) {
  const int rank = world->rank();
  const int node = nodes.node_of_rank[rank];
  const std::vector<int>& mates = nodes.ranks[node];
  const int local = static_cast<int>(std::find(mates.begin(), mates.end(), rank) - mates.begin());
  MPI_Comm local_comm = MPI_COMM_NULL, cross_comm = MPI_COMM_NULL;
  {
    MpiGuard guard;
    if (MPI_Comm_split(MPI_COMM_WORLD, node, local, &local_comm) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, local, node, &cross_comm) != MPI_SUCCESS)
      return Internal("rank ", rank, ": MPI_Comm_split into nodes failed");
  }
  auto free_comms = [&] {
    MpiGuard guard;
    if (local_comm != MPI_COMM_NULL) MPI_Comm_free(&local_comm);
    if (cross_comm != MPI_COMM_NULL) MPI_Comm_free(&cross_comm);
  };
  StatusOr<std::shared_ptr<ShmSegment>> segment = ShareMemoryOn(local_comm, why_not);
  // Every rank must agree: one node without shared memory keeps the whole world on MPI.
  int ok = segment.ok() && *segment != nullptr ? 1 : 0, all_ok = 0;
  {
    MpiGuard guard;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  if (!segment.ok()) {
    free_comms();
    return segment.status();
  }
  if (!all_ok) {
    if (why_not != nullptr && why_not->empty()) *why_not = "a node's ranks cannot share memory";
    free_comms();
    return world;
  }
  StatusOr<std::unique_ptr<Transport>> cross_transport = NewMpiTransport(cross_comm);
  free_comms();  // the transports hold duplicates
  if (!cross_transport.ok()) return cross_transport.status();
  // The cross group has one rank per node: the nodes' own link matrix, priced at their NICs.
  const NodeMap cross_nodes = BuildNodeMap(nodes.hosts);
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const CommPlan> plan,
                        CommPlan::Create(NodeTopology(cross_nodes), 0.7));
  auto cross =
      std::make_unique<Communicator>(std::move(cross_transport).value(), std::move(plan), across);
  return WrapNodeHierarchy(std::move(world), std::move(*segment), local, mates, std::move(cross));
}

}  // namespace

// Whether every rank wants shared memory (`wanted` here, and LOOM_MPI_SHM is not 0): the
// setup is collective, so one rank's no (mpirun may not pass the variable to other nodes)
// keeps every rank on MPI. Collective over MPI_COMM_WORLD.
StatusOr<bool> SharedMemoryWanted(bool wanted) {
  const char* env = std::getenv("LOOM_MPI_SHM");
  int mine = wanted && (env == nullptr || std::strcmp(env, "0") != 0) ? 1 : 0, all = 0;
  MpiGuard guard;
  if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS)
    return Internal("MPI_Allreduce of the ranks' shared-memory choice failed");
  return all == 1;
}

CommunicatorOptions DefaultMpiCommunicatorOptions() {
  return TransportDefaults(GetTransport(TransportId::kMpi));
}

StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(
    const MpiCommunicatorOptions& options) {
  LOOM_ENFORCE(options.communicator.timeout.count() > 0, "timeout must be positive");
  LOOM_ENFORCE(options.communicator.pipeline_chunk_bytes > 0, "pipeline chunk must be positive");
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, CreateMpiTransport());
  const int n = transport->nranks();
  Topology topology = Topology::Uniform(n);
  CommunicatorOptions communicator = options.communicator;
  LOOM_ASSIGN_OR_RETURN(NodeMap nodes, DetectMpiNodes());
  // auto's windows are still the MPI defaults (a caller who set them keeps them).
  const CommunicatorOptions host = DefaultMpiCommunicatorOptions();
  const bool default_windows = communicator.auto_star_max_ranks == host.auto_star_max_ranks &&
                               communicator.auto_direct_min_bytes == host.auto_direct_min_bytes &&
                               communicator.auto_direct_max_bytes == host.auto_direct_max_bytes &&
                               communicator.auto_native_min_bytes == host.auto_native_min_bytes &&
                               communicator.auto_native_max_bytes == host.auto_native_max_bytes;
  if (nodes.nodes() > 1) {
    if (!options.topology) topology = NodeTopology(nodes);
    if (default_windows) communicator = AcrossNodesMpiOptions(communicator);
    // The same number of ranks on every node, more than one: the node-hierarchical allreduce.
    const int per_node = static_cast<int>(nodes.ranks[0].size());
    bool uniform = per_node > 1;
    for (const std::vector<int>& mates : nodes.ranks)
      uniform &= static_cast<int>(mates.size()) == per_node;
    LOOM_ASSIGN_OR_RETURN(const bool wanted, SharedMemoryWanted(options.shared_memory));
    if (uniform && wanted) {
      std::string why_not;
      LOOM_ASSIGN_OR_RETURN(transport,
                            ShareNodesMemory(std::move(transport), nodes, communicator, &why_not));
      if (why_not.empty() && default_windows) {
        communicator.auto_native_min_bytes = 0;
        communicator.auto_native_max_bytes = -1;
      }
    }
  } else if (n > 1) {
    LOOM_ASSIGN_OR_RETURN(const bool wanted, SharedMemoryWanted(options.shared_memory));
    if (wanted) {
      std::string why_not;
      LOOM_ASSIGN_OR_RETURN(transport, ShareNodeMemory(std::move(transport), &why_not));
      if (why_not.empty() && default_windows) communicator = SharedMemoryMpiOptions(communicator);
    }
  }
  if (options.topology) topology = *options.topology;
  LOOM_ENFORCE(topology.size() == n, "topology '", topology.name(), "' has ", topology.size(),
               " devices for ", n, " MPI ranks");
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<const CommPlan> plan,
                        CommPlan::Create(topology, options.tree_link_penalty));
  return std::make_unique<Communicator>(std::move(transport), std::move(plan), communicator);
}

}  // namespace loom::collective
