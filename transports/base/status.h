#pragma once
// Status and Result<T>: the error type of every chaosbed library (LevelDB/Abseil style). No exception
// crosses a library boundary. A PeerLost status names the lost rank so that collectives and strategies can
// report which member failed.

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace chaosbed {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // bad input from a user or a caller
  kNotFound,
  kPeerLost,         // a peer died or was declared dead; sticky for that peer until it is replaced
  kTimeout,          // a deadline passed (a paused peer looks like this)
  kCancelled,        // the operation was cancelled locally (shutdown, abort)
  kAborted,          // a collective or protocol step was aborted because another member failed
  kUnavailable,      // a resource or actuator is not available on this machine
  kDataLoss,         // corrupt or truncated data (checksum mismatch, short file)
  kIoError,
  kInternal,
};

const char* statusCodeName(StatusCode code);

// The text of an errno value (strerror's, without its shared buffer).
std::string errnoText(int err);
// "what: <the text of errno>", for the call that just failed and set errno.
std::string errnoText(const char* what);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK

  static Status ok() { return Status(); }
  static Status invalidArgument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status notFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status peerLost(int rank, std::string msg) { return {StatusCode::kPeerLost, std::move(msg), rank}; }
  static Status timeout(std::string msg) { return {StatusCode::kTimeout, std::move(msg)}; }
  static Status cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
  static Status aborted(std::string msg, int rank = -1) { return {StatusCode::kAborted, std::move(msg), rank}; }
  static Status unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status dataLoss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
  static Status ioError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  // IoError "what: <the text of err>", for a system call that just failed (err defaults to its errno).
  static Status fromErrno(const std::string& what, int err = errno);
  static Status internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool isOk() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The rank this status is about (PeerLost, Aborted by a lost member), or -1.
  int peer() const { return peer_; }

  // "PeerLost(rank 2): ucx: connection reset" — for logs and error messages.
  std::string toString() const;
  // The same status with context prepended to the message: "allreduce: " + message.
  Status withContext(const std::string& context) const;

  bool operator==(const Status& other) const = default;

 private:
  Status(StatusCode code, std::string msg, int peer = -1) : code_(code), message_(std::move(msg)), peer_(peer) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int peer_ = -1;
};

// A value or the Status that explains its absence.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}            // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}     // NOLINT(google-explicit-constructor)

  bool isOk() const { return v_.index() == 0; }
  explicit operator bool() const { return isOk(); }
  const Status& status() const {
    static const Status kOk;
    return isOk() ? kOk : std::get<1>(v_);
  }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace chaosbed

#define CHAOSBED_CONCAT_INNER(a, b) a##b
#define CHAOSBED_CONCAT(a, b) CHAOSBED_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when it is not OK.
#define CHAOSBED_RETURN_IF_ERROR(expr)                  \
  do {                                                  \
    ::chaosbed::Status chaosbed_status_ = (expr);       \
    if (!chaosbed_status_.isOk()) return chaosbed_status_; \
  } while (0)

// `CHAOSBED_ASSIGN_OR_RETURN(auto x, makeX());` — declares x from a Result or returns its status.
#define CHAOSBED_ASSIGN_OR_RETURN(lhs, expr) \
  CHAOSBED_ASSIGN_OR_RETURN_IMPL(CHAOSBED_CONCAT(chaosbed_result_, __LINE__), lhs, expr)
#define CHAOSBED_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.isOk()) return tmp.status();                \
  lhs = std::move(tmp).value()
