#include "core/metrics/prometheus_http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <thread>

namespace chaosbed {

namespace {

constexpr auto kRequestDeadline = std::chrono::seconds(5);
constexpr size_t kMaxRequestBytes = 16 * 1024;

int msUntil(std::chrono::steady_clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return ms < 0 ? 0 : int(ms);
}

}  // namespace

Status parseHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return Status::invalidArgument("address '" + address + "': expected host:port, e.g. 127.0.0.1:9464");
  *host = address.substr(0, colon);
  const std::string p = address.substr(colon + 1);
  auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), *port);
  if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || *port < 0 || *port > 65535)
    return Status::invalidArgument("address '" + address + "': port '" + p + "' is not a number 0..65535");
  return Status::ok();
}

// Nice value of the serving thread (lower is more CPU weight and earlier wake-up).
constexpr int kServeNice = -10;

class HttpMetricsServer::Impl {
 public:
  Impl(int listen_fd, int wake_read, int wake_write, std::string address, std::string path,
       std::function<std::string()> render)
      : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), address_(std::move(address)),
        path_(std::move(path)), render_(std::move(render)), thread_([this] { serve(); }) {}

  ~Impl() {
    const char b = 1;
    (void)!::write(wake_write_, &b, 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  const std::string& address() const { return address_; }

 private:
  void serve() {
    // The exporter is the instrument, not the system under test: on a machine the nodes saturate, a scrape
    // must not queue behind them for a scheduler slice. Raising priority needs root (CAP_SYS_NICE); without
    // it the thread keeps the default, which is only slower.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kServeNice);
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents) return;  // stop
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;  // the client went away, or out of descriptors for now
      handle(fd);
      ::close(fd);
    }
  }

  // Waits for fd to be ready, or for a stop request; false on deadline or stop.
  bool waitReady(int fd, short events, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      pollfd fds[2] = {{fd, events, 0}, {wake_read_, POLLIN, 0}};
      int r = ::poll(fds, 2, msUntil(deadline));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0 || fds[1].revents) return false;
      return true;
    }
  }

  void handle(int fd) {
    const auto deadline = std::chrono::steady_clock::now() + kRequestDeadline;
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        req.append(buf, size_t(n));
        if (req.size() > kMaxRequestBytes) return respond(fd, "431 Request Header Fields Too Large", "", deadline, true);
      } else if (n == 0) {
        return;
      } else if (errno == EAGAIN || errno == EINTR) {
        if (!waitReady(fd, POLLIN, deadline)) return;
      } else {
        return;
      }
    }
    const size_t sp1 = req.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
    if (sp2 == std::string::npos) return respond(fd, "400 Bad Request", "malformed request line\n", deadline, true);
    const std::string method = req.substr(0, sp1);
    std::string target = req.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    if (method != "GET" && method != "HEAD") return respond(fd, "405 Method Not Allowed", "GET " + path_ + "\n", deadline, true);
    if (target != path_) return respond(fd, "404 Not Found", "metrics are at " + path_ + "\n", deadline, true);
    respond(fd, "200 OK", render_(), deadline, method == "GET");
  }

  void respond(int fd, const std::string& status, const std::string& body, std::chrono::steady_clock::time_point deadline,
               bool with_body) {
    std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n" +
                      "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (with_body) out += body;
    size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n > 0) sent += size_t(n);
      else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        if (!waitReady(fd, POLLOUT, deadline)) return;
      } else {
        return;
      }
    }
    ::shutdown(fd, SHUT_WR);
  }

  int listen_fd_, wake_read_, wake_write_;
  std::string address_, path_;
  std::function<std::string()> render_;
  std::thread thread_;  // last: starts once everything above is set
};

Result<std::unique_ptr<HttpMetricsServer>> HttpMetricsServer::start(const std::string& listen, const std::string& path,
                                                                    std::function<std::string()> render) {
  std::string host;
  int port = 0;
  CHAOSBED_RETURN_IF_ERROR(parseHostPort(listen, &host, &port));
  std::string lookup = host;
  if (lookup.size() > 2 && lookup.front() == '[' && lookup.back() == ']') lookup = lookup.substr(1, lookup.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(lookup.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return Status::invalidArgument("address '" + listen + "': cannot resolve '" + host + "': " + ::gai_strerror(rc));
  int fd = -1;
  std::string why = "no address";
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0) return Status::unavailable("cannot listen on " + listen + ": " + why);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  char port_str[NI_MAXSERV];
  ::getnameinfo(reinterpret_cast<sockaddr*>(&bound), len, nullptr, 0, port_str, sizeof port_str, NI_NUMERICSERV);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(fd);
    return Status::unavailable(std::string("metrics server: pipe: ") + std::strerror(errno));
  }
  auto impl = std::make_unique<Impl>(fd, wake[0], wake[1], host + ":" + port_str, path, std::move(render));
  return std::unique_ptr<HttpMetricsServer>(new HttpMetricsServer(std::move(impl)));
}

HttpMetricsServer::HttpMetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpMetricsServer::~HttpMetricsServer() = default;
const std::string& HttpMetricsServer::address() const { return impl_->address(); }

}  // namespace chaosbed
