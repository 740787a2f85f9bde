#include "transports/bootstrap/store.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "transports/bootstrap/net.h"

namespace chaosbed {
namespace {

using net::FileDescriptor;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kContains = 4 };
enum Code : uint8_t { kCodeOk = 0, kCodeTimeout = 1, kCodeInvalid = 2 };
constexpr uint32_t kMaxFrame = 64u << 20;

std::string frame(const std::string& body) {
  std::string out;
  out.reserve(body.size() + 4);
  net::appendU32(out, static_cast<uint32_t>(body.size()));
  out += body;
  return out;
}

std::string response(Code code, const std::string& payload = {}) {
  std::string body(1, static_cast<char>(code));
  body += payload;
  return frame(body);
}

// Parses decimal text as an int64 counter value.
bool parseCounter(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *value = v;
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// Server: one thread, poll() over the listener, a wake-up eventfd and every client connection.

class TcpStoreServer final : public StoreServer {
 public:
  TcpStoreServer(FileDescriptor listener, net::HostPort bound, FileDescriptor wake)
      : listener_(std::move(listener)), bound_(std::move(bound)), wake_(std::move(wake)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~TcpStoreServer() override {
    uint64_t one = 1;
    ssize_t n = ::write(wake_.get(), &one, sizeof(one));
    (void)n;
    thread_.join();
  }
  std::string address() const override { return bound_.toString(); }

 private:
  struct Client {
    FileDescriptor fd;
    std::string in;
    std::string out;
    bool waiting = false;  // a get is blocked on wait_key
    std::string wait_key;
    Deadline wait_deadline{};
    bool closed = false;
  };

  void loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_.get(), POLLIN, 0});
      fds.push_back({listener_.get(), POLLIN, 0});
      Deadline next = Deadline::max();
      for (auto& c : clients_) {
        short events = POLLIN;
        if (!c->out.empty()) events |= POLLOUT;
        fds.push_back({c->fd.get(), events, 0});
        if (c->waiting) next = std::min(next, c->wait_deadline);
      }
      int timeout = next == Deadline::max() ? -1 : net::pollTimeoutMs(next);
      int rc = ::poll(fds.data(), fds.size(), timeout);
      if (rc < 0 && errno != EINTR) {
        LOG(ERROR) << "store server: poll: " << std::strerror(errno);
        return;
      }
      if (fds[0].revents != 0) return;  // shutting down
      if (fds[1].revents & POLLIN) acceptAll();
      size_t polled = fds.size() - 2;
      for (size_t i = 0; i < polled && i < clients_.size(); ++i) {
        Client& c = *clients_[i];
        short rev = fds[i + 2].revents;
        if (rev & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
        if (!c.closed) handleFrames(c);
      }
      expireWaiters();
      for (auto& c : clients_)
        if (!c->closed && !c->out.empty()) writeTo(*c);
      std::erase_if(clients_, [](const std::unique_ptr<Client>& c) { return c->closed; });
    }
  }

  void acceptAll() {
    for (;;) {
      auto fd = net::acceptTcp(listener_.get());
      if (!fd.isOk()) {
        LOG(WARNING) << "store server: " << fd.status().toString();
        return;
      }
      if (!fd->valid()) return;
      auto c = std::make_unique<Client>();
      c->fd = std::move(fd).value();
      clients_.push_back(std::move(c));
    }
  }

  void readFrom(Client& c) {
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
      if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        if (static_cast<size_t>(n) < sizeof(buf)) return;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.closed = true;  // EOF or error: the client went away
      return;
    }
  }

  void writeTo(Client& c) {
    while (!c.out.empty()) {
      ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
      if (n > 0) {
        c.out.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c.closed = true;
      return;
    }
  }

  void handleFrames(Client& c) {
    while (!c.waiting && c.in.size() >= 4) {
      uint32_t len = net::loadU32(c.in.data());
      if (len > kMaxFrame || len < 5) {
        LOG(WARNING) << "store server: closing a client that sent a bad frame of " << len << " bytes";
        c.closed = true;
        return;
      }
      if (c.in.size() < 4 + size_t{len}) return;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t{len});
      handleRequest(c, body);
      if (c.closed) return;
    }
  }

  void handleRequest(Client& c, const std::string& body) {
    uint8_t op = static_cast<uint8_t>(body[0]);
    uint32_t key_len = net::loadU32(body.data() + 1);
    if (size_t{key_len} > body.size() - 5) {
      c.out += response(kCodeInvalid, "key length exceeds the frame");
      return;
    }
    std::string key = body.substr(5, key_len);
    std::string operand = body.substr(5 + key_len);
    switch (op) {
      case kSet:
        data_[key] = std::move(operand);
        c.out += response(kCodeOk);
        wakeWaiters(key);
        return;
      case kGet: {
        if (operand.size() != 8) break;
        if (auto it = data_.find(key); it != data_.end()) {
          c.out += response(kCodeOk, it->second);
          return;
        }
        uint64_t timeout_ms = net::loadU64(operand.data());
        c.waiting = true;
        c.wait_key = key;
        c.wait_deadline = SteadyClock::now() + std::chrono::milliseconds(
                                                   std::min<uint64_t>(timeout_ms, uint64_t{1} << 40));
        return;
      }
      case kAdd: {
        if (operand.size() != 8) break;
        int64_t delta = static_cast<int64_t>(net::loadU64(operand.data()));
        int64_t value = 0;
        auto it = data_.find(key);
        if (it != data_.end() && !parseCounter(it->second, &value)) {
          c.out += response(kCodeInvalid, "add: key '" + key + "' does not hold a counter");
          return;
        }
        value += delta;
        data_[key] = std::to_string(value);
        std::string payload;
        net::appendU64(payload, static_cast<uint64_t>(value));
        c.out += response(kCodeOk, payload);
        wakeWaiters(key);
        return;
      }
      case kContains:
        c.out += response(kCodeOk, std::string(1, data_.count(key) ? '\1' : '\0'));
        return;
      default:
        break;
    }
    c.out += response(kCodeInvalid, "malformed request (op " + std::to_string(op) + ")");
  }

  void wakeWaiters(const std::string& key) {
    const std::string& value = data_[key];
    for (auto& w : clients_) {
      if (w->waiting && w->wait_key == key) {
        w->waiting = false;
        w->out += response(kCodeOk, value);
        handleFrames(*w);
      }
    }
  }

  void expireWaiters() {
    auto now = SteadyClock::now();
    for (auto& c : clients_) {
      if (c->waiting && c->wait_deadline <= now) {
        c->waiting = false;
        c->out += response(kCodeTimeout, "get '" + c->wait_key + "': key not set before the deadline");
        handleFrames(*c);
      }
    }
  }

  FileDescriptor listener_;
  net::HostPort bound_;
  FileDescriptor wake_;
  std::map<std::string, std::string> data_;           // only the server thread touches these
  std::vector<std::unique_ptr<Client>> clients_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------------------
// Client: a pool of connections, one per concurrent call.

class TcpStore final : public Store {
 public:
  TcpStore(net::HostPort server, FileDescriptor first, std::chrono::milliseconds op_timeout)
      : server_(std::move(server)), op_timeout_(op_timeout) {
    idle_.push_back(std::move(first));
  }

  Status set(const std::string& key, const std::string& value) override {
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kSet, key, value, deadlineIn(op_timeout_)));
    return Status::ok();
  }

  Result<std::string> get(const std::string& key, Deadline deadline) override {
    std::string operand;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
    net::appendU64(operand, static_cast<uint64_t>(std::max<int64_t>(left, 0)));
    // A little grace so that the server's own Timeout answer, not a cut connection, normally ends the wait.
    return call(kGet, key, operand, deadline + std::chrono::milliseconds(50));
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    std::string operand;
    net::appendU64(operand, static_cast<uint64_t>(delta));
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kAdd, key, operand, deadlineIn(op_timeout_)));
    if (reply.size() != 8) return Status::internal("store add '" + key + "': malformed reply");
    return static_cast<int64_t>(net::loadU64(reply.data()));
  }

  Result<bool> contains(const std::string& key) override {
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kContains, key, {}, deadlineIn(op_timeout_)));
    if (reply.size() != 1) return Status::internal("store contains '" + key + "': malformed reply");
    return reply[0] != '\0';
  }

 private:
  static const char* opName(Op op) {
    switch (op) {
      case kSet: return "set";
      case kGet: return "get";
      case kAdd: return "add";
      case kContains: return "contains";
    }
    return "?";
  }

  Result<std::string> call(Op op, const std::string& key, const std::string& operand, Deadline deadline) {
    const std::string what = std::string("store ") + opName(op) + " '" + key + "' at " + server_.toString();
    if (key.size() + operand.size() + 5 > kMaxFrame) return Status::invalidArgument(what + ": request over 64 MiB");
    FileDescriptor fd;
    {
      std::lock_guard lock(mu_);
      if (server_lost_) return Status::unavailable(what + ": connection to the store server was lost");
      if (!idle_.empty()) {
        fd = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!fd.valid()) {
      auto connected = net::connectTcp(server_, deadline, /*retry=*/false);
      if (!connected.isOk()) return lost(what, connected.status());
      fd = std::move(connected).value();
    }
    std::string body(1, static_cast<char>(op));
    net::appendU32(body, static_cast<uint32_t>(key.size()));
    body += key;
    body += operand;
    std::string request = frame(body);
    if (Status s = net::writeAll(fd.get(), std::as_bytes(std::span(request)), deadline); !s.isOk())
      return s.code() == StatusCode::kTimeout ? Status::timeout(what + ": " + s.message()) : lost(what, s);
    char header[5];
    if (Status s = net::readAll(fd.get(), std::as_writable_bytes(std::span(header)), deadline); !s.isOk())
      return s.code() == StatusCode::kTimeout ? Status::timeout(what + ": " + s.message()) : lost(what, s);
    uint32_t len = net::loadU32(header);
    if (len < 1 || len > kMaxFrame) return lost(what, Status::dataLoss("malformed reply"));
    std::string payload(len - 1, '\0');
    if (Status s = net::readAll(fd.get(), std::as_writable_bytes(std::span(payload)), deadline); !s.isOk())
      return s.code() == StatusCode::kTimeout ? Status::timeout(what + ": " + s.message()) : lost(what, s);
    {
      std::lock_guard lock(mu_);
      idle_.push_back(std::move(fd));
    }
    switch (static_cast<Code>(header[4])) {
      case kCodeOk: return payload;
      case kCodeTimeout: return Status::timeout(what + ": " + payload);
      case kCodeInvalid: return Status::invalidArgument(what + ": " + payload);
    }
    return Status::internal(what + ": unknown reply code " + std::to_string(header[4]));
  }

  // The server is gone (refused, reset, EOF): every later call fails at once, without reconnecting.
  Status lost(const std::string& what, const Status& why) {
    std::lock_guard lock(mu_);
    server_lost_ = true;
    idle_.clear();
    return Status::unavailable(what + ": " + why.message());
  }

  const net::HostPort server_;
  const std::chrono::milliseconds op_timeout_;
  std::mutex mu_;
  std::vector<FileDescriptor> idle_;  // GUARDED_BY(mu_)
  bool server_lost_ = false;          // GUARDED_BY(mu_)
};

}  // namespace

Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& listen_address) {
  CHAOSBED_ASSIGN_OR_RETURN(net::HostPort where, net::parseHostPort(listen_address));
  net::HostPort bound;
  CHAOSBED_ASSIGN_OR_RETURN(FileDescriptor listener, net::listenTcp(where, &bound));
  FileDescriptor wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::ioError(std::string("store server: eventfd: ") + std::strerror(errno));
  return std::unique_ptr<StoreServer>(new TcpStoreServer(std::move(listener), bound, std::move(wake)));
}

Result<std::unique_ptr<Store>> connectStore(const std::string& address, Deadline deadline,
                                            std::chrono::milliseconds op_timeout) {
  CHAOSBED_ASSIGN_OR_RETURN(net::HostPort server, net::parseHostPort(address));
  auto fd = net::connectTcp(server, deadline, /*retry=*/true);
  if (!fd.isOk()) return fd.status().withContext("store client");
  return std::unique_ptr<Store>(new TcpStore(std::move(server), std::move(fd).value(), op_timeout));
}

}  // namespace chaosbed
