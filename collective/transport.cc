#include "collective/transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

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
  if (dst != src && bytes > 0) std::memmove(dst, src, bytes);
  return Status::OK();
}

Status Transport::Finalize(const Reduction& reduction, void* buf, size_t count, int nranks) {
  collective::Finalize(reduction, buf, count, nranks);
  return Status::OK();
}

std::shared_ptr<void> AllocateHostBuffer(size_t bytes) {
  void* p = std::calloc(std::max<size_t>(bytes, 1), 1);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

std::shared_ptr<void> Transport::AllocateBuffer(size_t bytes) { return AllocateHostBuffer(bytes); }

Status Transport::RunNative(const NativeCollective& call, Deadline deadline) {
  return Unimplemented("the ", name(), " transport has no native collectives");
}

Status Transport::Meet(const void*, size_t, void*, const NativeCollective*, Deadline) {
  return Unimplemented("the ", name(), " transport does not meet with signatures");
}

}  // namespace loom::collective
