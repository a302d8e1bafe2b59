#include "collective/schedule.h"

namespace loom::collective::internal {

int Schedule::Track(std::unique_ptr<Request> request) {
  requests_.push_back(std::move(request));
  done_.push_back(false);
  return static_cast<int>(requests_.size()) - 1;
}

int Schedule::PostSend(int peer, Phase phase, const void* data, size_t bytes) {
  if (bytes == 0) return -1;
  return Track(transport_->Send(peer, tag(phase), data, bytes));
}

int Schedule::PostRecv(int peer, Phase phase, void* data, size_t bytes) {
  if (bytes == 0) return -1;
  return Track(transport_->Recv(peer, tag(phase), data, bytes));
}

int Schedule::PostRecvUpTo(int peer, Phase phase, void* data, size_t bytes) {
  if (bytes == 0) return -1;
  return Track(transport_->RecvUpTo(peer, tag(phase), data, bytes));
}

int Schedule::PostRecvReduce(int peer, Phase phase, void* dst, const void* local, size_t bytes,
                             const Reduction& reduction) {
  if (bytes == 0) return -1;
  return Track(transport_->RecvReduce(peer, tag(phase), dst, local, bytes, reduction));
}

Status Schedule::Wait(int handle) {
  if (handle < 0 || done_[handle]) return Status::OK();
  LOOM_RETURN_IF_ERROR(requests_[handle]->Wait(deadline_));
  done_[handle] = true;
  return Status::OK();
}

Status Schedule::WaitAll() {
  for (size_t i = 0; i < requests_.size(); ++i) LOOM_RETURN_IF_ERROR(Wait(static_cast<int>(i)));
  return Status::OK();
}

void Schedule::CancelPending() {
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (!done_[i]) requests_[i]->Cancel();
  }
}

Ranges SplitEvenly(size_t count, int n) {
  Ranges out(n);
  const size_t base = count / n, extra = count % n;
  size_t offset = 0;
  for (int i = 0; i < n; ++i) {
    out[i].offset = offset;
    out[i].count = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    offset += out[i].count;
  }
  return out;
}

}  // namespace loom::collective::internal
