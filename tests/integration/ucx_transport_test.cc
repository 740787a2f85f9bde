// Multi-process tests of the UCX transport: every rank is a forked process (tests/testing/multiprocess.h)
// rendezvousing through the parent's bootstrap store. Children return non-zero and report "FAIL ..." on a
// wrong result; the parent asserts exit codes, reports and timings.

#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "tests/testing/multiprocess.h"
#include "tests/testing/sockets.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildContext;
using testing::MultiProcess;

std::unique_ptr<Transport> makeTransport(ChildContext& c, const std::string& prefix = "ucxtest") {
  return testing::ucxTransport(c, prefix);
}

// Deterministic content that differs per size, sender and offset.
std::vector<std::byte> pattern(size_t n, int from) {
  std::vector<std::byte> v(n);
  uint32_t x = static_cast<uint32_t>(n * 2654435761u) ^ static_cast<uint32_t>(from * 40503u);
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<std::byte>(x >> 24);
  }
  return v;
}

// Reaps every child still running and expects each to have exited 0.
void expectAllExitZero(MultiProcess& mp, seconds limit) {
  std::vector<int> codes;
  ASSERT_TRUE(mp.waitAllExit(deadlineIn(limit), &codes).isOk());
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == -1) continue;  // reaped earlier by the test
    std::string log;
    for (const auto& line : mp.reports(static_cast<int>(r))) log += "\n  " + line;
    EXPECT_EQ(codes[r], 0) << "rank " << r << " reported:" << log;
  }
}

TEST(UcxTransport, SendRecvFromZeroBytesTo64MiBBothDirections) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    auto t = makeTransport(c);
    const int other = 1 - c.rank();
    const size_t sizes[] = {0, 1, 8, 4095, 4096, 65537, 1 << 20, 16 << 20, 64 << 20};
    Tag tag = 7;
    for (size_t n : sizes) {
      for (int sender = 0; sender < 2; ++sender, ++tag) {
        Deadline d = deadlineIn(seconds(30));
        if (c.rank() == sender) {
          auto data = pattern(n, sender);
          if (Status s = send(*t, other, tag, data, d); !s.isOk()) return c.fail("send " + std::to_string(n) + ": " + s.toString());
        } else {
          std::vector<std::byte> got(n + 16, std::byte{0x5a});  // larger than needed: received size is checked
          RequestPtr r = t->irecv(other, tag, got);
          if (Status s = wait(*t, r, d); !s.isOk()) return c.fail("recv " + std::to_string(n) + ": " + s.toString());
          if (r->receivedBytes() != n) return c.fail("received " + std::to_string(r->receivedBytes()) + " of " + std::to_string(n));
          if (r->source() != other) return c.fail("source " + std::to_string(r->source()));
          auto want = pattern(n, sender);
          if (n > 0 && std::memcmp(got.data(), want.data(), n) != 0) return c.fail("content mismatch at " + std::to_string(n));
          if (got[n] != std::byte{0x5a}) return c.fail("wrote past the message at " + std::to_string(n));
        }
      }
    }
    c.report("done");
    return 0;
  }).isOk());
  expectAllExitZero(mp, seconds(120));
}

TEST(UcxTransport, WildcardReceiveReportsEachSender) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(3, [](ChildContext& c) {
    auto t = makeTransport(c);
    const Tag tag = 42;
    const size_t n = 256 << 10;  // rendezvous-sized
    if (c.rank() != 0) {
      auto data = pattern(n, c.rank());
      Status s = send(*t, 0, tag, data, deadlineIn(seconds(20)));
      return s.isOk() ? 0 : c.fail(s.toString());
    }
    std::vector<std::vector<std::byte>> bufs(2, std::vector<std::byte>(n));
    std::vector<RequestPtr> reqs;
    for (auto& b : bufs) reqs.push_back(t->irecv(kAnyPeer, tag, b));
    if (Status s = waitAll(*t, reqs, deadlineIn(seconds(20))); !s.isOk()) return c.fail(s.toString());
    int seen = 0;
    for (size_t i = 0; i < 2; ++i) {
      int src = reqs[i]->source();
      if (src != 1 && src != 2) return c.fail("source " + std::to_string(src));
      if (reqs[i]->peer() != kAnyPeer) return c.fail("peer() of a wildcard receive");
      seen |= 1 << src;
      if (bufs[i] != pattern(n, src)) return c.fail("content from " + std::to_string(src));
    }
    return seen == 6 ? 0 : c.fail("did not hear from both senders");
  }).isOk());
  expectAllExitZero(mp, seconds(60));
}

// progressBusySeconds() is the time progress() moved bytes, not the time it waited: a caller books the
// difference across its wait as transfer (the parameter server's receives), the rest as idle.
TEST(UcxTransport, ProgressBusySecondsCountsMovingBytesNotWaiting) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    auto t = makeTransport(c);
    const size_t n = 16 << 20;
    std::byte go{1};
    if (c.rank() == 0) {
      std::vector<std::byte> got(1);
      if (Status s = wait(*t, t->irecv(1, 1, got), deadlineIn(seconds(20))); !s.isOk()) return c.fail("go: " + s.toString());
      auto data = pattern(n, 0);
      Status s = send(*t, 1, 2, data, deadlineIn(seconds(20)));
      return s.isOk() ? 0 : c.fail("send: " + s.toString());
    }
    // Nothing can arrive before the go: 300 ms of progress() with nothing to do.
    const double before_idle = t->progressBusySeconds();
    for (const Deadline until = deadlineIn(milliseconds(300)); SteadyClock::now() < until;) t->progress(until);
    const double idle_busy = t->progressBusySeconds() - before_idle;
    if (idle_busy > 0.03) return c.fail("300 ms of waiting counted " + std::to_string(idle_busy) + " s busy");
    if (Status s = send(*t, 0, 1, std::span(&go, 1), deadlineIn(seconds(20))); !s.isOk()) return c.fail("go: " + s.toString());
    std::vector<std::byte> got(n);
    const double before = t->progressBusySeconds();
    const auto started = SteadyClock::now();
    if (Status s = wait(*t, t->irecv(0, 2, got), deadlineIn(seconds(20))); !s.isOk()) return c.fail("recv: " + s.toString());
    const double wall = std::chrono::duration<double>(SteadyClock::now() - started).count();
    const double busy = t->progressBusySeconds() - before;
    if (got != pattern(n, 0)) return c.fail("content");
    if (busy <= 0 || busy > wall)
      return c.fail("receiving 16 MiB in " + std::to_string(wall) + " s counted " + std::to_string(busy) + " s busy");
    return 0;
  }).isOk());
  expectAllExitZero(mp, seconds(60));
}

TEST(UcxTransport, BadArgumentsAndTruncationAreErrorsNotCrashes) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    auto t = makeTransport(c);
    std::vector<std::byte> buf(64);
    auto bad_peer = t->isend(5, 1, buf);
    if (!bad_peer->isComplete() || bad_peer->status().code() != StatusCode::kInvalidArgument) return c.fail("peer 5 accepted");
    auto bad_tag = t->irecv(0, kMaxUserTag + 1, buf);
    if (bad_tag->status().code() != StatusCode::kInvalidArgument) return c.fail("49-bit tag accepted");
    if (c.rank() == 0) {
      std::vector<std::byte> big(100);
      Status s = send(*t, 1, 9, big, deadlineIn(seconds(10)));
      if (!s.isOk()) return c.fail(s.toString());
    } else {
      Status s = recv(*t, 0, 9, buf, deadlineIn(seconds(10)));
      if (s.code() != StatusCode::kInvalidArgument) return c.fail("truncation gave " + s.toString());
    }
    // The pair still works afterwards.
    int v = c.rank();
    int got = -1;
    auto r = t->irecv(1 - c.rank(), 10, asWritableBytes(std::span(&got, 1)));
    if (Status s = send(*t, 1 - c.rank(), 10, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !s.isOk()) return c.fail(s.toString());
    if (Status s = wait(*t, r, deadlineIn(seconds(10))); !s.isOk() || got != 1 - c.rank()) return c.fail("after: " + s.toString());
    return 0;
  }).isOk());
  expectAllExitZero(mp, seconds(60));
}

// Rank 1 is SIGKILLed while rank 0 has a receive and a rendezvous send pending with it and rank 2 is idle.
TEST(UcxTransport, KilledPeerFailsPendingAndLaterOperationsWithPeerLostWithinOneSecond) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(3, [](ChildContext& c) {
    auto t = makeTransport(c);
    if (c.rank() == 1) {
      c.report("ready");
      for (;;) t->progress(deadlineIn(seconds(1)));  // alive until killed, never receiving
    }
    if (c.rank() == 2) {
      // Notices the death of a peer it is not talking to, then still exchanges with rank 0.
      uint64_t before = t->failureCount();
      Deadline d = deadlineIn(seconds(10));
      while (t->failureCount() == before && SteadyClock::now() < d) t->progress(d);
      Status s = t->peerStatus(1);
      if (s.code() != StatusCode::kPeerLost || s.peer() != 1) return c.fail("rank 2 sees " + s.toString());
      int v = 0;
      Status r = recv(*t, 0, 3, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(10)));
      if (!r.isOk() || v != 1234) return c.fail("rank 2 recv: " + r.toString());
      Status told = c.store().set("rank2-received", "1");
      return told.isOk() ? 0 : c.fail(told.toString());
    }
    std::vector<std::byte> in(1024), out(32 << 20, std::byte{1});
    std::vector<RequestPtr> reqs;
    reqs.push_back(t->irecv(1, 1, in));
    reqs.push_back(t->isend(1, 2, out));
    t->progress(deadlineIn(milliseconds(1)));
    c.report("posted");
    Status s = waitAll(*t, reqs, deadlineIn(seconds(10)));
    c.report("lost " + std::string(statusCodeName(s.code())) + " " + std::to_string(s.peer()));
    for (auto& r : reqs) {
      if (!r->isComplete()) return c.fail("a request is still pending");
      if (r->status().code() != StatusCode::kPeerLost || r->status().peer() != 1) return c.fail("request: " + r->status().toString());
    }
    // Later operations fail at once with the same sticky status.
    auto later = t->isend(1, 4, in);
    if (!later->isComplete() || later->status().code() != StatusCode::kPeerLost) return c.fail("later: " + later->status().toString());
    auto later_recv = t->irecv(1, 4, in);
    if (!later_recv->isComplete() || later_recv->status().peer() != 1) return c.fail("later recv: " + later_recv->status().toString());
    int v = 1234;
    Status r = send(*t, 2, 3, asBytes(std::span(&v, 1)), deadlineIn(seconds(10)));
    if (!r.isOk()) return c.fail("send to rank 2: " + r.toString());
    // A closed transport counts as a failed peer (transport.h): a receive that rank 2 posts after our close
    // would fail with PeerLost, so stay until it has the message.
    auto received = c.store().get("rank2-received", deadlineIn(seconds(10)));
    return received.isOk() ? 0 : c.fail("waiting for rank 2: " + received.status().toString());
  }).isOk());
  ASSERT_TRUE(mp.waitFor(1, "ready", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.waitFor(0, "posted", deadlineIn(seconds(30))).isOk());
  auto killed_at = SteadyClock::now();
  ASSERT_TRUE(mp.signal(1, SIGKILL).isOk());
  auto lost = mp.waitFor(0, "lost", deadlineIn(seconds(10)));
  auto detection = SteadyClock::now() - killed_at;
  ASSERT_TRUE(lost.isOk()) << lost.status().toString();
  EXPECT_EQ(*lost, "lost PeerLost 1");
  EXPECT_LT(detection, seconds(1)) << "detection took "
                                   << std::chrono::duration_cast<milliseconds>(detection).count() << " ms";
  const int detection_ms = static_cast<int>(std::chrono::duration_cast<milliseconds>(detection).count());
  RecordProperty("detection_ms", detection_ms);
  std::printf("SIGKILL -> PeerLost at the survivor: %d ms\n", detection_ms);
  EXPECT_EQ(*mp.waitExit(1, deadlineIn(seconds(5))), 128 + SIGKILL);
  expectAllExitZero(mp, seconds(30));
}

// A paused peer is not dead: only the caller's deadline ends the wait; after SIGCONT the pair works again.
TEST(UcxTransport, PausedPeerTimesOutAtTheDeadlineAndRecoversAfterContinue) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    auto t = makeTransport(c);
    int v = 0;
    if (c.rank() == 1) {
      c.report("ready");
      // Stopped here by the parent; after SIGCONT, answer rank 0.
      Status s = recv(*t, 0, 1, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(30)));
      if (!s.isOk() || v != 77) return c.fail("rank 1 recv: " + s.toString());
      return send(*t, 0, 2, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))).isOk() ? 0 : c.fail("rank 1 send");
    }
    if (auto go = c.store().get("paused", deadlineIn(seconds(30))); !go.isOk()) return c.fail(go.status().toString());
    auto start = SteadyClock::now();
    Status s = recv(*t, 1, 5, asWritableBytes(std::span(&v, 1)), start + milliseconds(300));
    auto took = SteadyClock::now() - start;
    if (s.code() != StatusCode::kTimeout) return c.fail("paused peer gave " + s.toString());
    if (took < milliseconds(300) || took > milliseconds(800))
      return c.fail("timeout after " + std::to_string(std::chrono::duration_cast<milliseconds>(took).count()) + " ms");
    if (!t->peerStatus(1).isOk()) return c.fail("a timeout must not fail the peer: " + t->peerStatus(1).toString());
    c.report("timeout");
    if (auto go = c.store().get("continued", deadlineIn(seconds(30))); !go.isOk()) return c.fail(go.status().toString());
    v = 77;
    if (Status r = send(*t, 1, 1, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk()) return c.fail(r.toString());
    v = 0;
    if (Status r = recv(*t, 1, 2, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk() || v != 77)
      return c.fail("after continue: " + r.toString());
    return 0;
  }).isOk());
  ASSERT_TRUE(mp.waitFor(1, "ready", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.signal(1, SIGSTOP).isOk());
  ASSERT_TRUE(mp.store().set("paused", "1").isOk());
  auto timeout = mp.waitFor(0, "timeout", deadlineIn(seconds(10)));
  ASSERT_TRUE(timeout.isOk()) << timeout.status().toString();
  ASSERT_TRUE(mp.signal(1, SIGCONT).isOk());
  ASSERT_TRUE(mp.store().set("continued", "1").isOk());
  expectAllExitZero(mp, seconds(30));
}

// A send cancelled mid-way to a live peer abandons the endpoint without forcing it shut (UCX defines a
// forced close only in peer error mode): the peer still receives the whole message when it posts its
// receive, and after reconnect() the pair works again.
TEST(UcxTransport, SendCancelledToALivePeerIsStillDeliveredWholeAndThePairReconnects) {
  constexpr size_t kBytes = 4 << 20;  // rendezvous: the data moves only once the receiver has matched it
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    auto t = makeTransport(c);
    int v = 0;
    if (c.rank() == 1) {
      if (auto go = c.store().get("cancelled", deadlineIn(seconds(30))); !go.isOk()) return c.fail(go.status().toString());
      std::vector<std::byte> got(kBytes);
      if (Status s = recv(*t, 0, 3, got, deadlineIn(seconds(10))); !s.isOk()) return c.fail("recv after cancel: " + s.toString());
      if (got != pattern(kBytes, 0)) return c.fail("the cancelled message arrived corrupted");
      if (Status s = c.store().set("taken", "1"); !s.isOk()) return c.fail(s.toString());
      if (Status s = recv(*t, 0, 4, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(20))); !s.isOk() || v != 5)
        return c.fail("after reconnect: " + s.toString() + " v=" + std::to_string(v));
      return 0;
    }
    const auto data = pattern(kBytes, 0);  // outlives the transport, as Request::cancel asks
    RequestPtr r = t->isend(1, 3, data);
    for (auto until = deadlineIn(milliseconds(200)); SteadyClock::now() < until;) t->progress(until);
    if (r->isComplete()) return c.fail("a rendezvous send completed with no receive posted: " + r->status().toString());
    r->cancel();
    if (!r->isComplete() || r->status().isOk()) return c.fail("cancel did not complete the send");
    if (t->peerStatus(1).isOk()) return c.fail("an abandoned endpoint must read as failed until reconnect");
    if (Status s = c.store().set("cancelled", "1"); !s.isOk()) return c.fail(s.toString());
    for (auto until = deadlineIn(seconds(15));;) {  // drive our side of the transfer while rank 1 takes it
      if (SteadyClock::now() >= until) return c.fail("rank 1 never took the cancelled message");
      t->progress(deadlineIn(milliseconds(20)));
      if (auto taken = c.store().contains("taken"); taken.isOk() && *taken) break;
    }
    if (Status s = t->reconnect(1, deadlineIn(seconds(10))); !s.isOk()) return c.fail("reconnect: " + s.toString());
    v = 5;
    if (Status s = send(*t, 1, 4, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !s.isOk()) return c.fail("send: " + s.toString());
    return 0;
  }).isOk());
  expectAllExitZero(mp, seconds(60));
}

// After a kill, a replacement process joins under the same rank; the survivor reconnects and exchanges.
TEST(UcxTransport, ReplacementUnderTheSameRankAfterReconnect) {
  MultiProcess mp;
  auto body = [](ChildContext& c) {
    auto t = makeTransport(c);
    int v = 0;
    if (c.rank() == 1) {
      if (c.incarnation() == 0) {
        c.report("ready");
        for (;;) t->progress(deadlineIn(seconds(1)));  // killed here
      }
      // The replacement: echo one message back.
      if (Status s = recv(*t, 0, 8, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(30))); !s.isOk())
        return c.fail("replacement recv: " + s.toString());
      v += 1;
      return send(*t, 0, 9, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))).isOk() ? 0 : c.fail("replacement send");
    }
    Status s = recv(*t, 1, 8, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(30)));
    if (s.code() != StatusCode::kPeerLost || s.peer() != 1) return c.fail("expected PeerLost(1), got " + s.toString());
    c.report("lost");
    if (Status r = t->reconnect(1, deadlineIn(seconds(30))); !r.isOk()) return c.fail("reconnect: " + r.toString());
    if (!t->peerStatus(1).isOk()) return c.fail("still failed after reconnect");
    v = 41;
    if (Status r = send(*t, 1, 8, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk()) return c.fail("send: " + r.toString());
    if (Status r = recv(*t, 1, 9, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk() || v != 42)
      return c.fail("echo: " + r.toString() + " v=" + std::to_string(v));
    c.report("exchanged");
    return 0;
  };
  ASSERT_TRUE(mp.spawnAll(2, body).isOk());
  ASSERT_TRUE(mp.waitFor(1, "ready", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.signal(1, SIGKILL).isOk());
  ASSERT_EQ(*mp.waitExit(1, deadlineIn(seconds(5))), 128 + SIGKILL);
  auto lost = mp.waitFor(0, "lost", deadlineIn(seconds(10)));
  ASSERT_TRUE(lost.isOk()) << lost.status().toString();
  ASSERT_TRUE(mp.spawn(1, 2, body).isOk());
  auto exchanged = mp.waitFor(0, "exchanged", deadlineIn(seconds(30)));
  EXPECT_TRUE(exchanged.isOk()) << exchanged.status().toString();
  expectAllExitZero(mp, seconds(30));
}

// The parameter server's pattern over TCP (the nodes' configuration): two clients start a request/reply
// exchange with rank 2, which is SIGKILLed as they post their first (while UCX is still setting up its TCP
// connections). Each client must see PeerLost and go on, never crash: with UCX 1.13's default the TCP
// transport asserted in its progress (tcp_iface.c:307, an epoll event for an endpoint that an earlier event
// of the same batch had closed) and aborted a client in 36 of 1,000 repetitions.
TEST(UcxTransport, ServerKilledMidExchangeLeavesEveryClientAliveWithPeerLost) {
  MultiProcess mp;
  constexpr int kServer = 2;
  ASSERT_TRUE(mp.spawnAll(3, [](ChildContext& c) {
    auto t = makeTransport(c);
    std::vector<std::byte> request(8 << 10), reply(8 << 10);
    if (c.rank() == kServer) {
      c.report("ready");
      for (;;) {  // killed here
        auto r = t->irecv(kAnyPeer, 1, request);
        if (!wait(*t, r, deadlineIn(seconds(10))).isOk()) continue;
        (void)send(*t, r->source(), 2, reply, deadlineIn(seconds(10)));
      }
    }
    for (int64_t round = 0;; ++round) {
      std::vector<RequestPtr> ops;
      ops.push_back(t->irecv(kServer, 2, reply));
      ops.push_back(t->isend(kServer, 1, request));
      if (round == 0) c.report("exchanging");
      Status s = waitAll(*t, ops, deadlineIn(seconds(10)));
      if (s.isOk()) continue;
      if (s.code() != StatusCode::kPeerLost || s.peer() != kServer) return c.fail("round " + std::to_string(round) + ": " + s.toString());
      return 0;
    }
  }).isOk());
  ASSERT_TRUE(mp.waitFor(0, "exchanging", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.waitFor(1, "exchanging", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.signal(kServer, SIGKILL).isOk());
  ASSERT_EQ(*mp.waitExit(kServer, deadlineIn(seconds(5))), 128 + SIGKILL);
  expectAllExitZero(mp, seconds(30));
}

// UcxOptions::net_devices (loopback by default) keeps UCX's own listeners on 127.0.0.1, even with the
// tcp transport forced and UCX_NET_DEVICES=all inherited from the environment; and data still flows.
TEST(UcxTransport, ListensOnLoopbackOnlyWhateverTheEnvironmentSays) {
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(2, [](ChildContext& c) {
    ::setenv("UCX_TLS", "tcp,self", 1);  // the forked child alone: data over tcp, so its listener matters
    ::setenv("UCX_NET_DEVICES", "all", 1);
    auto t = makeTransport(c);
    int listening = 0;
    std::string all;
    for (const auto& s : testing::ipSocketsOf({::getpid()})) {
      all += " " + s.toString();
      if (s.port != 0 && !s.loopback) return c.fail("bound beyond loopback:" + s.toString());
      listening += s.listening;
    }
    // The control mesh's listener and UCX's tcp listener at least.
    if (listening < 2) return c.fail("expected >= 2 listeners, found:" + all);
    c.report("sockets" + all);
    const int other = 1 - c.rank();
    const size_t n = 1 << 20;
    if (c.rank() == 0) {
      auto data = pattern(n, 0);
      if (Status st = send(*t, other, 5, data, deadlineIn(seconds(20))); !st.isOk()) return c.fail(st.toString());
    } else {
      std::vector<std::byte> got(n);
      RequestPtr r = t->irecv(other, 5, got);
      if (Status st = wait(*t, r, deadlineIn(seconds(20))); !st.isOk()) return c.fail(st.toString());
      if (got != pattern(n, 0)) return c.fail("content mismatch");
    }
    return 0;
  }).isOk());
  expectAllExitZero(mp, seconds(60));
  for (int r = 0; r < 2; ++r)
    for (const auto& line : mp.reports(r)) std::printf("[ucx] rank %d %s\n", r, line.c_str());
}

}  // namespace
}  // namespace chaosbed
