// Status and StatusOr: how anything that depends on input (parsing, verification, I/O, shapes)
// reports failure. No exceptions cross Loom's C++ API. Where a Status cannot be returned (a
// failed LOOM_CHECK, a programmer error; an allocation that cannot be made) a StatusError is
// thrown, and the boundaries catch it and go on with its Status: Operator::Run (naming the op),
// the runner's threads, the CLI's main and the Python module. Nothing reachable from Python or
// the CLI ends the process. Thread-safety: value types, safe to copy between threads.
#pragma once

#include <exception>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace loom {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kCorruption,
  kIOError,
  kUnimplemented,
  kFailedPrecondition,
  kInternal,
  kTimeout,
  kResourceExhausted,  // out of memory, threads or another resource
  kAborted,            // a group was aborted because one of its ranks failed (not the cause)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }
  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  std::string ToString() const;
  // Returns a copy whose message is "prefix: message" (keeps the code).
  Status WithContext(const std::string& prefix) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

// Streams every argument into one string: StrCat("dims ", 3, " vs ", 4).
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

#define LOOM_DEFINE_STATUS_FACTORY(Name, Code)                            \
  template <typename... Args>                                             \
  Status Name(Args&&... args) {                                           \
    return Status(StatusCode::Code, StrCat(std::forward<Args>(args)...)); \
  }
LOOM_DEFINE_STATUS_FACTORY(InvalidArgument, kInvalidArgument)
LOOM_DEFINE_STATUS_FACTORY(NotFound, kNotFound)
LOOM_DEFINE_STATUS_FACTORY(AlreadyExists, kAlreadyExists)
LOOM_DEFINE_STATUS_FACTORY(Corruption, kCorruption)
LOOM_DEFINE_STATUS_FACTORY(IOError, kIOError)
LOOM_DEFINE_STATUS_FACTORY(Unimplemented, kUnimplemented)
LOOM_DEFINE_STATUS_FACTORY(FailedPrecondition, kFailedPrecondition)
LOOM_DEFINE_STATUS_FACTORY(Internal, kInternal)
LOOM_DEFINE_STATUS_FACTORY(ResourceExhausted, kResourceExhausted)
LOOM_DEFINE_STATUS_FACTORY(Aborted, kAborted)

// An error Status thrown where none can be returned (see the top of this file).
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

// The Status of an exception caught at a boundary: a StatusError's own, ResourceExhausted for
// std::bad_alloc and for a thread that could not be started, Internal for anything else (naming
// what was thrown).
Status StatusOfException(std::exception_ptr e);
LOOM_DEFINE_STATUS_FACTORY(Timeout, kTimeout)
#undef LOOM_DEFINE_STATUS_FACTORY

namespace internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);
Status OkStatusWithoutValue();
}  // namespace internal

// A value or the error that stands in for it. Built from an OK Status (a programming error: an
// OK result needs a value) it holds an Internal error saying so, never an empty value; reading
// the value of an error is a programming error and aborts with the error's text.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status)  // NOLINT(google-explicit-constructor): implicit by design
      : status_(status.ok() ? internal::OkStatusWithoutValue() : std::move(status)) {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return Checked(), *value_; }
  const T& value() const& { return Checked(), *value_; }
  T&& value() && { return Checked(), std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  void Checked() const {
    if (!value_) internal::CheckFailed(__FILE__, __LINE__, "StatusOr::value()", status_.ToString());
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace loom

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

#define LOOM_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::loom::Status _loom_st = (expr);    \
    if (!_loom_st.ok()) return _loom_st; \
  } while (0)

#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(_loom_so_, __LINE__), lhs, expr)

// Returns InvalidArgument(msg...) from the enclosing function when cond is false.
#define LOOM_ENFORCE(cond, ...)                               \
  do {                                                        \
    if (!(cond)) return ::loom::InvalidArgument(__VA_ARGS__); \
  } while (0)

// Programmer errors: throw StatusError(Internal) with the file, line and message (the boundaries
// report it; see the top of this file). LOOM_CHECK(cond) or LOOM_CHECK(cond, "msg ", x, ...);
// the message is built only when the check fails (C++17: no __VA_OPT__).
#define LOOM_CHECK(...) LOOM_CHECK_IMPL(__VA_ARGS__, "")
#define LOOM_CHECK_IMPL(cond, ...)                                                           \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::loom::internal::CheckFailed(__FILE__, __LINE__, #cond, ::loom::StrCat(__VA_ARGS__)); \
  } while (0)
