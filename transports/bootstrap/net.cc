#include "transports/bootstrap/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

namespace chaosbed::net {
namespace {

Result<sockaddr_in> resolve(const HostPort& hp) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(hp.port);
  if (inet_pton(AF_INET, hp.host.c_str(), &sa.sin_addr) == 1) return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(hp.host.c_str(), nullptr, &hints, &res); rc != 0 || res == nullptr)
    return Status::invalidArgument("cannot resolve host '" + hp.host + "': " + gai_strerror(rc));
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  freeaddrinfo(res);
  return sa;
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) reset(std::exchange(other.fd_, -1));
  return *this;
}

void FileDescriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<HostPort> parseHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return Status::invalidArgument("address '" + address + "': expected host:port");
  std::string port_text = address.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || port < 0 || port > 65535)
    return Status::invalidArgument("address '" + address + "': port '" + port_text + "' is not in 0..65535");
  return HostPort{address.substr(0, colon), static_cast<uint16_t>(port)};
}

namespace {

bool isLoopback4(const in_addr& a) { return (ntohl(a.s_addr) >> 24) == 127; }
bool isLoopback6(const in6_addr& a) {
  return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
}

}  // namespace

bool isLoopbackAddress(const sockaddr* address) {
  if (address == nullptr) return false;
  if (address->sa_family == AF_INET) {
    sockaddr_in a;
    std::memcpy(&a, address, sizeof a);
    return isLoopback4(a.sin_addr);
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 a;
    std::memcpy(&a, address, sizeof a);
    return isLoopback6(a.sin6_addr);
  }
  return false;
}

bool isLoopbackHost(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return isLoopback4(v4);
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) return isLoopback6(v6);
  return false;  // a name other than localhost: it may resolve anywhere
}

Result<FileDescriptor> listenTcp(const HostPort& where, HostPort* bound) {
  CHAOSBED_ASSIGN_OR_RETURN(sockaddr_in sa, resolve(where));
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return Status::fromErrno("socket");
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0)
    return Status::unavailable("listen on " + where.toString() + ": " + errnoText("bind"));
  // The longest accept queue the kernel allows (net.core.somaxconn caps it): hundreds of nodes connect at
  // the same instant (the start of training). With 128, the queue overflowed; the kernel then completes a
  // client's handshake by SYN cookie and drops it, and the client waits for a greeting that never comes.
  if (::listen(fd.get(), SOMAXCONN) != 0) return Status::fromErrno("listen on " + where.toString() + ": listen");
  if (bound != nullptr) {
    sockaddr_in actual{};
    socklen_t len = sizeof(actual);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&actual), &len);
    bound->host = where.host;
    bound->port = ntohs(actual.sin_port);
  }
  return fd;
}

Result<FileDescriptor> connectTcp(const HostPort& to, Deadline deadline, bool retry) {
  CHAOSBED_ASSIGN_OR_RETURN(sockaddr_in sa, resolve(to));
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return Status::fromErrno("socket");
    int one = 1;
    setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd.get(), POLLOUT, 0};
        int rc;
        do rc = ::poll(&p, 1, pollTimeoutMs(deadline)); while (rc < 0 && errno == EINTR);
        if (rc == 0) return Status::timeout("connect to " + to.toString() + ": deadline passed");
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err == 0) return fd;
    if (!retry || (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT))
      return Status::unavailable("connect to " + to.toString() + ": " + std::strerror(err));
    // The server may not be listening yet: back off (bounded by the deadline) and try again.
    if (SteadyClock::now() + backoff >= deadline)
      return Status::timeout("connect to " + to.toString() + ": " + std::strerror(err) + " until the deadline");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

Result<FileDescriptor> acceptTcp(int listen_fd) {
  int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return FileDescriptor();
    return Status::fromErrno("accept");
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return FileDescriptor(fd);
}

Status writeAll(int fd, std::span<const std::byte> data, Deadline deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
      if (rc == 0) return Status::timeout("send: deadline passed");
      continue;
    }
    return Status::unavailable(errnoText("send"));
  }
  return Status::ok();
}

Status readAll(int fd, std::span<std::byte> data, Deadline deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::recv(fd, data.data() + done, data.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::unavailable("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLIN, 0};
      int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
      if (rc == 0) return Status::timeout("receive: deadline passed");
      continue;
    }
    return Status::unavailable(errnoText("recv"));
  }
  return Status::ok();
}

int pollTimeoutMs(Deadline deadline) {
  auto left = deadline - SteadyClock::now();
  if (left <= SteadyClock::duration::zero()) return 0;
  // Round up so that a poll never returns just before the deadline and spins.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void appendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void appendU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t loadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t loadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace chaosbed::net
