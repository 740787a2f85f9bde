#include "tests/testing/multiprocess.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "transports/bootstrap/net.h"
#include "transports/ucx/transport.h"

namespace chaosbed::testing {
namespace {

constexpr int kChildReportFd = 3;
constexpr int kExitStoreUnavailable = 100;

int exitCodeOf(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return -1;
}

}  // namespace

Store& ChildContext::store() {
  if (!store_) {
    auto s = connectStore(store_address_, secret_, deadlineIn(std::chrono::seconds(10)));
    if (!s.isOk()) {
      report("FAIL store: " + s.status().toString());
      _exit(kExitStoreUnavailable);
    }
    store_ = std::move(s).value();
  }
  return *store_;
}

void ChildContext::report(const std::string& line) const {
  std::string out = line;
  for (char& ch : out)
    if (ch == '\n') ch = ' ';
  out.push_back('\n');
  // A write below PIPE_BUF is atomic; the parent reads whole lines.
  ssize_t n;
  do n = ::write(report_fd_, out.data(), out.size()); while (n < 0 && errno == EINTR);
}

int ChildContext::fail(const std::string& why) const {
  report("FAIL " + why);
  return 1;
}

MultiProcess::MultiProcess() {
  // The StoreServer runs in a process of its own, so that this process stays single-threaded and every
  // rank is forked from a process whose locks no other thread can hold (a child forked while another thread
  // holds, say, UCX's memory-hook lock waits for it forever).
  int fds[2];
  PCHECK(::pipe2(fds, O_CLOEXEC) == 0) << "multiprocess fixture: pipe2";
  const pid_t parent = ::getpid();
  store_pid_ = ::fork();
  PCHECK(store_pid_ >= 0) << "multiprocess fixture: fork";
  if (store_pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);
    ::close(fds[0]);
    auto server = startStoreServer("127.0.0.1:0", secret_);
    const std::string line = server.isOk() ? (*server)->address() + "\n" : "FAIL " + server.status().toString() + "\n";
    ssize_t n;
    do n = ::write(fds[1], line.data(), line.size()); while (n < 0 && errno == EINTR);
    ::close(fds[1]);
    if (!server.isOk()) _exit(1);
    for (;;) ::pause();  // serves until the fixture kills it
  }
  ::close(fds[1]);
  std::string line;
  char ch;
  for (;;) {
    ssize_t n = ::read(fds[0], &ch, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || ch == '\n') break;
    line.push_back(ch);
  }
  ::close(fds[0]);
  CHECK(!line.empty() && line.rfind("FAIL ", 0) != 0) << "multiprocess fixture: store server: " << line;
  store_address_ = line;
}

MultiProcess::~MultiProcess() {
  for (Child& c : children_) {
    if (c.pid > 0) {
      ::kill(c.pid, SIGCONT);  // a stopped process must be able to die and be reaped
      ::kill(c.pid, SIGKILL);
      int ws;
      while (::waitpid(c.pid, &ws, 0) < 0 && errno == EINTR) {
      }
      c.pid = -1;
    }
    closeChild(c);
  }
  store_.reset();
  if (store_pid_ > 0) {
    ::kill(store_pid_, SIGKILL);
    while (::waitpid(store_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

Store& MultiProcess::store() {
  if (!store_) {
    auto s = connectStore(store_address_, secret_, deadlineIn(std::chrono::seconds(10)));
    CHECK(s.isOk()) << "multiprocess fixture: " << s.status().toString();
    store_ = std::move(s).value();
  }
  return *store_;
}

MultiProcess::Child& MultiProcess::child(int rank) {
  CHECK(rank >= 0 && static_cast<size_t>(rank) < children_.size()) << "no child of rank " << rank;
  return children_[rank];
}

const std::vector<std::string>& MultiProcess::reports(int rank) const { return children_.at(rank).lines; }

pid_t MultiProcess::pid(int rank) const { return children_.at(rank).pid; }

Status MultiProcess::spawnAll(int size, const ChildFunction& fn) {
  for (int r = 0; r < size; ++r) CHAOSBED_RETURN_IF_ERROR(spawn(r, size, fn));
  return Status::ok();
}

Status MultiProcess::spawn(int rank, int size, const ChildFunction& fn) {
  if (rank < 0 || rank >= size) return Status::invalidArgument("spawn: rank " + std::to_string(rank) + " not in 0.." + std::to_string(size - 1));
  if (children_.size() < static_cast<size_t>(size)) children_.resize(size);
  Child& c = children_[rank];
  if (c.pid > 0) return Status::invalidArgument("spawn: rank " + std::to_string(rank) + " still has a process (reap it with waitExit first)");
  closeChild(c);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::ioError(std::string("pipe2: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const int incarnation = c.incarnation + 1;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::ioError(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);  // the parent died before prctl took effect
    // Keep only stdio and the report pipe (at fd 3): other ranks' pipes and the parent's sockets must not
    // be held open by this child, or their EOFs would never be seen.
    if (fds[1] != kChildReportFd) {
      ::dup2(fds[1], kChildReportFd);
    } else {
      ::fcntl(kChildReportFd, F_SETFD, 0);
    }
    ::syscall(SYS_close_range, kChildReportFd + 1, ~0U, 0);
    ChildContext ctx(rank, size, incarnation, store_address_, secret_, kChildReportFd);
    int code = fn(ctx);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);  // no atexit handlers or static destructors of the parent's copy
  }
  ::close(fds[1]);
  c.pid = pid;
  c.pipe_fd = fds[0];
  c.incarnation = incarnation;
  c.partial.clear();
  c.lines.clear();
  c.consumed = 0;
  c.eof = false;
  int flags = ::fcntl(c.pipe_fd, F_GETFL, 0);
  ::fcntl(c.pipe_fd, F_SETFL, flags | O_NONBLOCK);
  return Status::ok();
}

void MultiProcess::readAvailable(Child& c) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(c.pipe_fd, buf, sizeof(buf));
    if (n > 0) {
      c.partial.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = c.partial.find('\n')) != std::string::npos) {
        c.lines.push_back(c.partial.substr(0, nl));
        c.partial.erase(0, nl + 1);
      }
      continue;
    }
    if (n == 0) c.eof = true;
    return;  // EOF, EAGAIN or an error
  }
}

void MultiProcess::closeChild(Child& c) {
  if (c.pipe_fd >= 0) ::close(c.pipe_fd);
  c.pipe_fd = -1;
}

Result<std::string> MultiProcess::waitFor(int rank, const std::string& prefix, Deadline deadline) {
  Child& c = child(rank);
  if (c.pipe_fd < 0) return Status::invalidArgument("waitFor: rank " + std::to_string(rank) + " was never spawned");
  for (;;) {
    readAvailable(c);
    for (size_t i = c.consumed; i < c.lines.size(); ++i) {
      if (c.lines[i].rfind(prefix, 0) == 0) {
        c.consumed = i + 1;
        return c.lines[i];
      }
    }
    std::string seen = c.lines.empty() ? "nothing" : "last '" + c.lines.back() + "'";
    if (c.eof)
      return Status::unavailable("rank " + std::to_string(rank) + " closed its report pipe before reporting '" +
                                 prefix + "' (reported " + seen + ")");
    if (SteadyClock::now() >= deadline)
      return Status::timeout("rank " + std::to_string(rank) + " did not report '" + prefix +
                             "' before the deadline (reported " + seen + ")");
    pollfd p{c.pipe_fd, POLLIN, 0};
    ::poll(&p, 1, net::pollTimeoutMs(deadline));
  }
}

Status MultiProcess::signal(int rank, int sig) {
  Child& c = child(rank);
  if (c.pid <= 0) return Status::invalidArgument("signal: rank " + std::to_string(rank) + " has no running process");
  if (::kill(c.pid, sig) != 0) return Status::ioError(std::string("kill: ") + std::strerror(errno));
  if (sig == SIGSTOP || sig == SIGCONT) {
    // Block until the state change is visible (SIGSTOP cannot be caught, so this is prompt); WNOWAIT
    // leaves an exit to be reaped by waitExit.
    siginfo_t info;
    int options = (sig == SIGSTOP ? WSTOPPED : WCONTINUED) | WEXITED | WNOWAIT;
    while (::waitid(P_PID, c.pid, &info, options) != 0) {
      if (errno != EINTR) return Status::ioError(std::string("waitid: ") + std::strerror(errno));
    }
  }
  return Status::ok();
}

Result<int> MultiProcess::waitExit(int rank, Deadline deadline) {
  Child& c = child(rank);
  if (c.pid <= 0) return Status::invalidArgument("waitExit: rank " + std::to_string(rank) + " has no running process");
  // A pidfd becomes readable when the process exits: poll it with the deadline instead of sleeping.
  net::FileDescriptor pidfd(static_cast<int>(::syscall(SYS_pidfd_open, c.pid, 0)));
  if (!pidfd.valid()) return Status::ioError(std::string("pidfd_open: ") + std::strerror(errno));
  for (;;) {
    pollfd p{pidfd.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, net::pollTimeoutMs(deadline));
    if (rc > 0) break;
    if (rc == 0) return Status::timeout("rank " + std::to_string(rank) + " (pid " + std::to_string(c.pid) + ") did not exit before the deadline");
  }
  int ws = 0;
  while (::waitpid(c.pid, &ws, 0) < 0) {
    if (errno != EINTR) return Status::ioError(std::string("waitpid: ") + std::strerror(errno));
  }
  c.pid = -1;
  readAvailable(c);  // keep the last reports for diagnostics
  return exitCodeOf(ws);
}

Status MultiProcess::waitAllExit(Deadline deadline, std::vector<int>* codes) {
  if (codes) codes->assign(children_.size(), -1);
  for (size_t r = 0; r < children_.size(); ++r) {
    if (children_[r].pid <= 0) continue;
    auto code = waitExit(static_cast<int>(r), deadline);
    if (!code.isOk()) return code.status();
    if (codes) (*codes)[r] = *code;
  }
  return Status::ok();
}

std::unique_ptr<Transport> ucxTransport(ChildContext& c, const std::string& prefix) {
  UcxOptions o;
  o.rank = c.rank();
  o.size = c.size();
  o.secret = c.secret();
  o.prefix = prefix;
  o.connect_timeout = std::chrono::seconds(20);
  auto t = createUcxTransport(c.store(), o);
  if (!t.isOk()) {
    c.report("FAIL create: " + t.status().toString());
    _exit(2);
  }
  return std::move(t).value();
}

}  // namespace chaosbed::testing
