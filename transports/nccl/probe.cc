// The CUDA device probe of communicator.h. cudaGetDeviceCount initialises the CUDA driver, and a process
// whose parent initialised CUDA before fork() cannot use CUDA; so the probe runs in a throw-away forked
// child that reports over a pipe, and the caller stays free to fork ranks afterwards.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>

#include "transports/nccl/communicator.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed::nccl {
namespace {

// A wedged driver must not wedge the caller.
constexpr std::chrono::seconds kProbeTimeout{30};

// What the child writes: one record, smaller than PIPE_BUF so that the write is atomic.
struct ProbeReply {
  int32_t error;  // cudaError_t
  int32_t count;
  char message[200];
};

Status notViable(const std::string& reason) {
  return Status::unavailable("not viable: no CUDA device (" + reason + ")");
}


[[noreturn]] void runProbeChild(int fd) {
  ProbeReply reply{};
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  reply.error = static_cast<int32_t>(error);
  reply.count = count;
  std::snprintf(reply.message, sizeof(reply.message), "%s: %s", cudaGetErrorName(error),
                cudaGetErrorString(error));
  const char* p = reinterpret_cast<const char*>(&reply);
  size_t left = sizeof(reply);
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(1);
    p += n;
    left -= static_cast<size_t>(n);
  }
  _exit(0);
}

// Reads the child's reply until EOF or the deadline. Returns the bytes read, or nullopt on timeout.
std::optional<size_t> readReply(int fd, ProbeReply& reply, Deadline deadline) {
  char* p = reinterpret_cast<char*>(&reply);
  size_t got = 0;
  while (got < sizeof(reply)) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, p + got, sizeof(reply) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child died (or failed to write)
    got += static_cast<size_t>(n);
  }
  return got;
}

std::string describeExit(int wstatus) {
  if (WIFSIGNALED(wstatus)) return "probe process killed by signal " + std::to_string(WTERMSIG(wstatus));
  if (WIFEXITED(wstatus)) return "probe process exited with status " + std::to_string(WEXITSTATUS(wstatus));
  return "probe process ended abnormally";
}

Result<int> probeDeviceCount() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return notViable(errnoText("probe: pipe2"));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const Status s = notViable(errnoText("probe: fork"));
    ::close(fds[0]);
    ::close(fds[1]);
    return s;
  }
  if (pid == 0) {
    ::close(fds[0]);
    runProbeChild(fds[1]);
  }
  ::close(fds[1]);
  ProbeReply reply{};
  const std::optional<size_t> got = readReply(fds[0], reply, deadlineIn(kProbeTimeout));
  ::close(fds[0]);
  if (!got) ::kill(pid, SIGKILL);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!got) return notViable("cudaGetDeviceCount did not return within " + std::to_string(kProbeTimeout.count()) + " s");
  if (*got != sizeof(reply)) return notViable("cudaGetDeviceCount crashed: " + describeExit(wstatus));
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.error != cudaSuccess) return notViable(std::string("cudaGetDeviceCount: ") + reply.message);
  if (reply.count <= 0) return notViable("cudaGetDeviceCount found 0 devices");
  return static_cast<int>(reply.count);
}

}  // namespace

Result<int> cudaDeviceCount() {
  static Mutex mu;
  static std::optional<Result<int>> cached CHAOSBED_GUARDED_BY(mu);
  MutexLock lock(mu);
  if (!cached) cached.emplace(probeDeviceCount());
  return *cached;
}

Status isViable() { return cudaDeviceCount().status(); }

}  // namespace chaosbed::nccl
