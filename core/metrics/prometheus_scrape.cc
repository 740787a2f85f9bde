#include "core/metrics/prometheus_scrape.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace chaosbed {
namespace {

int msLeft(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return left < 0 ? 0 : int(left);
}

// Waits until fd is ready for `events`; false on timeout.
bool waitFd(int fd, short events, Deadline deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, msLeft(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<int> connectTo(const std::string& host, const std::string& port, Deadline deadline, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Status::invalidArgument(what + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
        (errno == EINPROGRESS && waitFd(fd, POLLOUT, deadline))) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) {
        ::freeaddrinfo(res);
        return fd;
      }
      last = std::strerror(err);
    } else {
      last = errno == EINPROGRESS ? "connect timed out" : std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (SteadyClock::now() >= deadline) return Status::timeout(what + ": connect: " + last);
  return Status::unavailable(what + ": connect: " + last);
}

// Decodes a chunked transfer-encoded body.
Result<std::string> dechunk(const std::string& body, const std::string& what) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) return Status::ioError(what + ": truncated chunked body");
    size_t size = 0;
    auto [p, ec] = std::from_chars(body.data() + pos, body.data() + eol, size, 16);
    if (ec != std::errc()) return Status::ioError(what + ": bad chunk size");
    (void)p;
    pos = eol + 2;
    if (size == 0) return out;
    if (pos + size > body.size()) return Status::ioError(what + ": truncated chunk");
    out.append(body, pos, size);
    pos += size + 2;
  }
}

std::string lowercase(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool isNameChar(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

Result<double> parseValue(const std::string& s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return Status::invalidArgument("bad value '" + s + "'");
  return v;
}

// One request on a fresh connection ("Connection: close"); the body of a response whose status is in
// [2xx] (exactly 200 when only_200).
Result<std::string> httpRequest(const std::string& method, const std::string& host_port, const std::string& path,
                                const std::string& content_type, const std::string& payload, bool only_200,
                                Deadline deadline) {
  const std::string what = method + " http://" + host_port + path;
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size())
    return Status::invalidArgument(what + ": address '" + host_port + "' is not host:port");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  CHAOSBED_ASSIGN_OR_RETURN(int raw_fd, connectTo(host, host_port.substr(colon + 1), deadline, what));
  Fd fd(raw_fd);

  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + host_port +
                        "\r\nAccept: text/plain\r\nConnection: close\r\n";
  if (method != "GET")
    request += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(payload.size()) + "\r\n";
  request += "\r\n" + payload;
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!waitFd(fd.get(), POLLOUT, deadline)) return Status::timeout(what + ": sending the request");
    } else {
      return Status::unavailable(what + ": send: " + std::strerror(errno));
    }
  }
  std::string response;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      response.append(buf, size_t(n));
    } else if (n == 0) {
      break;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!waitFd(fd.get(), POLLIN, deadline)) return Status::timeout(what + ": reading the response");
    } else {
      return Status::unavailable(what + ": recv: " + std::strerror(errno));
    }
  }

  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos) return Status::ioError(what + ": malformed response (no header end)");
  const std::string head = response.substr(0, head_end);
  std::string body = response.substr(head_end + 4);
  const size_t sp = head.find(' ');
  if (sp == std::string::npos || head.compare(0, 5, "HTTP/") != 0) return Status::ioError(what + ": malformed status line");
  const int code = std::atoi(head.c_str() + sp + 1);
  if (only_200 ? code != 200 : (code < 200 || code > 299)) return Status::ioError(what + ": HTTP status " + std::to_string(code));
  if (lowercase(head).find("transfer-encoding: chunked") != std::string::npos) return dechunk(body, what);
  return body;
}

}  // namespace

Result<std::string> httpGet(const std::string& host_port, const std::string& path, Deadline deadline) {
  return httpRequest("GET", host_port, path, "", "", true, deadline);
}

Result<std::string> httpPut(const std::string& host_port, const std::string& path, const std::string& content_type,
                            const std::string& body, Deadline deadline) {
  return httpRequest("PUT", host_port, path, content_type, body, false, deadline);
}

std::vector<MetricSample> Exposition::find(const std::string& name,
                                           const std::map<std::string, std::string>& match) const {
  std::vector<MetricSample> out;
  for (const MetricSample& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        ok = false;
        break;
      }
    }
    if (ok) out.push_back(s);
  }
  return out;
}

Result<double> Exposition::value(const std::string& name, const std::map<std::string, std::string>& match) const {
  auto found = find(name, match);
  std::string sel = name + "{";
  for (const auto& [k, v] : match) sel += k + "=\"" + v + "\",";
  sel += "}";
  if (found.empty()) return Status::notFound("no sample " + sel);
  if (found.size() > 1) return Status::invalidArgument(std::to_string(found.size()) + " samples match " + sel);
  return found.front().value;
}

Result<Exposition> parseExposition(const std::string& text) {
  Exposition out;
  size_t pos = 0;
  int line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    const std::string where = "line " + std::to_string(line_no) + ": ";
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (line.rfind("# TYPE ", 0) == 0) {
        const std::string rest = line.substr(7);
        const size_t sp = rest.find(' ');
        if (sp == std::string::npos) return Status::invalidArgument(where + "TYPE without a type");
        out.types[rest.substr(0, sp)] = rest.substr(sp + 1);
      }
      continue;
    }
    MetricSample s;
    size_t i = 0;
    while (i < line.size() && isNameChar(line[i], i == 0)) ++i;
    if (i == 0) return Status::invalidArgument(where + "expected a metric name");
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      for (;;) {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        size_t start = i;
        while (i < line.size() && isNameChar(line[i], i == start)) ++i;
        if (i == start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"')
          return Status::invalidArgument(where + "malformed label in '" + line + "'");
        const std::string key = line.substr(start, i - start);
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) return Status::invalidArgument(where + "unterminated label value");
        ++i;
        s.labels[key] = value;
      }
    }
    while (i < line.size() && line[i] == ' ') ++i;
    const size_t vend = line.find(' ', i);  // an optional timestamp follows
    auto v = parseValue(line.substr(i, vend == std::string::npos ? std::string::npos : vend - i));
    if (!v.isOk()) return Status::invalidArgument(where + v.status().message());
    s.value = *v;
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace chaosbed
