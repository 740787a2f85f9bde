#include "transports/bootstrap/store.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/bootstrap/store_wire.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using namespace store_wire;
using net::FileDescriptor;

// Server bounds (store.h).
constexpr auto kAuthTimeout = 2s;
constexpr auto kFrameTimeout = 10s;
constexpr size_t kMaxUnreadAnswers = 64u << 10;
constexpr size_t kReadAhead = 64u << 10;

// At most this many connections (more are accepted and closed at once): three quarters of the descriptors
// the process may open, the rest left to everything else it holds, and never fewer than 1024. A node holds a
// connection per concurrent call (about four), so 1024 stopped a controller at about 250 nodes.
size_t clientLimit() {
  rlimit limit{};
  const size_t descriptors = ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                                 ? size_t(limit.rlim_cur) : size_t{1} << 20;
  return std::clamp<size_t>(descriptors / 4 * 3, 1024, size_t{1} << 20);
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

// One log line now and then for a condition that a hostile or broken peer can repeat at will.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(const char* what) : what_(what) {}
  void note(const std::string& detail) {
    ++count_;
    const auto now = SteadyClock::now();
    if (now - last_ < 10s) return;
    LOG(WARNING) << "store server: " << what_ << " (" << detail << "; " << count_ << " in all so far)";
    last_ = now;
  }

 private:
  const char* what_;
  int64_t count_ = 0;
  SteadyClock::time_point last_{};
};

// ---------------------------------------------------------------------------------------------------------
// Server: one thread, epoll over the listener, a wake-up eventfd and every client connection. (poll() over
// every connection was, by perf at 69 nodes, nearly all of the controller's CPU, in the kernel walking idle
// sockets; epoll's cost follows the sockets that are ready.)

class TcpStoreServer final : public StoreServer {
 public:
  // listeners[0] is the address() the server reports; the others (in other network namespaces, say) serve
  // the same store.
  TcpStoreServer(std::vector<FileDescriptor> listeners, net::HostPort bound, FileDescriptor wake, const Secret& secret)
      : listeners_(std::move(listeners)), bound_(std::move(bound)), wake_(std::move(wake)), secret_(secret),
        reserve_(::open("/dev/null", O_RDONLY | O_CLOEXEC)), epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    watch(wake_.get(), EPOLLIN, &wake_);
    for (FileDescriptor& l : listeners_) watch(l.get(), EPOLLIN, &l);
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
    bool authenticated = false;
    std::string nonce;             // the server's nonce Ns
    Secret session;                // the connection's key, once authenticated
    uint64_t received = 0;         // requests taken, the next one's sequence number
    uint64_t sent = 0;             // answers sent
    Deadline auth_deadline{};      // closed if not authenticated by then
    Deadline frame_deadline = Deadline::max();  // a started frame must be complete by then
    bool waiting = false;          // a get is blocked on wait_key
    std::string wait_key;
    Deadline wait_deadline{};
    bool closed = false;
    uint32_t watched = 0;          // the epoll events registered for fd
  };

  void watch(int fd, uint32_t events, void* tag) {
    epoll_event ev{};
    ev.events = events;
    ev.data.ptr = tag;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      LOG(ERROR) << "store server: epoll_ctl(ADD): " << std::strerror(errno);
  }

  // Whether to read more from c now: not while its get blocks or its answers pile up unread, and no further
  // ahead than the frame being received (plus a little, for pipelined small requests).
  static size_t inputRoom(const Client& c) {
    if (c.waiting || c.out.size() > kMaxUnreadAnswers) return 0;
    size_t cap = kAnswerBytes;
    if (c.authenticated) {
      cap = kReadAhead;
      if (c.in.size() >= 4) cap = std::max<size_t>(cap, 4 + size_t{net::loadU32(c.in.data())} + kReadAhead);
    }
    return c.in.size() < cap ? cap - c.in.size() : 0;
  }

  void loop() {
    if (!epoll_.valid()) {
      LOG(ERROR) << "store server: epoll_create1: " << std::strerror(errno);
      return;
    }
    std::vector<epoll_event> ready(256);
    for (;;) {
      Deadline next = Deadline::max();
      for (auto& c : clients_) {
        // Level-triggered: ask for input only while there is room for it, for output while some waits.
        uint32_t events = inputRoom(*c) > 0 ? uint32_t{EPOLLIN} : 0u;
        if (!c->out.empty()) events |= EPOLLOUT;
        if (events != c->watched) {
          epoll_event ev{};
          ev.events = events;
          ev.data.ptr = c.get();
          if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c->fd.get(), &ev) == 0) c->watched = events;
        }
        if (c->waiting) next = std::min(next, c->wait_deadline);
        if (!c->authenticated) next = std::min(next, c->auth_deadline);
        next = std::min(next, c->frame_deadline);
      }
      int timeout = next == Deadline::max() ? -1 : net::pollTimeoutMs(next);
      int n = ::epoll_wait(epoll_.get(), ready.data(), int(ready.size()), timeout);
      if (n < 0 && errno != EINTR) {
        LOG(ERROR) << "store server: epoll_wait: " << std::strerror(errno);
        return;
      }
      std::vector<int> accept_on;
      for (int i = 0; i < n; ++i) {
        void* tag = ready[size_t(i)].data.ptr;
        if (tag == &wake_) return;  // shutting down
        if (auto* l = static_cast<FileDescriptor*>(tag); l >= listeners_.data() && l < listeners_.data() + listeners_.size()) {
          accept_on.push_back(l->get());
          continue;
        }
        Client& c = *static_cast<Client*>(tag);
        const uint32_t rev = ready[size_t(i)].events;
        if (rev & EPOLLIN) readFrom(c);
        else if (rev & (EPOLLHUP | EPOLLERR)) c.closed = true;  // gone while we were not reading from it
        if (!c.closed) handleInput(c);
      }
      for (int listener : accept_on) acceptAll(listener);
      expireDeadlines();
      for (auto& c : clients_)
        if (!c->closed && !c->out.empty()) writeTo(*c);
      // Answers flushed: a client held back by unread answers may have frames waiting.
      for (auto& c : clients_)
        if (!c->closed && c->authenticated && !c->waiting && !c->in.empty()) handleInput(*c);
      // Removed from the epoll set by hand: closing the descriptor is not enough while a child forked by
      // the launcher, not yet at its exec, holds a copy of it; epoll would go on reporting the freed client.
      std::erase_if(clients_, [this](const std::unique_ptr<Client>& c) {
        if (c->closed) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
        return c->closed;
      });
    }
  }

  void acceptAll(int listener) {
    for (;;) {
      int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
        if (errno == EMFILE || errno == ENFILE) {
          // No descriptor left: give up the reserve one to take the connection off the backlog and close it,
          // so epoll does not report the listener readable forever.
          reserve_.reset();
          FileDescriptor dropped(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
          dropped.reset();
          reserve_ = FileDescriptor(::open("/dev/null", O_RDONLY | O_CLOEXEC));
          out_of_fds_.note("out of file descriptors: closed a new connection at once");
          if (!dropped.valid() && !reserve_.valid()) return;
          continue;
        }
        LOG(WARNING) << "store server: accept: " << std::strerror(errno);
        return;
      }
      FileDescriptor conn(fd);
      if (clients_.size() >= max_clients_) {
        too_many_.note(std::to_string(max_clients_) + " connections open: closed a new one at once");
        continue;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto c = std::make_unique<Client>();
      c->fd = std::move(conn);
      c->nonce = Secret::nonce(kNonceBytes);
      c->auth_deadline = SteadyClock::now() + kAuthTimeout;
      c->out = std::string(kMagic, kMagicBytes) + c->nonce;
      c->watched = EPOLLOUT;
      watch(c->fd.get(), c->watched, c.get());
      clients_.push_back(std::move(c));
    }
  }

  void readFrom(Client& c) {
    char buf[65536];
    for (size_t room = inputRoom(c); room > 0; room = inputRoom(c)) {
      ssize_t n = ::recv(c.fd.get(), buf, std::min(room, sizeof buf), 0);
      if (n > 0) {
        if (c.in.empty()) c.frame_deadline = SteadyClock::now() + kFrameTimeout;
        c.in.append(buf, static_cast<size_t>(n));
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

  void handleInput(Client& c) {
    if (!c.authenticated) {
      if (c.in.size() < kAnswerBytes) return;
      const std::string transcript = c.nonce + c.in.substr(0, kNonceBytes);
      if (!secret_.verify(kClientLabel, transcript, std::string_view(c.in).substr(kNonceBytes, Secret::kMacBytes))) {
        rejected_.note("a connection failed to prove the run's secret; closed");
        c.closed = true;
        return;
      }
      c.authenticated = true;
      c.session = secret_.derive(kSessionLabel, transcript);
      c.out += asString(secret_.mac(kServerLabel, transcript));
      c.in.erase(0, kAnswerBytes);
      c.frame_deadline = c.in.empty() ? Deadline::max() : SteadyClock::now() + kFrameTimeout;
    }
    while (!c.waiting && c.out.size() <= kMaxUnreadAnswers && c.in.size() >= 4) {
      uint32_t len = net::loadU32(c.in.data());
      if (len > kMaxFrame || len < 5) {
        LOG(WARNING) << "store server: closing a client that sent a bad frame of " << len << " bytes";
        c.closed = true;
        return;
      }
      if (c.in.size() < 4 + size_t{len} + Secret::kMacBytes) return;
      std::string body = c.in.substr(4, len);
      if (!c.session.verify(kRequestLabel, macInput(c.received, body),
                            std::string_view(c.in).substr(4 + size_t{len}, Secret::kMacBytes))) {
        forged_.note("a request failed its MAC (altered, replayed, reordered or not from the client); closed");
        c.closed = true;
        return;
      }
      ++c.received;
      c.in.erase(0, 4 + size_t{len} + Secret::kMacBytes);
      // The next frame (if any) has its own time to arrive.
      c.frame_deadline = c.in.empty() ? Deadline::max() : SteadyClock::now() + kFrameTimeout;
      handleRequest(c, body);
      if (c.closed) return;
    }
  }

  void handleRequest(Client& c, const std::string& body) {
    uint8_t op = static_cast<uint8_t>(body[0]);
    uint32_t key_len = net::loadU32(body.data() + 1);
    if (size_t{key_len} > body.size() - 5) {
      answer(c, kCodeInvalid, "key length exceeds the frame");
      return;
    }
    std::string key = body.substr(5, key_len);
    std::string operand = body.substr(5 + key_len);
    switch (op) {
      case kSet:
        data_[key] = std::move(operand);
        answer(c, kCodeOk);
        wakeWaiters(key);
        return;
      case kGet: {
        if (operand.size() != 8) break;
        if (auto it = data_.find(key); it != data_.end()) {
          answer(c, kCodeOk, it->second);
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
          answer(c, kCodeInvalid, "add: key '" + key + "' does not hold a counter");
          return;
        }
        value += delta;
        data_[key] = std::to_string(value);
        std::string payload;
        net::appendU64(payload, static_cast<uint64_t>(value));
        answer(c, kCodeOk, payload);
        wakeWaiters(key);
        return;
      }
      case kContains:
        answer(c, kCodeOk, std::string(1, data_.count(key) ? '\1' : '\0'));
        return;
      case kAppend: {
        auto& list = lists_[key];
        list.push_back(std::move(operand));
        std::string payload;
        net::appendU64(payload, static_cast<uint64_t>(list.size() - 1));
        answer(c, kCodeOk, payload);
        return;
      }
      case kReadList: {
        if (operand.size() != 12) break;
        const uint64_t from = net::loadU64(operand.data());
        const uint32_t max = net::loadU32(operand.data() + 8);
        std::string entries;
        uint32_t count = 0;
        if (auto it = lists_.find(key); it != lists_.end()) {
          const auto& list = it->second;
          for (uint64_t i = from; i < list.size() && count < max; ++i) {
            if (count > 0 && entries.size() + list[i].size() > kReadListReplyCap) break;
            net::appendU32(entries, static_cast<uint32_t>(list[i].size()));
            entries += list[i];
            ++count;
          }
        }
        std::string payload;
        net::appendU32(payload, count);
        answer(c, kCodeOk, payload + entries);
        return;
      }
      case kPeek: {
        // operand: u32 count, then count x (u32 length, key). Every length is checked against the operand.
        if (operand.size() < 4) break;
        const uint32_t count = net::loadU32(operand.data());
        if (count > kMaxPeekKeys) break;
        std::string payload;
        net::appendU32(payload, count);
        size_t at = 4;
        uint32_t i = 0;
        for (; i < count; ++i) {
          if (operand.size() - at < 4) break;
          const uint32_t len = net::loadU32(operand.data() + at);
          at += 4;
          if (operand.size() - at < len) break;
          auto it = data_.find(operand.substr(at, len));
          at += len;
          if (it == data_.end()) {
            payload.push_back('\0');
            continue;
          }
          payload.push_back('\1');
          net::appendU32(payload, static_cast<uint32_t>(it->second.size()));
          payload += it->second;
        }
        if (i != count || at != operand.size()) break;
        answer(c, kCodeOk, payload);
        return;
      }
      default:
        break;
    }
    answer(c, kCodeInvalid, "malformed request (op " + std::to_string(op) + ")");
  }

  void answer(Client& c, Code code, const std::string& payload = {}) {
    std::string body(1, static_cast<char>(code));
    body += payload;
    c.out += sealedFrame(c.session, kResponseLabel, c.sent++, body);
  }

  void wakeWaiters(const std::string& key) {
    const std::string& value = data_[key];
    for (auto& w : clients_) {
      if (w->waiting && w->wait_key == key) {
        w->waiting = false;
        answer(*w, kCodeOk, value);
        handleInput(*w);
      }
    }
  }

  void expireDeadlines() {
    auto now = SteadyClock::now();
    for (auto& c : clients_) {
      if (c->closed) continue;
      // A client may have answered in time while this thread served others (one epoll_wait returns at most
      // `ready` sockets): take what is waiting before judging it late.
      if ((!c->authenticated && c->auth_deadline <= now) || (c->frame_deadline <= now && inputRoom(*c) > 0)) {
        readFrom(*c);
        if (!c->closed) handleInput(*c);
        if (c->closed) continue;
      }
      if (!c->authenticated && c->auth_deadline <= now) {
        rejected_.note("a connection did not authenticate within 2 s; closed");
        c->closed = true;
        continue;
      }
      if (c->waiting && c->wait_deadline <= now) {
        c->waiting = false;
        answer(*c, kCodeTimeout, "get '" + c->wait_key + "': key not set before the deadline");
        handleInput(*c);
      }
      // Only a frame we are reading can be late: a client held back by us is not.
      if (c->frame_deadline <= now && inputRoom(*c) > 0) {
        slow_.note("a client did not complete a frame within 10 s; closed");
        c->closed = true;
      }
    }
  }

  std::vector<FileDescriptor> listeners_;  // fixed at construction: epoll tags point into it
  net::HostPort bound_;
  FileDescriptor wake_;
  const Secret secret_;
  FileDescriptor reserve_;  // a spare descriptor, given up to accept-and-close when the process has none left
  // Only the server thread touches the members below.
  std::map<std::string, std::string> data_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::vector<std::unique_ptr<Client>> clients_;
  FileDescriptor epoll_;
  RateLimitedLog rejected_{"authentication"};
  RateLimitedLog forged_{"frame MAC"};
  RateLimitedLog slow_{"slow client"};
  const size_t max_clients_ = clientLimit();
  RateLimitedLog too_many_{"connection limit"};
  RateLimitedLog out_of_fds_{"descriptor limit"};
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& listen_address, const Secret& secret,
                                                      std::vector<FileDescriptor> more_listeners) {
  CHAOSBED_ASSIGN_OR_RETURN(net::HostPort where, net::parseHostPort(listen_address));
  net::HostPort bound;
  CHAOSBED_ASSIGN_OR_RETURN(FileDescriptor listener, net::listenTcp(where, &bound));
  FileDescriptor wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::fromErrno("store server: eventfd");
  std::vector<FileDescriptor> listeners;
  listeners.push_back(std::move(listener));
  for (FileDescriptor& l : more_listeners) {
    if (!l.valid()) return Status::invalidArgument("store server: an extra listener is not open");
    if (const int flags = ::fcntl(l.get(), F_GETFL); flags < 0 || ::fcntl(l.get(), F_SETFL, flags | O_NONBLOCK) != 0)
      return Status::fromErrno("store server: O_NONBLOCK");
    listeners.push_back(std::move(l));
  }
  return std::unique_ptr<StoreServer>(new TcpStoreServer(std::move(listeners), bound, std::move(wake), secret));
}
}  // namespace chaosbed
