#include "collective/transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/copy.h"
#include "base/host_memory.h"

namespace loom::collective {
namespace {

// Receive into a staging buffer, reduce on successful completion.
class StagedRecvReduce final : public Request {
 public:
  StagedRecvReduce(Transport* transport, int peer, uint64_t tag, void* dst, const void* local,
                   size_t bytes, const Reduction& reduction)
      : dst_(dst), local_(local), reduction_(reduction), staging_(bytes) {
    inner_ = transport->Recv(peer, tag, staging_.data(), bytes);
  }

  Status Wait(Deadline deadline) override {
    if (reduced_) return Status::OK();
    LOOM_RETURN_IF_ERROR(inner_->Wait(deadline));
    const size_t count = staging_.size() / DataTypeSize(reduction_.dtype);
    Reduce(reduction_, dst_, local_, staging_.data(), count);
    reduced_ = true;
    return Status::OK();
  }

  void Cancel() override { inner_->Cancel(); }

 private:
  void* dst_;
  const void* local_;
  Reduction reduction_;
  std::vector<unsigned char> staging_;
  std::unique_ptr<Request> inner_;
  bool reduced_ = false;
};

}  // namespace

Status Transport::TaggedRound(uint32_t, TaggedPeer*, Deadline) {
  return Unimplemented("the ", name(), " transport has no tagged signature channel");
}

std::unique_ptr<Request> Transport::RecvReduce(int peer, uint64_t tag, void* dst, const void* local,
                                               size_t bytes, const Reduction& reduction) {
  return std::make_unique<StagedRecvReduce>(this, peer, tag, dst, local, bytes, reduction);
}

Status Transport::Copy(void* dst, const void* src, size_t bytes) {
  CopyBytes(dst, src, bytes);
  return Status::OK();
}

Status Transport::Finalize(const Reduction& reduction, void* buf, size_t count, int nranks) {
  collective::Finalize(reduction, buf, count, nranks);
  return Status::OK();
}

std::shared_ptr<void> AllocateHostBuffer(size_t bytes) {
  if (bytes >= kHugeHostBlockBytes && HugeHostBlocks()) {
    void* p = AllocateHugeHostBlock(bytes);  // zeroed by the kernel
    if (p == nullptr) return nullptr;
    return std::shared_ptr<void>(p, [bytes](void* q) { FreeHugeHostBlock(q, bytes); });
  }
  // On a cache line: zeroed lazily by calloc (fresh pages of a large block stay untouched until
  // used), the block start moved up to the next 64 bytes. Two buffers whose starts differ by a
  // multiple of 64 never fall in the copy slow band that CopyBytes steers around (base/copy.h),
  // as malloc's 16-byte headers put consecutive page-multiple blocks.
  constexpr size_t kLine = 64;
  void* block = std::calloc(std::max<size_t>(bytes, 1) + kLine, 1);
  if (block == nullptr) return nullptr;
  const uintptr_t at = (reinterpret_cast<uintptr_t>(block) + kLine - 1) & ~uintptr_t{kLine - 1};
  return std::shared_ptr<void>(reinterpret_cast<void*>(at), [block](void*) { std::free(block); });
}

std::shared_ptr<void> Transport::AllocateBuffer(size_t bytes) { return AllocateHostBuffer(bytes); }

struct Transport::ScratchPool {
  std::mutex mu;
  std::vector<std::pair<size_t, std::shared_ptr<void>>> idle;  // (bytes, buffer)
  size_t idle_bytes = 0;
};

std::shared_ptr<Transport::ScratchPool> Transport::NewScratchPool() {
  return std::make_shared<ScratchPool>();
}

std::shared_ptr<void> Transport::ScratchBuffer(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  std::shared_ptr<void> buffer;
  size_t capacity = 0;
  {
    std::lock_guard<std::mutex> lock(scratch_pool_->mu);
    auto& idle = scratch_pool_->idle;
    auto best = idle.end();
    for (auto it = idle.begin(); it != idle.end(); ++it) {
      if (it->first >= bytes && (best == idle.end() || it->first < best->first)) best = it;
    }
    if (best != idle.end()) {
      capacity = best->first;
      buffer = std::move(best->second);
      scratch_pool_->idle_bytes -= capacity;
      idle.erase(best);
    }
  }
  if (buffer == nullptr) {
    buffer = AllocateBuffer(bytes);
    if (buffer == nullptr) return nullptr;
    capacity = bytes;
  }
  void* data = buffer.get();
  std::weak_ptr<ScratchPool> home = scratch_pool_;
  return std::shared_ptr<void>(data, [home, buffer, capacity](void*) mutable {
    std::shared_ptr<ScratchPool> pool = home.lock();
    if (pool == nullptr || capacity > kIdleScratchBytes) return;  // freed with the capture
    std::vector<std::shared_ptr<void>> evicted;                   // freed outside the lock
    std::lock_guard<std::mutex> lock(pool->mu);
    pool->idle.emplace_back(capacity, std::move(buffer));
    pool->idle_bytes += capacity;
    // Keep the largest: they serve every smaller request.
    std::sort(pool->idle.begin(), pool->idle.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    while (pool->idle.size() > kIdleScratchBuffers || pool->idle_bytes > kIdleScratchBytes) {
      pool->idle_bytes -= pool->idle.back().first;
      evicted.push_back(std::move(pool->idle.back().second));
      pool->idle.pop_back();
    }
  });
}

Status Transport::RunNative(const NativeCollective& call, Deadline deadline) {
  return Unimplemented("the ", name(), " transport has no native collectives");
}

Status Transport::Meet(const void*, size_t, void*, const NativeCollective*, Deadline) {
  return Unimplemented("the ", name(), " transport does not meet with signatures");
}

}  // namespace loom::collective
