#include "core/isolation/emulated_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/isolation/command.h"

namespace chaosbed {
namespace {

constexpr double kCommandTimeoutS = 10;

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
  return inNamespace(netns_fd, [&] { return runCommand(argv, kCommandTimeoutS); });
}

std::string EmulatedHosts::address(int host) const { return "10.200.0." + std::to_string(host + 2); }

Result<std::unique_ptr<EmulatedHosts>> EmulatedHosts::create(int hosts) {
  if (hosts < 1 || hosts > kMaxHosts)
    return Status::invalidArgument("emulated hosts: " + std::to_string(hosts) + " not in 1.." + std::to_string(kMaxHosts));
  std::unique_ptr<EmulatedHosts> self(new EmulatedHosts());
  auto newNamespace = []() -> Result<net::FileDescriptor> {
    return inNamespace(-1, []() -> Result<net::FileDescriptor> {
      net::FileDescriptor fd(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) return Status::fromErrno("/proc/thread-self/ns/net");
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
    // The root for link faults between hosts (chaos/actuators/link.h adds a class per faulted peer host);
    // with default 0 every unclassified packet leaves at once, unshaped.
    CHAOSBED_RETURN_IF_ERROR(host({"tc", "qdisc", "add", "dev", kDevice, "root", "handle", "1:", "htb", "default", "0"}));
  }
  return self;
}

Result<net::FileDescriptor> EmulatedHosts::listenInFabric(net::HostPort* bound) const {
  return inNamespace(fabric_.get(), [&]() -> Result<net::FileDescriptor> {
    return net::listenTcp(net::HostPort{fabricAddress(), 0}, bound);
  });
}

}  // namespace chaosbed
