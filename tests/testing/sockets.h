#pragma once
// The IP sockets processes hold, read from /proc: every descriptor of /proc/<pid>/fd that is a socket
// ("socket:[inode]") is matched by inode with the TCP and UDP tables (IPv4 and IPv6) of that process's
// network namespace (/proc/<pid>/net/{tcp,tcp6,udp,udp6}). Other sockets (Unix, netlink) are not listed.
// A process that exits while it is read is skipped, not an error. Linux only; no privileges needed for
// processes of the same user.

#include <sys/types.h>

#include <string>
#include <vector>

namespace chaosbed::testing {

struct IpSocket {
  pid_t pid = 0;
  std::string proto;   // tcp, tcp6, udp, udp6
  std::string local;   // "127.0.0.1:40123", "[::1]:80", "0.0.0.0:9464"
  int port = 0;        // local port; 0: not bound
  bool loopback = false;   // the local address is 127.0.0.0/8, ::1 or ::ffff:127.x.x.x
  bool listening = false;  // TCP in LISTEN, or a bound UDP socket (UDP has no listen state)
  std::string toString() const;  // "pid 123 tcp 127.0.0.1:40123 LISTEN"
};

// `root` and every process descended from it (by parent pid), root first.
std::vector<pid_t> processTree(pid_t root);

// The TCP and UDP sockets that the processes hold (a socket shared by several appears once per process).
std::vector<IpSocket> ipSocketsOf(const std::vector<pid_t>& pids);

// The program a process runs (the target of /proc/<pid>/exe), or "" when it cannot be read.
std::string executableOf(pid_t pid);

}  // namespace chaosbed::testing
