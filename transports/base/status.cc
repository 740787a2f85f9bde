#include "transports/base/status.h"

#include <cerrno>
#include <cstring>

namespace chaosbed {

const char* statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kPeerLost: return "PeerLost";
    case StatusCode::kTimeout: return "Timeout";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kIoError: return "IoError";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string errnoText(int err) {
  char buf[256];
  // GNU strerror_r: returns the message, in buf or a static string.
  return ::strerror_r(err, buf, sizeof buf);
}

std::string errnoText(const char* what) { return std::string(what) + ": " + errnoText(errno); }

Status Status::fromErrno(const std::string& what, int err) { return ioError(what + ": " + errnoText(err)); }

std::string Status::toString() const {
  if (isOk()) return "OK";
  std::string s = statusCodeName(code_);
  if (peer_ >= 0) s += "(rank " + std::to_string(peer_) + ")";
  if (!message_.empty()) s += ": " + message_;
  return s;
}

Status Status::withContext(const std::string& context) const {
  if (isOk()) return *this;
  Status s = *this;
  s.message_ = context + ": " + message_;
  return s;
}

}  // namespace chaosbed
