#include "tests/testing/command.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "transports/bootstrap/net.h"

namespace chaosbed::testing {

Command::Command(std::vector<std::string> argv) {
  // argv is built before the fork: the child of a threaded process must not allocate before exec.
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  fd_ = pipe_fds[0];
}

Command::~Command() {
  if (pid_ > 0 && !status_) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

bool Command::readSome(Deadline deadline) {
  if (fd_ < 0) return false;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  if (left <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, int(std::min<long long>(left, 1000))) <= 0) return SteadyClock::now() < deadline;
  char buf[4096];
  ssize_t n = read(fd_, buf, sizeof buf);
  if (n <= 0) {
    close(fd_);
    fd_ = -1;
    return false;
  }
  output_.append(buf, size_t(n));
  return true;
}

std::optional<std::string> Command::waitForLine(const std::string& needle, Deadline deadline) {
  for (;;) {
    size_t nl;
    while ((nl = output_.find('\n', scanned_)) != std::string::npos) {
      std::string line = output_.substr(scanned_, nl - scanned_);
      scanned_ = nl + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    if (!readSome(deadline)) {
      if (fd_ < 0 || SteadyClock::now() >= deadline) return std::nullopt;
    }
  }
}

std::optional<int> Command::wait(Deadline deadline) {
  if (!status_) {
    while (readSome(deadline)) {
    }
    // Output closed: the child is exiting. A pidfd becomes readable when it has exited.
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd < 0) return std::nullopt;
    pollfd p{pidfd, POLLIN, 0};
    int n;
    do n = poll(&p, 1, net::pollTimeoutMs(deadline)); while (n < 0 && errno == EINTR);
    close(pidfd);
    if (n != 1) return std::nullopt;
    int st = 0;
    if (waitpid(pid_, &st, 0) != pid_) return std::nullopt;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  while (readSome(deadlineIn(std::chrono::milliseconds(200)))) {
  }
  return status_;
}

void Command::signal(int sig) {
  if (pid_ > 0 && !status_) kill(pid_, sig);
}

std::string chaosbedBinary() {
#ifdef CHAOSBED_BINARY
  return CHAOSBED_BINARY;
#else
  return "build/chaosbed";
#endif
}

std::string readFile(const std::string& path) {
  // read(2), not a stream: reading /proc/<pid>/* of a process that exits meanwhile fails with ESRCH, which
  // libstdc++'s filebuf turns into an exception.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

std::string makeTempDir(const std::string& name) {
  std::string tmpl = (std::getenv("TMPDIR") ? std::string(std::getenv("TMPDIR")) : std::string("/tmp")) + "/chaosbed-" +
                     name + "-XXXXXX";
  char* dir = mkdtemp(tmpl.data());
  return dir ? std::string(dir) : std::string();
}

std::vector<pid_t> processesMentioning(const std::string& needle) {
  std::vector<pid_t> found;
  DIR* proc = opendir("/proc");
  if (!proc) return found;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    const std::string cmdline = readFile("/proc/" + std::string(e->d_name) + "/cmdline");
    if (cmdline.find(needle) == std::string::npos) continue;
    const std::string stat_line = readFile("/proc/" + std::string(e->d_name) + "/stat");
    auto close_paren = stat_line.rfind(')');
    if (close_paren != std::string::npos && close_paren + 2 < stat_line.size() && stat_line[close_paren + 2] == 'Z')
      continue;  // a zombie is not running
    found.push_back(pid_t(pid));
  }
  closedir(proc);
  return found;
}

}  // namespace chaosbed::testing
