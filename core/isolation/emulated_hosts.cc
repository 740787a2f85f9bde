#include "core/isolation/emulated_hosts.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

extern char** environ;

namespace chaosbed {
namespace {

constexpr int kCommandTimeoutMs = 10000;

std::string errnoText(int err) { return std::strerror(err); }

// Runs fn on a thread of its own that has entered the network namespace `fd` (-1: a new one): a thread's
// namespace is its own, so the caller's threads never leave theirs.
template <typename Fn>
auto inNamespace(int fd, Fn fn) -> decltype(fn()) {
  decltype(fn()) result = Status::internal("unset");
  std::thread worker([&] {
    const int rc = fd < 0 ? ::unshare(CLONE_NEWNET) : ::setns(fd, CLONE_NEWNET);
    if (rc != 0) {
      const int err = errno;
      result = Status::unavailable(std::string(fd < 0 ? "unshare(CLONE_NEWNET)" : "setns(CLONE_NEWNET)") +
                                        ": " + errnoText(err) + " (emulated hosts need root)");
      return;
    }
    result = fn();
  });
  worker.join();
  return result;
}

}  // namespace

Status EmulatedHosts::runIn(int netns_fd, const std::vector<std::string>& argv) {
  return inNamespace(netns_fd, [&]() -> Status {
    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::ioError("pipe: " + errnoText(errno));
    net::FileDescriptor read_end(err_pipe[0]), write_end(err_pipe[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
    posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    write_end.reset();
    std::string command;
    for (const std::string& a : argv) command += (command.empty() ? "" : " ") + a;
    if (rc != 0) return Status::unavailable("`" + command + "`: " + errnoText(rc));
    std::string output;
    char buf[512];
    for (;;) {
      pollfd p{read_end.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, kCommandTimeoutMs);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        ::kill(pid, SIGKILL);
        output += "(no answer in 10 s; killed)";
        break;
      }
      const ssize_t n = ::read(read_end.get(), buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (output.size() < 4096) output.append(buf, size_t(n));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::ok();
    while (!output.empty() && output.back() == '\n') output.pop_back();
    return Status::unavailable("`" + command + "` failed: " + output);
  });
}

std::string EmulatedHosts::address(int host) const { return "10.200.0." + std::to_string(host + 2); }

std::string EmulatedHosts::fabricPath() const {
  return "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fabric_.get());
}

Result<std::unique_ptr<EmulatedHosts>> EmulatedHosts::create(int hosts) {
  if (hosts < 1 || hosts > kMaxHosts)
    return Status::invalidArgument("emulated hosts: " + std::to_string(hosts) + " not in 1.." + std::to_string(kMaxHosts));
  std::unique_ptr<EmulatedHosts> self(new EmulatedHosts());
  auto newNamespace = []() -> Result<net::FileDescriptor> {
    return inNamespace(-1, []() -> Result<net::FileDescriptor> {
      net::FileDescriptor fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) return Status::ioError("/proc/thread-self/ns/net: " + errnoText(errno));
      return fd;
    });
  };
  CHAOSBED_ASSIGN_OR_RETURN(self->fabric_, newNamespace());
  for (int i = 0; i < hosts; ++i) {
    CHAOSBED_ASSIGN_OR_RETURN(net::FileDescriptor fd, newNamespace());
    self->hosts_.push_back(std::move(fd));
  }
  const EmulatedHosts& h = *self;
  auto fabric = [&](std::vector<std::string> argv) { return h.runInFabric(argv).withContext("emulated hosts: fabric"); };
  CHAOSBED_RETURN_IF_ERROR(fabric({"ip", "link", "set", "lo", "up"}));
  CHAOSBED_RETURN_IF_ERROR(fabric({"ip", "link", "add", "br0", "type", "bridge"}));
  CHAOSBED_RETURN_IF_ERROR(fabric({"ip", "addr", "add", h.fabricAddress() + "/24", "dev", "br0"}));
  CHAOSBED_RETURN_IF_ERROR(fabric({"ip", "link", "set", "br0", "up"}));
  const std::string pid = std::to_string(::getpid());
  for (int i = 0; i < hosts; ++i) {
    const std::string host_path = "/proc/" + pid + "/fd/" + std::to_string(h.hostFd(i));
    CHAOSBED_RETURN_IF_ERROR(
        fabric({"ip", "link", "add", h.fabricDevice(i), "type", "veth", "peer", "name", kDevice, "netns", host_path}));
    CHAOSBED_RETURN_IF_ERROR(fabric({"ip", "link", "set", h.fabricDevice(i), "master", "br0", "up"}));
    auto host = [&](std::vector<std::string> argv) {
      return h.runInHost(i, argv).withContext("emulated hosts: host " + std::to_string(i));
    };
    CHAOSBED_RETURN_IF_ERROR(host({"ip", "link", "set", "lo", "up"}));
    CHAOSBED_RETURN_IF_ERROR(host({"ip", "addr", "add", h.address(i) + "/24", "dev", kDevice}));
    CHAOSBED_RETURN_IF_ERROR(host({"ip", "link", "set", kDevice, "up"}));
  }
  return self;
}

Result<net::FileDescriptor> EmulatedHosts::listenInFabric(net::HostPort* bound) const {
  return inNamespace(fabric_.get(), [&]() -> Result<net::FileDescriptor> {
    return net::listenTcp(net::HostPort{fabricAddress(), 0}, bound);
  });
}

}  // namespace chaosbed
