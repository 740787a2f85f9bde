#include "chaos/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "chaos/clock.h"

#include <glog/logging.h>

namespace chaosbed::chaos {

Result<std::unique_ptr<EventLog>> EventLog::open(const std::string& path) {
  // O_NOFOLLOW: a symlink planted where the log goes is refused, never written through (we run as root).
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::fromErrno(path + ": cannot open event log");
  return std::unique_ptr<EventLog>(new EventLog(fd, path));
}

EventLog::~EventLog() { ::close(fd_); }

Status EventLog::append(nlohmann::json event) {
  if (!event.contains("mono_ns")) event["mono_ns"] = realClock().monotonicNs();
  if (!event.contains("wall_ns")) event["wall_ns"] = realClock().wallNs();
  // A message may carry bytes that are not UTF-8 (a file name in an error): replaced, so the dump never throws.
  const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> l(mu_);
  // A line is appended whole or not at all: a short write (a full disk) is cut back to where it began, so
  // that every line a reader finds parses.
  const off_t start = ::lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      if (done > 0 && start >= 0) (void)!::ftruncate(fd_, start);
      return Status::fromErrno(path_ + ": append", err);
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

void EventLog::record(nlohmann::json event) {
  const std::string type = event.value("type", "");
  if (Status s = append(std::move(event)); !s.isOk()) {
    if (!streak_.exchange(true)) LOG(WARNING) << "event " << type << " not recorded: " << s.toString();
  } else {
    streak_.store(false);
  }
}

}  // namespace chaosbed::chaos
