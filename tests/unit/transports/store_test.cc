// Bootstrap store: set/get/add/contains/append/readList, server-side blocking get with deadlines,
// concurrency through one client, a dead server turning into Unavailable, authentication, and bounds
// against clients that misbehave.

#include "transports/bootstrap/store.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "transports/bootstrap/net.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct StoreFixture : ::testing::Test {
  void SetUp() override {
    auto server = startStoreServer("127.0.0.1:0", secret_);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    server_ = std::move(server).value();
    auto store = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
  }
  Secret secret_ = *Secret::generate();
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFixture, SetThenGetReturnsTheValueAndSetOverwrites) {
  ASSERT_TRUE(store_->set("a", "one").isOk());
  auto v = store_->get("a", deadlineIn(seconds(1)));
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, "one");
  ASSERT_TRUE(store_->set("a", "two").isOk());
  EXPECT_EQ(*store_->get("a", deadlineIn(seconds(1))), "two");
}

// Descriptors registered in every epoll instance of this process (/proc/self/fdinfo lists one "tfd:" line
// per registration).
int epollRegistrations() {
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[eventpoll]") continue;
    std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
    for (std::string line; std::getline(info, line);) count += line.starts_with("tfd:");
  }
  return count;
}

// A child forked by the launcher holds copies of the server's descriptors until its exec: a client that
// disconnects meanwhile must still leave the server's event set, or the server reads a freed client
// (the controller crashed so during a 64-worker reclaim wave).
TEST_F(StoreFixture, ClientsThatLeaveWhileAForkedChildHoldsTheirDescriptorsAreForgotten) {
  int hold[2];
  ASSERT_EQ(::pipe(hold), 0);
  std::vector<std::unique_ptr<Store>> leaving;
  for (int i = 0; i < 16; ++i) {
    auto c = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
    ASSERT_TRUE(c.isOk()) << c.status().toString();
    ASSERT_TRUE((*c)->set("k" + std::to_string(i), "v").isOk());
    leaving.push_back(std::move(c).value());
  }
  const std::string address = server_->address();
  const uint16_t server_port = uint16_t(std::stoi(address.substr(address.rfind(':') + 1)));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // holds the server's descriptors, as a node between fork and exec does
    ::close(hold[1]);
    // ... but not the clients' ends (their connections are to the server's port), so that they can close.
    for (int fd = 3; fd < 1024; ++fd) {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0 && peer.sin_family == AF_INET &&
          ntohs(peer.sin_port) == server_port)
        ::close(fd);
    }
    char byte;
    (void)::read(hold[0], &byte, 1);  // returns at EOF: when the test closes its end
    ::_exit(0);
  }
  const int before = epollRegistrations();
  leaving.clear();  // their sockets reach EOF, but the child's copies keep them open
  // Round trips until the server has dropped them (it sees the EOFs in its own time), at most 5 s.
  for (const Deadline d = deadlineIn(seconds(5)); epollRegistrations() > before - 16 && SteadyClock::now() < d;)
    ASSERT_TRUE(store_->set("ping", "").isOk());
  EXPECT_EQ(epollRegistrations(), before - 16) << "clients that left are still in the server's event set";
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(store_->set("after", std::to_string(i)).isOk()) << i;
    auto v = store_->get("after", deadlineIn(seconds(2)));
    ASSERT_TRUE(v.isOk()) << v.status().toString();
    EXPECT_EQ(*v, std::to_string(i));
  }
  ::close(hold[1]);
  ::close(hold[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
}

TEST_F(StoreFixture, ValuesAreArbitraryBytes) {
  std::string binary("\0\x01\xff zero\0", 9);
  std::string big(3 << 20, 'x');
  ASSERT_TRUE(store_->set(std::string("k\0ey", 4), binary).isOk());
  ASSERT_TRUE(store_->set("big", big).isOk());
  EXPECT_EQ(*store_->get(std::string("k\0ey", 4), deadlineIn(seconds(1))), binary);
  EXPECT_EQ(*store_->get("big", deadlineIn(seconds(1))), big);
}

TEST_F(StoreFixture, AddCountsFromZeroAndIsReadableAsText) {
  EXPECT_EQ(*store_->add("n", 1), 1);
  EXPECT_EQ(*store_->add("n", 5), 6);
  EXPECT_EQ(*store_->add("n", -7), -1);
  EXPECT_EQ(*store_->get("n", deadlineIn(seconds(1))), "-1");
  ASSERT_TRUE(store_->set("text", "abc").isOk());
  auto bad = store_->add("text", 1);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("text"), std::string::npos) << bad.status().toString();
}

TEST_F(StoreFixture, ContainsDoesNotBlock) {
  EXPECT_FALSE(*store_->contains("x"));
  ASSERT_TRUE(store_->set("x", "").isOk());
  EXPECT_TRUE(*store_->contains("x"));
}

TEST_F(StoreFixture, GetOfAMissingKeyTimesOutAtTheDeadline) {
  auto start = SteadyClock::now();
  auto v = store_->get("never", start + milliseconds(100));
  auto took = SteadyClock::now() - start;
  ASSERT_FALSE(v.isOk());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never"), std::string::npos);
  EXPECT_GE(took, milliseconds(99));  // the server's clock rounds to milliseconds
  EXPECT_LT(took, milliseconds(5000));  // bounded, not a hang; generous for a loaded CI machine
  // The client stays usable after a timeout.
  EXPECT_TRUE(store_->set("after", "ok").isOk());
}

TEST_F(StoreFixture, BlockedGetIsAnsweredBySetFromAnotherThreadOfTheSameClient) {
  Result<std::string> got = Status::internal("not run");
  std::thread waiter([&] { got = store_->get("late", deadlineIn(seconds(10))); });
  // The waiter holds one connection while blocked; this set uses another and wakes it.
  ASSERT_TRUE(store_->set("late", "here").isOk());
  waiter.join();
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(*got, "here");
}

TEST_F(StoreFixture, InterruptedGetsEndCancelledAndTheClientStaysUsable) {
  Result<std::string> got = Status::internal("not run");
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    got = store_->get("never", deadlineIn(seconds(60)));
    done = true;
  });
  // The get may not have started at the first interruption: interrupt until it ends (as ControlChannel
  // does), long before its 60 s deadline.
  while (!done) {
    store_->interruptGets();
    std::this_thread::yield();
  }
  waiter.join();
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.status().code(), StatusCode::kCancelled) << got.status().toString();
  // Not a lost server: later calls, a blocking get among them, work.
  ASSERT_TRUE(store_->set("after", "1").isOk());
  auto again = store_->get("after", deadlineIn(seconds(5)));
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(*again, "1");
  auto timed = store_->get("still-never", deadlineIn(milliseconds(50)));
  EXPECT_EQ(timed.status().code(), StatusCode::kTimeout) << timed.status().toString();
}

TEST_F(StoreFixture, ManyClientsCountConcurrently) {
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto c = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
      ASSERT_TRUE(c.isOk());
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE((*c)->add("shared", 1).isOk());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store_->add("shared", 0), kClients * kAdds);
}

TEST_F(StoreFixture, DeadServerIsUnavailableNotAHang) {
  server_.reset();
  auto start = SteadyClock::now();
  auto v = store_->get("k", deadlineIn(seconds(10)));
  ASSERT_FALSE(v.isOk());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable) << v.status().toString();
  EXPECT_LT(SteadyClock::now() - start, seconds(2));
  EXPECT_EQ(store_->set("k", "v").code(), StatusCode::kUnavailable);
}

TEST_F(StoreFixture, ServerStoppingWhileAGetIsBlockedIsUnavailable) {
  Result<std::string> got = Status::internal("not run");
  std::thread waiter([&] { got = store_->get("never", deadlineIn(seconds(30))); });
  // Whether the get is already parked on the server or not yet sent when the server stops, it must end in
  // Unavailable promptly rather than wait for its 30 s deadline.
  ASSERT_TRUE(store_->set("sync", "1").isOk());
  server_.reset();
  waiter.join();
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().toString();
}

TEST_F(StoreFixture, AppendNumbersEntriesAndReadListReturnsWhatExists) {
  EXPECT_EQ(*store_->append("list", "a"), 0);
  EXPECT_EQ(*store_->append("list", ""), 1);
  EXPECT_EQ(*store_->append("list", std::string(100000, 'c')), 2);
  auto all = store_->readList("list", 0, 100);
  ASSERT_TRUE(all.isOk()) << all.status().toString();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0], "a");
  EXPECT_EQ((*all)[1], "");
  EXPECT_EQ((*all)[2].size(), 100000u);
  EXPECT_EQ(store_->readList("list", 1, 1)->size(), 1u);
  EXPECT_TRUE(store_->readList("list", 3, 10)->empty());
  EXPECT_TRUE(store_->readList("no such list", 0, 10)->empty());
  EXPECT_FALSE(*store_->contains("list")) << "lists live apart from keys";
}

// A TCP relay in front of the store that cuts the handshakes of the connections numbered `cut` to
// `last_cut` (from 1) right after the server's greeting, as the server does to a client that does not
// answer within its 2 s. `silent`: it holds those connections open and says nothing on them instead, as
// the kernel does with a connection it completed while the listener's accept queue was full.
class HandshakeCutter {
 public:
  HandshakeCutter(const std::string& upstream, int cut, int last_cut, bool silent = false)
      : upstream_(*net::parseHostPort(upstream)), cut_(cut), last_cut_(last_cut), silent_(silent) {
    net::HostPort bound;
    listener_ = std::move(net::listenTcp(*net::parseHostPort("127.0.0.1:0"), &bound).value());
    address_ = bound.toString();
    thread_ = std::thread([this] { serve(); });
  }
  ~HandshakeCutter() {
    stop_ = true;
    ::shutdown(listener_.get(), SHUT_RDWR);
    thread_.join();
    for (auto& t : relays_) t.join();
  }
  const std::string& address() const { return address_; }
  int accepted() const { return accepted_.load(); }
  size_t upBytes() const { return up_bytes_.load(); }  // relayed from clients to the server, in all

 private:
  void serve() {
    while (!stop_) {
      pollfd p = {listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      auto client = net::acceptTcp(listener_.get());  // non-blocking: invalid when nothing is waiting
      if (!client.isOk()) return;
      if (!client->valid()) continue;
      const int number = ++accepted_;
      auto server = net::connectTcp(upstream_, deadlineIn(seconds(5)), false);
      if (!server.isOk()) return;
      relays_.emplace_back([this, number, c = std::move(*client), s = std::move(*server)]() mutable {
        if (number >= cut_ && number <= last_cut_ && silent_) {
          while (!stop_) std::this_thread::sleep_for(milliseconds(10));
          return;
        }
        if (number >= cut_ && number <= last_cut_) {
          std::string greeting(36, '\0');
          if (net::readAll(s.get(), std::as_writable_bytes(std::span(greeting)), deadlineIn(seconds(5))).isOk())
            (void)net::writeAll(c.get(), std::as_bytes(std::span(greeting)), deadlineIn(seconds(5)));
          return;  // both ends close here
        }
        relay(c.get(), s.get());
      });
    }
  }
  void relay(int a, int b) {
    pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
    char buf[4096];
    while (!stop_) {
      if (::poll(fds, 2, 100) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        if (fds[i].fd == a) up_bytes_ += size_t(n);
        if (!net::writeAll(fds[1 - i].fd, std::as_bytes(std::span(buf, size_t(n))), deadlineIn(seconds(5))).isOk()) return;
      }
    }
  }

  net::HostPort upstream_;
  const int cut_, last_cut_;
  const bool silent_;
  net::FileDescriptor listener_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<size_t> up_bytes_{0};
  std::vector<std::thread> relays_;
  std::thread thread_;
};

TEST_F(StoreFixture, AHandshakeTheServerCutIsTriedAgainWithinTheCall) {
  // Connection 1 is the client's first; the blocked get below keeps it busy, so the set opens connection 2,
  // whose handshake is cut. A paused or starved node meets this when it wakes: the call must not fail (its
  // caller would take the controller for lost and stop, core/runtime/control.h) but connect again.
  HandshakeCutter cutter(server_->address(), 2, 2);
  auto client = connectStore(cutter.address(), secret_, deadlineIn(seconds(5)));
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  Result<std::string> got = Status::internal("not run");
  std::thread waiter([&] { got = (*client)->get("answer", deadlineIn(seconds(10))); });
  // The get has reached the relay once more than the handshake's answer (64 bytes) went up connection 1.
  for (Deadline d = deadlineIn(seconds(5)); cutter.upBytes() <= 64 && SteadyClock::now() < d;)
    std::this_thread::sleep_for(milliseconds(1));
  ASSERT_GT(cutter.upBytes(), 64u);
  const Status set = (*client)->set("answer", "42");  // connection 2 is cut, connection 3 relayed whole
  EXPECT_TRUE(set.isOk()) << set.toString();
  EXPECT_EQ(cutter.accepted(), 3);
  waiter.join();
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(*got, "42");
}

TEST_F(StoreFixture, AConnectionThatIsNeverGreetedIsOpenedAgain) {
  // Connection 1, the client's first, is taken and never answered (the kernel completed it while the
  // listener's accept queue was full, then dropped it): the client connects again within the deadline
  // instead of waiting for a greeting until it passes (hundreds of nodes starting at once hit this).
  HandshakeCutter cutter(server_->address(), 1, 1, /*silent=*/true);
  auto client = connectStore(cutter.address(), secret_, deadlineIn(seconds(30)));
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  EXPECT_EQ(cutter.accepted(), 2);
  EXPECT_TRUE((*client)->set("x", "1").isOk());
}

TEST_F(StoreFixture, AServerThatCutsEveryHandshakeFailsTheCallAtItsDeadlineNotForGood) {
  // Connections 2 to 1000 are cut: the call tries until its deadline (500 ms here), then says Unavailable;
  // the store is not marked lost, so a later call, once handshakes go through again, succeeds.
  HandshakeCutter cutter(server_->address(), 2, 1000);
  auto client = connectStore(cutter.address(), secret_, deadlineIn(seconds(5)), milliseconds(500));
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  // Holds connection 1 until the key is set below. (A long poll left to time out instead raced the client's
  // 50 ms of slack under ctest -j2: given up, connection 1 closed, and the last set found only cut ones.)
  std::thread waiter([&] { (void)(*client)->get("released", deadlineIn(seconds(10))); });
  for (Deadline d = deadlineIn(seconds(5)); cutter.upBytes() <= 64 && SteadyClock::now() < d;)
    std::this_thread::sleep_for(milliseconds(1));
  const Deadline start = SteadyClock::now();
  const Status set = (*client)->set("x", "1");
  const auto took = SteadyClock::now() - start;
  EXPECT_EQ(set.code(), StatusCode::kUnavailable) << set.toString();
  EXPECT_GE(cutter.accepted(), 3) << "the call did not try again";
  EXPECT_LT(took, seconds(2)) << "the call overran its deadline";
  ASSERT_TRUE(store_->set("released", "1").isOk());  // straight to the server, not through the cutter
  waiter.join();  // connection 1 is idle again: the next call reuses it
  EXPECT_TRUE((*client)->set("x", "2").isOk());
}

TEST_F(StoreFixture, AClientWithAnotherSecretIsRefused) {
  auto other = connectStore(server_->address(), *Secret::generate(), deadlineIn(seconds(5)));
  ASSERT_FALSE(other.isOk());
  EXPECT_NE(other.status().message().find("authentication"), std::string::npos) << other.status().toString();
  EXPECT_TRUE(store_->set("still", "works").isOk());
}

long rssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// A raw connection that completes the handshake of store.h and seals its own frames (written here from
// store.h's description, not with the store's code), for tests that misbehave after it.
struct RawClient {
  net::FileDescriptor fd;
  Secret session;
  uint64_t sent = 0;

  // u32 length, body, HMAC(K, "chaosbed store request", u64 seq | body).
  std::string seal(const std::string& body, uint64_t seq) const {
    std::string covered;
    net::appendU64(covered, seq);
    covered += body;
    const auto mac = session.mac("chaosbed store request", covered);
    std::string out;
    net::appendU32(out, uint32_t(body.size()));
    out += body;
    out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
    return out;
  }
  std::string next(const std::string& body) { return seal(body, sent++); }
  bool send(const std::string& bytes) const {
    return net::writeAll(fd.get(), std::as_bytes(std::span(bytes)), deadlineIn(seconds(5))).isOk();
  }
  // The next reply's code (its body's first byte), or -1 when the server closed the connection instead.
  int replyCode() const {
    char header[5];
    if (!net::readAll(fd.get(), std::as_writable_bytes(std::span(header)), deadlineIn(seconds(5))).isOk()) return -1;
    std::string rest(net::loadU32(header) - 1 + Secret::kMacBytes, '\0');
    if (!net::readAll(fd.get(), std::as_writable_bytes(std::span(rest)), deadlineIn(seconds(5))).isOk()) return -1;
    return header[4];
  }
};

RawClient authenticatedSocket(const std::string& address, const Secret& secret) {
  auto where = net::parseHostPort(address);
  auto fd = net::connectTcp(*where, deadlineIn(seconds(5)), false);
  EXPECT_TRUE(fd.isOk());
  std::string greeting(36, '\0');
  EXPECT_TRUE(net::readAll(fd->get(), std::as_writable_bytes(std::span(greeting)), deadlineIn(seconds(5))).isOk());
  const std::string nonce(32, 'n');
  std::string transcript = greeting.substr(4);
  transcript.append(nonce);
  const auto mac = secret.mac("chaosbed store client", transcript);
  std::string answer = nonce;
  answer.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  EXPECT_TRUE(net::writeAll(fd->get(), std::as_bytes(std::span(answer)), deadlineIn(seconds(5))).isOk());
  std::string proof(32, '\0');
  EXPECT_TRUE(net::readAll(fd->get(), std::as_writable_bytes(std::span(proof)), deadlineIn(seconds(5))).isOk());
  return RawClient{std::move(fd).value(), secret.derive("chaosbed store session", transcript)};
}

std::string requestBody(char op, const std::string& key, const std::string& operand) {
  std::string out(1, op);
  net::appendU32(out, uint32_t(key.size()));
  out.append(key);
  out.append(operand);
  return out;
}

std::string getBody(const std::string& key) {
  std::string timeout;
  net::appendU64(timeout, 0);
  return requestBody(2, key, timeout);
}

TEST_F(StoreFixture, PeekReadsManyKeysInOneRequestAndNeverWaits) {
  ASSERT_TRUE(store_->set("a", "1").isOk());
  ASSERT_TRUE(store_->set("c", std::string("\0three", 6)).isOk());
  ASSERT_TRUE(store_->set("empty", "").isOk());
  auto values = store_->peek({"a", "b", "c", "empty", "a"});
  ASSERT_TRUE(values.isOk()) << values.status().toString();
  ASSERT_EQ(values->size(), 5u);
  EXPECT_EQ((*values)[0], std::optional<std::string>("1"));
  EXPECT_EQ((*values)[1], std::nullopt) << "a missing key is absent, not empty";
  EXPECT_EQ((*values)[2], std::optional<std::string>(std::string("\0three", 6)));
  EXPECT_EQ((*values)[3], std::optional<std::string>(""));
  EXPECT_EQ((*values)[4], std::optional<std::string>("1"));
  auto none = store_->peek({});
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
  std::vector<std::string> many(1000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = "k" + std::to_string(i);
  ASSERT_TRUE(store_->set("k999", "last").isOk());
  auto lots = store_->peek(many);
  ASSERT_TRUE(lots.isOk());
  EXPECT_EQ(std::count(lots->begin(), lots->end(), std::nullopt), 999);
  EXPECT_EQ(lots->back(), std::optional<std::string>("last"));
}

TEST_F(StoreFixture, APeekWhoseKeyLengthsOverrunItsFrameIsRefused) {
  RawClient raw = authenticatedSocket(server_->address(), secret_);
  std::string body(1, char(7));  // peek
  net::appendU32(body, 0);       // no key
  net::appendU32(body, 2);       // two keys ...
  net::appendU32(body, 100);     // ... the first 100 bytes long, of which 3 follow
  body += "abc";
  ASSERT_TRUE(raw.send(raw.next(body)));
  EXPECT_EQ(raw.replyCode(), 2) << "a malformed peek must be refused as invalid";
  EXPECT_TRUE(store_->set("still", "works").isOk());
}

// A relay that passed the handshake through (it needs no secret for that) can still write, alter and replay
// bytes; each frame's MAC under the connection's own key and sequence number is what stops it (store.h).
TEST_F(StoreFixture, ARequestAlteredInjectedReplayedOrReorderedClosesItsConnectionUnheard) {
  struct Case {
    const char* what;
    std::function<std::string(RawClient&)> bytes;  // sent after one good set of "k" = "before"
  };
  const std::vector<Case> cases = {
      {"altered", [](RawClient& c) {
         std::string f = c.next(requestBody(1, "k", "forged"));
         f[f.size() - Secret::kMacBytes - 1] ^= 1;  // the value's last byte: "forgee"
         return f;
       }},
      {"injected with a MAC under another key", [](RawClient& c) {
         const RawClient other{net::FileDescriptor(), *Secret::generate(), 0};
         return other.seal(requestBody(1, "k", "forged"), c.sent);
       }},
      {"injected without a MAC", [](RawClient&) {
         std::string f;
         net::appendU32(f, uint32_t(requestBody(1, "k", "forged").size()));
         return f + requestBody(1, "k", "forged") + std::string(Secret::kMacBytes, '\0');
       }},
      {"replayed", [](RawClient& c) { return c.seal(requestBody(1, "k", "before"), 0); }},
      {"reordered (a later sequence number first)", [](RawClient& c) { return c.seal(requestBody(1, "k", "forged"), c.sent + 1); }},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    RawClient raw = authenticatedSocket(server_->address(), secret_);
    ASSERT_TRUE(raw.send(raw.next(requestBody(1, "k", "before"))));
    ASSERT_EQ(raw.replyCode(), 0) << "a well-sealed request is answered";
    ASSERT_TRUE(raw.send(test.bytes(raw)));
    EXPECT_EQ(raw.replyCode(), -1) << "the server closes the connection instead of answering";
    auto value = store_->get("k", deadlineIn(seconds(5)));
    ASSERT_TRUE(value.isOk()) << value.status().toString();
    EXPECT_EQ(*value, "before") << "nothing of the refused frame was applied";
  }
}

// A relay that alters a reply: the client drops the connection and reports the store as lost, never the
// altered value.
TEST_F(StoreFixture, AReplyAlteredOnTheWayIsRefusedByTheClient) {
  ASSERT_TRUE(store_->set("k", "true value").isOk());
  net::HostPort relay_at;
  auto listener = net::listenTcp(*net::parseHostPort("127.0.0.1:0"), &relay_at);
  ASSERT_TRUE(listener.isOk()) << listener.status().toString();
  std::thread relay([&] {
    pollfd incoming{listener->get(), POLLIN, 0};
    if (::poll(&incoming, 1, 5000) != 1) return;
    auto client = net::acceptTcp(listener->get());
    auto server = net::connectTcp(*net::parseHostPort(server_->address()), deadlineIn(seconds(5)), false);
    if (!client.isOk() || !server.isOk()) return;
    // Greeting and proof (68 bytes) pass untouched; the first reply's code (byte 72: after its length) is
    // flipped from OK to Timeout.
    constexpr size_t kAltered = 68 + 4;
    size_t from_server = 0;
    pollfd fds[2] = {{client->get(), POLLIN, 0}, {server->get(), POLLIN, 0}};
    while (::poll(fds, 2, 5000) > 0) {
      char buf[65536];
      const bool up = fds[0].revents != 0;
      const ssize_t n = ::recv(up ? client->get() : server->get(), buf, sizeof buf, 0);
      if (n <= 0) return;
      if (!up) {
        if (from_server <= kAltered && kAltered < from_server + size_t(n)) buf[kAltered - from_server] ^= 1;
        from_server += size_t(n);
      }
      if (::send(up ? server->get() : client->get(), buf, size_t(n), MSG_NOSIGNAL) != n) return;
    }
  });
  auto store = connectStore(relay_at.toString(), secret_, deadlineIn(seconds(5)));
  EXPECT_TRUE(store.isOk()) << "the handshake went through the relay untouched: " << store.status().toString();
  if (store.isOk()) {
    auto value = (*store)->get("k", deadlineIn(seconds(5)));
    EXPECT_FALSE(value.isOk()) << "an altered reply was taken: " << *value;
    EXPECT_EQ(value.status().code(), StatusCode::kUnavailable) << value.status().toString();
    EXPECT_NE(value.status().message().find("MAC"), std::string::npos) << value.status().toString();
    EXPECT_FALSE((*store)->set("after", "x").isOk()) << "a client that saw a forged reply trusts that server no more";
    store->reset();
  }
  ::shutdown(listener->get(), SHUT_RDWR);
  relay.join();
  EXPECT_TRUE(store_->set("still", "works").isOk());
}

TEST_F(StoreFixture, MisbehavingClientsNeitherSlowLegitimateCallsNorGrowTheServer) {
  // Larger than any value of the control plane (addresses, JSON): a client may have one answer and 64 KiB
  // more unread (store.h), so this bounds what each hostile client can make the server hold.
  ASSERT_TRUE(store_->set("big", std::string(64 << 10, 'b')).isOk());
  const long rss_before = rssKiB();
  std::vector<net::FileDescriptor> hostile;
  auto where = net::parseHostPort(server_->address());
  // 120 idle connections that never authenticate, 30 that send garbage, 50 authenticated clients that
  // pipeline thousands of gets of a 64 KiB value and never read an answer.
  for (int i = 0; i < 150; ++i) {
    auto fd = net::connectTcp(*where, deadlineIn(seconds(5)), false);
    ASSERT_TRUE(fd.isOk()) << fd.status().toString();
    if (i >= 120) {
      const std::string garbage(65536, char(i));
      (void)::send(fd->get(), garbage.data(), garbage.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    hostile.push_back(std::move(fd).value());
  }
  for (int i = 0; i < 50; ++i) {
    RawClient raw = authenticatedSocket(server_->address(), secret_);
    std::string pipelined;
    for (int j = 0; j < 2000; ++j) pipelined += raw.next(getBody("big"));
    (void)::send(raw.fd.get(), pipelined.data(), pipelined.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    hostile.push_back(std::move(raw.fd));
  }
  std::vector<double> ms_each;
  const std::vector<std::string> keys = {"k0", "k1", "k2", "k3", "k4", "k5", "k6"};
  for (int i = 0; i < 200; ++i) {
    const auto t0 = SteadyClock::now();
    ASSERT_TRUE(store_->set(keys[size_t(i) % keys.size()], "v").isOk());
    ASSERT_TRUE(store_->get(keys[size_t(i) % keys.size()], deadlineIn(seconds(5))).isOk());
    ms_each.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count());
  }
  std::sort(ms_each.begin(), ms_each.end());
  const double p95_ms = ms_each[ms_each.size() * 95 / 100], worst_ms = ms_each.back();
  const long growth_kib = rssKiB() - rss_before;
  std::printf("[store] 200 hostile clients: legitimate set+get p95 %.2f ms, slowest %.2f ms; RSS growth %ld KiB\n",
              p95_ms, worst_ms, growth_kib);
  // A liveness bound, not a speed figure (bench/ measures speed): a server that queued legitimate calls behind
  // hostile ones (it used to) makes each wait out a hostile frame's 10 s timeout or megabytes of unread
  // answers, seconds per call. 100 ms at p95 is 100x a quiet machine's figure (about 1 ms) and still far
  // below that; 10 ms, the old bound, was crossed (10.5 ms) with another test on the second core.
  EXPECT_LT(p95_ms, 100.0);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  std::printf("[store] RSS growth not checked: a sanitizer's shadow memory grows with every allocation\n");
#else
  EXPECT_LT(growth_kib, 16 * 1024);
#endif
}

TEST(Store, BadAddressesAreNamed) {
  const Secret secret = *Secret::generate();
  auto s = startStoreServer("127.0.0.1", secret);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("127.0.0.1"), std::string::npos);
  auto c = connectStore("localhost:99999", secret, deadlineIn(milliseconds(100)));
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("99999"), std::string::npos);
}

TEST(Store, ConnectToNothingTimesOutAtTheDeadline) {
  // Find a free port by binding and releasing a server.
  const Secret secret = *Secret::generate();
  std::string address;
  {
    auto s = startStoreServer("127.0.0.1:0", secret);
    ASSERT_TRUE(s.isOk());
    address = (*s)->address();
  }
  auto start = SteadyClock::now();
  auto c = connectStore(address, secret, start + milliseconds(150));
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout) << c.status().toString();
  EXPECT_LT(SteadyClock::now() - start, seconds(2));
}

}  // namespace
}  // namespace chaosbed
