#include "core/metrics/prometheus_http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <glog/logging.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <charconv>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed {

namespace {

using Clock = std::chrono::steady_clock;

// After an accept failure other than EMFILE/ENFILE (ENOBUFS, ENOMEM, ...), accepting pauses this long.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// Accept failures are logged at most this often (with how many happened in between).
constexpr auto kAcceptLogInterval = std::chrono::seconds(10);
// Connections accepted per loop iteration at most, so a flood does not starve the open ones.
constexpr int kAcceptBatch = 64;

int msUntil(Clock::time_point deadline, Clock::time_point now) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : int(ms);
}

std::string response(const std::string& status, const std::string& body, bool with_body) {
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n" +
                    "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (with_body) out += body;
  return out;
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
       std::function<std::string()> render, const HttpServerOptions& options)
      : listen_fd_(listen_fd), wake_read_(wake_read), wake_write_(wake_write), address_(std::move(address)),
        path_(std::move(path)), render_(std::move(render)), options_(options),
        reserve_fd_(::open("/dev/null", O_RDONLY | O_CLOEXEC)), thread_([this] { serve(); }) {}

  ~Impl() {
    const char b = 1;
    (void)!::write(wake_write_, &b, 1);
    thread_.join();
    for (const Conn& c : conns_) ::close(c.fd);
    if (reserve_fd_ >= 0) ::close(reserve_fd_);
    ::close(listen_fd_);
    ::close(wake_read_);
    ::close(wake_write_);
  }

  const std::string& address() const { return address_; }

 private:
  struct Conn {
    int fd = -1;
    bool writing = false;      // the request head is in; `out` is being sent
    Clock::time_point deadline;
    std::string in;            // the request head so far
    std::string out;           // the response
    uint64_t render_seq = 0;   // of a 200 response to path_ (0: any other answer)
    Clock::time_point accepted_at;
    std::optional<double> scrape_timeout_s;  // what the scraper said it waits (X-Prometheus-Scrape-Timeout-Seconds)
    size_t sent = 0;
    bool done = false;         // to be closed at the end of this iteration
  };

  void serve() {
    // The exporter is the instrument, not the system under test: on a machine the nodes saturate, a scrape
    // must not queue behind them for a scheduler slice. Raising priority needs root (CAP_SYS_NICE); without
    // it the thread keeps the default, which is only slower.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kServeNice);
    std::vector<pollfd> fds;
    for (;;) {
      auto now = Clock::now();
      Clock::time_point wake_at = Clock::time_point::max();
      for (Conn& c : conns_) {
        if (now >= c.deadline) {
          // Out of time: a client that never finished its head is told why (one try, no waiting).
          if (!c.writing) {
            const std::string out = response("408 Request Timeout", "request head not complete in time\n", true);
            (void)!::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          }
          c.done = true;
        } else {
          wake_at = std::min(wake_at, c.deadline);
        }
      }
      closeDone();
      const bool accepting = now >= accept_paused_until_ && (int(conns_.size()) < options_.max_connections ||
                                                             std::any_of(conns_.begin(), conns_.end(),
                                                                         [](const Conn& c) { return !c.writing; }));
      if (now < accept_paused_until_) wake_at = std::min(wake_at, accept_paused_until_);

      fds.clear();
      fds.push_back({wake_read_, POLLIN, 0});
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});  // a negative fd is ignored by poll()
      for (const Conn& c : conns_) fds.push_back({c.fd, short(c.writing ? POLLOUT : POLLIN), 0});
      const int timeout = wake_at == Clock::time_point::max() ? -1 : msUntil(wake_at, now);
      if (::poll(fds.data(), fds.size(), timeout) < 0) {
        if (errno == EINTR) continue;
        PLOG(ERROR) << "metrics server " << address_ << ": poll; the endpoint stops serving";
        return;
      }
      if (fds[0].revents) return;  // stop
      // Connections first (their indexes match fds[2...]), then new ones.
      for (size_t i = 0; i < conns_.size(); ++i)
        if (fds[i + 2].revents) progress(conns_[i]);
      closeDone();
      if (fds[1].revents) acceptSome();
    }
  }

  void closeDone() {
    std::erase_if(conns_, [](const Conn& c) {
      if (c.done) ::close(c.fd);
      return c.done;
    });
  }

  void acceptSome() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        if (int(conns_.size()) >= options_.max_connections) {
          // Full: the oldest connection still sending its head makes room (conns_ is in accept order).
          auto oldest = std::find_if(conns_.begin(), conns_.end(), [](const Conn& c) { return !c.writing; });
          if (oldest == conns_.end()) {  // every connection is being answered: this one must wait its turn
            ::close(fd);
            noteAcceptFailure("connection limit reached (" + std::to_string(options_.max_connections) + ")");
            return;
          }
          ::close(oldest->fd);
          conns_.erase(oldest);
        }
        Conn c;
        c.fd = fd;
        c.accepted_at = Clock::now();
        c.deadline = c.accepted_at + options_.head_timeout;
        conns_.push_back(std::move(c));
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if ((err == EMFILE || err == ENFILE) && reserve_fd_ >= 0) {
        // Out of descriptors: spend the reserved one to take the pending connection off the queue and close
        // it, so the listener stops being readable (else poll() returns at once, forever).
        ::close(reserve_fd_);
        const int victim = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (victim >= 0) ::close(victim);
        reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        noteAcceptFailure(std::string("accept: ") + std::strerror(err) + "; connection closed unserved");
        if (reserve_fd_ < 0) accept_paused_until_ = Clock::now() + kAcceptPause;
        return;
      }
      // No reserve, or a failure that retrying at once would not cure (ENOBUFS, ENOMEM, ...): pause.
      accept_paused_until_ = Clock::now() + kAcceptPause;
      noteAcceptFailure(std::string("accept: ") + std::strerror(err) + "; accepting paused");
      return;
    }
  }

  // Logs an accept failure at most once per kAcceptLogInterval, with the number since the last line.
  void noteAcceptFailure(const std::string& what) {
    ++accept_failures_;
    const auto now = Clock::now();
    if (last_accept_log_ != Clock::time_point() && now - last_accept_log_ < kAcceptLogInterval) return;
    LOG(WARNING) << "metrics server " << address_ << ": " << what << " (" << accept_failures_
                 << " accept failure(s) since the last message)";
    last_accept_log_ = now;
    accept_failures_ = 0;
  }

  void progress(Conn& c) {
    if (c.writing) return write(c);
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        c.in.append(buf, size_t(n));
        if (c.in.find("\r\n\r\n") != std::string::npos) break;
        if (c.in.size() > options_.max_request_bytes) break;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // wait for more
      c.done = true;  // closed before the end of its head, or an error
      return;
    }
    c.out = answer(c.in, &c.render_seq);
    c.scrape_timeout_s = scrapeTimeout(c.in);
    c.in.clear();
    c.in.shrink_to_fit();
    c.writing = true;
    c.deadline = Clock::now() + options_.write_timeout;
    write(c);
  }

  std::string answer(const std::string& req, uint64_t* render_seq) {
    const size_t head_end = req.find("\r\n\r\n");
    if (head_end == std::string::npos || head_end + 4 > options_.max_request_bytes)
      return response("431 Request Header Fields Too Large", "", true);
    const size_t sp1 = req.find(' ');
    const size_t sp2 = sp1 == std::string::npos ? sp1 : req.find(' ', sp1 + 1);
    if (sp2 == std::string::npos || sp2 > head_end) return response("400 Bad Request", "malformed request line\n", true);
    const std::string method = req.substr(0, sp1);
    std::string target = req.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    if (method != "GET" && method != "HEAD") return response("405 Method Not Allowed", "GET " + path_ + "\n", true);
    if (target != path_) return response("404 Not Found", "metrics are at " + path_ + "\n", true);
    {
      MutexLock lock(served_mu_);
      *render_seq = ++render_seq_;
      const auto now = Clock::now();
      if (last_render_ != Clock::time_point()) interval_ = std::chrono::duration<double>(now - last_render_).count();
      last_render_ = now;
    }
    return response("200 OK", render_(), method == "GET");
  }

  void write(Conn& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n > 0) {
        c.sent += size_t(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;  // the client's window is full: wait for POLLOUT
      } else {
        c.done = true;
        return;
      }
    }
    ::shutdown(c.fd, SHUT_WR);
    c.done = true;
    if (c.render_seq == 0) return;
    // A scraper that gave up before the last byte keeps nothing of this response: it was not seen. (Its clock
    // started before our accept, so a response just inside the limit may still be late for it; one outside is
    // surely lost.)
    const double took = std::chrono::duration<double>(Clock::now() - c.accepted_at).count();
    if (c.scrape_timeout_s && took > *c.scrape_timeout_s) {
      LOG(WARNING) << "metrics server " << address_ << ": a scrape took " << took << " s, past the scraper's "
                   << *c.scrape_timeout_s << " s timeout: it was lost (raise its scrape_timeout)";
      return;
    }
    MutexLock lock(served_mu_);
    served_seq_ = std::max(served_seq_, c.render_seq);
    served_cv_.notify_all();
  }

  // The X-Prometheus-Scrape-Timeout-Seconds of a request head, when it holds a positive number.
  static std::optional<double> scrapeTimeout(const std::string& head) {
    static constexpr std::string_view kName = "\r\nx-prometheus-scrape-timeout-seconds:";
    const auto it = std::search(head.begin(), head.end(), kName.begin(), kName.end(),
                                [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
    if (it == head.end()) return std::nullopt;
    const char* value = head.c_str() + (it - head.begin()) + kName.size();
    char* end = nullptr;
    const double seconds = std::strtod(value, &end);
    if (end == value || !std::isfinite(seconds) || seconds <= 0) return std::nullopt;
    return seconds;
  }

 public:
  bool awaitServed(Clock::time_point deadline) {
    MutexLock lock(served_mu_);
    const uint64_t after = render_seq_;
    return served_cv_.wait_until(lock, deadline, [&]() CHAOSBED_REQUIRES(served_mu_) { return served_seq_ > after; });
  }
  std::optional<double> servedInterval() const {
    MutexLock lock(served_mu_);
    return interval_;
  }

 private:

  int listen_fd_, wake_read_, wake_write_;
  std::string address_, path_;
  std::function<std::string()> render_;
  const HttpServerOptions options_;
  // Serving-thread state (nothing else touches it while the thread runs).
  std::vector<Conn> conns_;          // in accept order
  int reserve_fd_;                   // spent to shed a connection at EMFILE; -1 when it could not be reopened
  Clock::time_point accept_paused_until_{};
  Clock::time_point last_accept_log_{};
  int64_t accept_failures_ = 0;
  // What scrapers have been served, for awaitServed (shared with the run's threads).
  mutable Mutex served_mu_;
  std::condition_variable_any served_cv_;
  uint64_t render_seq_ CHAOSBED_GUARDED_BY(served_mu_) = 0;  // renders of path_ so far
  uint64_t served_seq_ CHAOSBED_GUARDED_BY(served_mu_) = 0;  // the latest render whose response went out in full
  Clock::time_point last_render_{};       // GUARDED_BY(served_mu_)
  std::optional<double> interval_ CHAOSBED_GUARDED_BY(served_mu_);
  std::thread thread_;  // last: starts once everything above is set
};

Result<std::unique_ptr<HttpMetricsServer>> HttpMetricsServer::start(const std::string& listen, const std::string& path,
                                                                    std::function<std::string()> render,
                                                                    const HttpServerOptions& options) {
  std::string host;
  int port = 0;
  CHAOSBED_RETURN_IF_ERROR(parseHostPort(listen, &host, &port));
  if (options.max_connections < 1 || options.max_request_bytes < 16)
    return Status::invalidArgument("metrics server: max_connections must be >= 1 and max_request_bytes >= 16");
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
  std::string remote;  // the first resolved address refused for not being loopback
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    if (!options.allow_remote && !net::isLoopbackAddress(a->ai_addr)) {
      char numeric[NI_MAXHOST] = "?";
      ::getnameinfo(a->ai_addr, a->ai_addrlen, numeric, sizeof numeric, nullptr, 0, NI_NUMERICHOST);
      if (remote.empty()) remote = numeric;
      continue;
    }
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd < 0 && !remote.empty() && why == "no address")
    return Status::invalidArgument("address '" + listen + "': " + remote +
                                   " is not a loopback address; the endpoint is unauthenticated, and binding beyond "
                                   "loopback must be allowed explicitly");
  if (fd < 0) return Status::unavailable("cannot listen on " + listen + ": " + why);
  // The serving loop polls: accept must never block it.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
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
  auto impl = std::make_unique<Impl>(fd, wake[0], wake[1], host + ":" + port_str, path, std::move(render), options);
  return std::unique_ptr<HttpMetricsServer>(new HttpMetricsServer(std::move(impl)));
}

HttpMetricsServer::HttpMetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpMetricsServer::~HttpMetricsServer() = default;
const std::string& HttpMetricsServer::address() const { return impl_->address(); }
bool HttpMetricsServer::awaitServed(Clock::time_point deadline) { return impl_->awaitServed(deadline); }
std::optional<double> HttpMetricsServer::servedInterval() const { return impl_->servedInterval(); }

}  // namespace chaosbed
