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

// A client that hears no greeting within this connects again: the server greets at accept, and it closes
// a connection that does not authenticate within the server's 2 s anyway.
constexpr auto kGreetingWait = 3s;

// ---------------------------------------------------------------------------------------------------------
// Client: a pool of authenticated connections, one per concurrent call.

// An authenticated connection: its socket, its key and the sequence numbers of its two directions.
struct Connection {
  FileDescriptor fd;
  Secret session;
  uint64_t sent = 0;
  uint64_t received = 0;
};

// Connects to the server and runs the handshake of store.h.
// `reached`, when given, is set once the TCP connection stands: a failure after it is the handshake's.
Result<Connection> openAuthenticated(const net::HostPort& server, const Secret& secret, Deadline deadline,
                                         bool retry, bool* reached = nullptr) {
  const std::string where = "store at " + server.toString() + ": authentication";
  FileDescriptor fd;
  std::string greeting(kGreetingBytes, '\0');
  for (;;) {
    CHAOSBED_ASSIGN_OR_RETURN(fd, net::connectTcp(server, deadline, retry));
    if (reached) *reached = true;
    // The server greets at accept. A connection that hears nothing was completed by the kernel (a SYN
    // cookie) while the listener's accept queue was full, and dropped: it never will. Connect again.
    const Deadline greeting_by = std::min(deadline, deadlineIn(kGreetingWait));
    Status s = net::readAll(fd.get(), std::as_writable_bytes(std::span(greeting)), greeting_by);
    if (s.isOk()) break;
    if (s.code() != StatusCode::kTimeout || SteadyClock::now() >= deadline) return s.withContext(where);
  }
  if (greeting.compare(0, kMagicBytes, kMagic, kMagicBytes) != 0)
    return Status::unavailable(where + ": not a chaosbed store (bad greeting)");
  const std::string client_nonce = Secret::nonce(kNonceBytes);
  const std::string transcript = greeting.substr(kMagicBytes) + client_nonce;
  const std::string answer = client_nonce + asString(secret.mac(kClientLabel, transcript));
  if (Status s = net::writeAll(fd.get(), std::as_bytes(std::span(answer)), deadline); !s.isOk())
    return s.withContext(where);
  std::string proof(Secret::kMacBytes, '\0');
  if (Status s = net::readAll(fd.get(), std::as_writable_bytes(std::span(proof)), deadline); !s.isOk())
    return s.withContext(where + " (the server closes a client whose secret is wrong)");
  if (!secret.verify(kServerLabel, transcript, proof))
    return Status::unavailable(where + ": the server did not prove the run's secret");
  return Connection{std::move(fd), secret.derive(kSessionLabel, transcript)};
}

class TcpStore final : public Store {
 public:
  // `first`: an authenticated connection to start the pool with, or none (a session connects on first use).
  TcpStore(net::HostPort server, const Secret& secret, Connection first, std::chrono::milliseconds op_timeout)
      : server_(std::move(server)), secret_(secret), op_timeout_(op_timeout) {
    if (first.fd.valid()) idle_.push_back(std::move(first));
  }

  std::unique_ptr<Store> session() override {
    return std::make_unique<TcpStore>(server_, secret_, Connection{}, op_timeout_);
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

  // Shuts down the connections of the gets in flight: their reads end at once. Each such connection is
  // dropped afterwards (the server sees it close), and the call reports Cancelled, not a lost server.
  void interruptGets() override {
    MutexLock lock(mu_);
    for (auto& [fd, interrupted] : in_get_) {
      ::shutdown(fd, SHUT_RDWR);
      interrupted = true;
    }
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

  Result<int64_t> append(const std::string& key, const std::string& value) override {
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kAppend, key, value, deadlineIn(op_timeout_)));
    if (reply.size() != 8) return Status::internal("store append '" + key + "': malformed reply");
    return static_cast<int64_t>(net::loadU64(reply.data()));
  }

  Result<std::vector<std::optional<std::string>>> peek(const std::vector<std::string>& keys) override {
    const std::string what = "store peek of " + std::to_string(keys.size()) + " keys";
    if (keys.size() > kMaxPeekKeys) return Status::invalidArgument(what + ": more than " + std::to_string(kMaxPeekKeys));
    std::string operand;
    net::appendU32(operand, static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) {
      net::appendU32(operand, static_cast<uint32_t>(k.size()));
      operand += k;
    }
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kPeek, {}, operand, deadlineIn(op_timeout_)));
    const Status malformed = Status::internal(what + ": malformed reply");
    if (reply.size() < 4 || net::loadU32(reply.data()) != keys.size()) return malformed;
    std::vector<std::optional<std::string>> values;
    values.reserve(keys.size());
    size_t at = 4;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (at >= reply.size()) return malformed;
      if (reply[at++] == '\0') {
        values.emplace_back();
        continue;
      }
      if (reply.size() - at < 4) return malformed;
      const uint32_t len = net::loadU32(reply.data() + at);
      at += 4;
      if (reply.size() - at < len) return malformed;
      values.emplace_back(reply.substr(at, len));
      at += len;
    }
    if (at != reply.size()) return malformed;
    return values;
  }

  Result<std::vector<std::string>> readList(const std::string& key, int64_t from, int max_entries) override {
    if (from < 0 || max_entries < 0) return Status::invalidArgument("store readList '" + key + "': negative range");
    std::string operand;
    net::appendU64(operand, static_cast<uint64_t>(from));
    net::appendU32(operand, static_cast<uint32_t>(max_entries));
    CHAOSBED_ASSIGN_OR_RETURN(std::string reply, call(kReadList, key, operand, deadlineIn(op_timeout_)));
    const Status malformed = Status::internal("store readList '" + key + "': malformed reply");
    if (reply.size() < 4) return malformed;
    const uint32_t count = net::loadU32(reply.data());
    std::vector<std::string> entries;
    size_t at = 4;
    for (uint32_t i = 0; i < count; ++i) {
      if (reply.size() - at < 4) return malformed;
      const uint32_t len = net::loadU32(reply.data() + at);
      at += 4;
      if (reply.size() - at < len) return malformed;
      entries.push_back(reply.substr(at, len));
      at += len;
    }
    if (at != reply.size()) return malformed;
    return entries;
  }

 private:
  static const char* opName(Op op) {
    switch (op) {
      case kSet: return "set";
      case kGet: return "get";
      case kAdd: return "add";
      case kContains: return "contains";
      case kAppend: return "append";
      case kReadList: return "readList";
      case kPeek: return "peek";
    }
    return "?";
  }

  Result<std::string> call(Op op, const std::string& key, const std::string& operand, Deadline deadline) {
    const std::string what = std::string("store ") + opName(op) + " '" + key + "' at " + server_.toString();
    if (key.size() + operand.size() + 5 > kMaxFrame) return Status::invalidArgument(what + ": request over 64 MiB");
    Connection conn;
    {
      MutexLock lock(mu_);
      if (server_lost_) return Status::unavailable(what + ": connection to the store server was lost");
      if (!idle_.empty()) {
        conn = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    // A server that accepted and then closed the handshake is alive: it closes one that did not answer
    // within its 2 s (this process was paused or starved of CPU, or the server was busy). The secret is
    // right (the pool's first connection, or its parent's, proved it), so try again until the deadline:
    // callers take an error here for a lost controller and stop (a simulated node at nice 19 beside 255
    // others did, in the test suite). The pause between tries spares a server that is out of descriptors.
    for (auto pause = std::chrono::milliseconds(20); !conn.fd.valid(); pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
      bool reached = false;
      auto connected = openAuthenticated(server_, secret_, deadline, /*retry=*/false, &reached);
      if (connected.isOk()) {
        conn = std::move(connected).value();
        break;
      }
      if (connected.status().code() == StatusCode::kTimeout) return Status::timeout(what + ": " + connected.status().message());
      if (!reached) return lost(what, connected.status());
      if (SteadyClock::now() + pause >= deadline) return Status::unavailable(what + ": " + connected.status().message());
      std::this_thread::sleep_for(pause);
    }
    std::string body(1, static_cast<char>(op));
    net::appendU32(body, static_cast<uint32_t>(key.size()));
    body += key;
    body += operand;
    const int fd = conn.fd.get();
    if (op == kGet) {
      MutexLock lock(mu_);
      in_get_[fd] = false;
    }
    std::string reply;
    Status io = exchange(conn, body, reply, deadline);
    bool interrupted = false;
    {
      MutexLock lock(mu_);
      if (op == kGet) {
        interrupted = in_get_[fd];
        in_get_.erase(fd);
      }
      if (io.isOk() && !interrupted) idle_.push_back(std::move(conn));
    }
    if (!io.isOk()) {
      if (interrupted) return Status::cancelled(what + ": interrupted");
      return io.code() == StatusCode::kTimeout ? Status::timeout(what + ": " + io.message()) : lost(what, io);
    }
    const std::string payload = reply.substr(1);
    switch (static_cast<Code>(reply[0])) {
      case kCodeOk: return payload;
      case kCodeTimeout: return Status::timeout(what + ": " + payload);
      case kCodeInvalid: return Status::invalidArgument(what + ": " + payload);
    }
    return Status::internal(what + ": unknown reply code " + std::to_string(reply[0]));
  }

  // Sends one request and reads its answer's body (code, payload), both sealed with the connection's key.
  // A reply that fails its MAC (altered, replayed, reordered, or not from the server) is DataLoss and the
  // connection is dropped: nothing read from it is used.
  static Status exchange(Connection& conn, const std::string& body, std::string& reply, Deadline deadline) {
    const std::string request = sealedFrame(conn.session, kRequestLabel, conn.sent++, body);
    CHAOSBED_RETURN_IF_ERROR(net::writeAll(conn.fd.get(), std::as_bytes(std::span(request)), deadline));
    char header[4];
    CHAOSBED_RETURN_IF_ERROR(net::readAll(conn.fd.get(), std::as_writable_bytes(std::span(header)), deadline));
    const uint32_t len = net::loadU32(header);
    if (len < 1 || len > kMaxFrame) return Status::dataLoss("malformed reply");
    std::string sealed(size_t{len} + Secret::kMacBytes, '\0');
    CHAOSBED_RETURN_IF_ERROR(net::readAll(conn.fd.get(), std::as_writable_bytes(std::span(sealed)), deadline));
    reply = sealed.substr(0, len);
    if (!conn.session.verify(kResponseLabel, macInput(conn.received++, reply), std::string_view(sealed).substr(len)))
      return Status::dataLoss("a reply failed its MAC (altered, replayed or reordered on the way)");
    return Status::ok();
  }

  // The server is gone (refused, reset, EOF): every later call fails at once, without reconnecting.
  Status lost(const std::string& what, const Status& why) {
    MutexLock lock(mu_);
    server_lost_ = true;
    idle_.clear();
    return Status::unavailable(what + ": " + why.message());
  }

  const net::HostPort server_;
  const Secret secret_;
  const std::chrono::milliseconds op_timeout_;
  Mutex mu_;
  std::vector<Connection> idle_ CHAOSBED_GUARDED_BY(mu_);
  std::map<int, bool> in_get_ CHAOSBED_GUARDED_BY(mu_);  // connections of the gets in flight: interrupted?
  bool server_lost_ CHAOSBED_GUARDED_BY(mu_) = false;
};

}  // namespace

Result<std::unique_ptr<Store>> connectStore(const std::string& address, const Secret& secret, Deadline deadline,
                                            std::chrono::milliseconds op_timeout) {
  CHAOSBED_ASSIGN_OR_RETURN(net::HostPort server, net::parseHostPort(address));
  auto conn = openAuthenticated(server, secret, deadline, /*retry=*/true);
  if (!conn.isOk()) return conn.status().withContext("store client");
  return std::unique_ptr<Store>(new TcpStore(std::move(server), secret, std::move(conn).value(), op_timeout));
}

}  // namespace chaosbed
