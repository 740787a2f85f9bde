#pragma once
// EmulatedHosts: N hosts on this machine (cluster.hosts: {netns: N}), each a network namespace with its own
// address, joined by a bridge in a namespace of its own, the fabric.
//
// Layout
// - fabric: bridge "br0" with 10.200.0.1/24 and lo, up; for each host i the veth end "h<i>", a port of br0.
// - host i: the other veth end "eth0" with 10.200.0.<i+2>/24, and lo, up; eth0's root qdisc is htb 1: with
//   default 0 (nothing classified: every packet leaves unshaped), to which link faults add classes.
// Nothing of it lives in the caller's namespace, and the namespaces have no name under /run/netns and no
// holder process: this object holds them by file descriptor. When it is destroyed, or its process dies in
// any way (SIGKILL included), and the nodes placed in them have exited (they die with the launcher,
// PR_SET_PDEATHSIG), the kernel frees every namespace with its devices, addresses and qdiscs. Nothing is
// left to heal. The addresses are the same in every run: each run's fabric is private to it.
//
// Contract
// - create() needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's `ip` and `tc`; errors name the step and the
//   command's stderr.
// - hostFd(i) is for setns(2) in a child before it execs (NodeSpec::net_namespace_fd).
// - listenInFabric() returns a TCP listener on the fabric's address, for a server every host must reach (the
//   controller's store); the socket stays in the fabric namespace, whichever thread serves it.
// - Thread safety: const methods may be called from any thread.

#include <memory>
#include <string>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/base/status.h"

namespace chaosbed {

class EmulatedHosts {
 public:
  static constexpr int kMaxHosts = 64;
  static constexpr const char* kDevice = "eth0";  // each host's device, inside its namespace

  static Result<std::unique_ptr<EmulatedHosts>> create(int hosts);

  int size() const { return static_cast<int>(hosts_.size()); }
  std::string address(int host) const;  // "10.200.0.<host+2>"
  std::string fabricAddress() const { return "10.200.0.1"; }
  int hostFd(int host) const { return hosts_.at(size_t(host)).get(); }
  // The fabric end of its veth. (Appending, not "h" + to_string(): GCC 12 warns of a false -Wrestrict there.)
  std::string fabricDevice(int host) const { return std::string("h").append(std::to_string(host)); }
  // Runs argv (argv[0] looked up in PATH, runCommand) inside the fabric's namespace, or a host's.
  Status runInFabric(const std::vector<std::string>& argv) const { return runIn(fabric_.get(), argv); }
  Status runInHost(int host, const std::vector<std::string>& argv) const { return runIn(hostFd(host), argv); }
  Result<net::FileDescriptor> listenInFabric(net::HostPort* bound) const;

 private:
  EmulatedHosts() = default;
  static Status runIn(int netns_fd, const std::vector<std::string>& argv);

  net::FileDescriptor fabric_;
  std::vector<net::FileDescriptor> hosts_;
};

}  // namespace chaosbed
