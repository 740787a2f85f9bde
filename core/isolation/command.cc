#include "core/isolation/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace chaosbed {

Status runCommand(const std::vector<std::string>& argv, double timeout_s, const std::vector<std::string>& ok_stderr,
                  std::string* out) {
  std::string cmdline;
  for (const std::string& a : argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::fromErrno(cmdline + ": pipe");
  int out_pipe[2] = {-1, -1};
  if (out && ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Status::fromErrno(cmdline + ": pipe");
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {err_pipe[0], err_pipe[1], out_pipe[0], out_pipe[1]})
      if (fd >= 0) ::close(fd);
    return Status::fromErrno(cmdline + ": fork");
  }
  if (pid == 0) {
    restoreDefaultSignals();
    ::dup2(err_pipe[1], 2);
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::dup2(devnull, 1);
    }
    if (out_pipe[1] >= 0) ::dup2(out_pipe[1], 1);
    ::execvp(args[0], args.data());
    const char* msg = "exec failed: ";
    (void)!::write(2, msg, std::strlen(msg));
    (void)!::write(2, std::strerror(errno), std::strlen(std::strerror(errno)));
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  if (out_pipe[1] >= 0) ::close(out_pipe[1]);
  std::string err;
  // Read both pipes until both reach EOF (the child and whatever it left holding them have exited).
  pollfd fds[2] = {{err_pipe[0], POLLIN, 0}, {out_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&err, out};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n <= 0) continue;  // EINTR, or the deadline: checked above
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[512];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative descriptors
        continue;
      }
      sinks[i]->append(buf, static_cast<size_t>(got));
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (timed_out) return Status::timeout(cmdline + ": no exit within " + std::to_string(timeout_s) + " s");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
  for (const std::string& s : ok_stderr)
    if (err.find(s) != std::string::npos) return Status::ok();
  return Status::ioError(cmdline + ": exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)) +
                         (err.empty() ? "" : ": " + err));
}

void restoreDefaultSignals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
}

}  // namespace chaosbed
