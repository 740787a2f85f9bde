#pragma once
// Small TCP helpers shared by the bootstrap store and the UCX control mesh. Every call that can block takes
// a deadline and turns its expiry into Timeout; sockets are returned as owned descriptors (FileDescriptor)
// and are created close-on-exec. Errors name the address and the system call that failed.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "transports/base/status.h"
#include "transports/transport.h"

struct sockaddr;

namespace chaosbed::net {

// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string toString() const { return host + ":" + std::to_string(port); }
};

// Parses "host:port" (IPv4 literal or a resolvable name; port 0..65535). InvalidArgument names the input.
Result<HostPort> parseHostPort(const std::string& address);

// Whether `host` (the host part of "host:port": a name, an IPv4 literal, or an IPv6 literal with or without
// brackets) names loopback by itself, without asking a resolver: 127.0.0.0/8, ::1, ::ffff:127.x.x.x or
// "localhost". Every other name, and the wildcards 0.0.0.0 and ::, count as not loopback.
bool isLoopbackHost(const std::string& host);
// Whether a resolved socket address (AF_INET or AF_INET6) is a loopback address; false for other families.
bool isLoopbackAddress(const sockaddr* address);

// A listening, non-blocking TCP socket bound to host:port (port 0 lets the kernel choose); `bound` receives
// the actual address.
Result<FileDescriptor> listenTcp(const HostPort& where, HostPort* bound);
// Connects (blocking mode afterwards is off: the socket is non-blocking, TCP_NODELAY set). Retries refused
// connections until the deadline when `retry` is true (the server may not be up yet).
Result<FileDescriptor> connectTcp(const HostPort& to, Deadline deadline, bool retry);
// Accepts one pending connection of a listening socket: an invalid descriptor when none is pending.
Result<FileDescriptor> acceptTcp(int listen_fd);

// Writes or reads exactly data.size() bytes on a non-blocking socket, polling until the deadline.
// EOF while reading is Unavailable ("connection closed by peer").
Status writeAll(int fd, std::span<const std::byte> data, Deadline deadline);
Status readAll(int fd, std::span<std::byte> data, Deadline deadline);

// Milliseconds from now until the deadline, clamped to [0, INT_MAX] for poll().
int pollTimeoutMs(Deadline deadline);

// Little-endian fixed-width encoding helpers for the wire formats.
void appendU32(std::string& out, uint32_t v);
void appendU64(std::string& out, uint64_t v);
uint32_t loadU32(const char* p);
uint64_t loadU64(const char* p);

}  // namespace chaosbed::net
