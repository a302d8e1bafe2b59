#include "base/status.h"

#include <cstdio>
#include <cstdlib>
#include <system_error>

namespace loom {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kAborted: return "Aborted";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<State>(State{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return StrCat(StatusCodeName(state_->code), ": ", state_->message);
}

Status Status::WithContext(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(state_->code, prefix + ": " + state_->message);
}

namespace internal {
Status OkStatusWithoutValue() {
  return Status(StatusCode::kInternal, "a StatusOr was built from an OK Status without a value");
}

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  throw StatusError(Internal("internal check failed at ", file, ":", line, ": ", cond, " ", msg));
}
}  // namespace internal

Status StatusOfException(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const StatusError& s) {
    return s.status();
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory");
  } catch (const std::system_error& x) {
    // A thread that could not be started (EAGAIN), and the like.
    if (x.code() == std::errc::resource_unavailable_try_again ||
        x.code() == std::errc::not_enough_memory)
      return ResourceExhausted(x.what());
    return Internal("unexpected exception: ", x.what());
  } catch (const std::exception& x) {
    return Internal("unexpected exception: ", x.what());
  } catch (...) {
    return Internal("unexpected exception of an unknown type");
  }
  return Internal("no exception");
}

}  // namespace loom
