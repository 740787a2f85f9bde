// A process that starts while a peer is dead meets that peer's stale record in the store (its worker address
// names shared memory that is gone, its control listener refuses). The UCX transport must read the peer as
// lost, never connect to that dead incarnation again, and reach its replacement once that has published
// (docs/findings/preemption-sweep.md, problem 1: replacements kept failing with "Shared memory error").

#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

#include "tests/testing/multiprocess.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildContext;
using testing::MultiProcess;

std::unique_ptr<Transport> makeTransport(ChildContext& c) { return testing::ucxTransport(c, "stale"); }

TEST(UcxStaleRecord, StartingBesideADeadPeerWaitsForItsReplacementAndReachesIt) {
  MultiProcess mp;
  auto body = [](ChildContext& c) {
    auto t = makeTransport(c);
    if (c.incarnation() == 0) {  // both first processes are killed here
      c.report("ready");
      for (;;) t->progress(deadlineIn(seconds(1)));
    }
    int v = 0;
    if (c.rank() == 1) {  // rank 1's replacement, started last: echo one message
      if (Status s = recv(*t, 0, 8, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(30))); !s.isOk())
        return c.fail("replacement recv: " + s.toString());
      v += 1;
      return send(*t, 0, 9, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))).isOk() ? 0 : c.fail("replacement send");
    }
    // Rank 0's replacement, started while rank 1 is dead.
    Status lost = t->peerStatus(1);
    if (lost.code() != StatusCode::kPeerLost || lost.peer() != 1) return c.fail("expected PeerLost(1), got " + lost.toString());
    // Nothing newer than the dead record is published: reconnect waits, and does not take the dead one again.
    for (int attempt = 0; attempt < 3; ++attempt) {
      Status r = t->reconnect(1, deadlineIn(milliseconds(200)));
      if (r.code() != StatusCode::kTimeout) return c.fail("reconnect to the dead record: expected Timeout, got " + r.toString());
      if (t->peerStatus(1).isOk()) return c.fail("a dead incarnation reads as alive");
    }
    c.report("waiting");
    if (Status r = t->reconnect(1, deadlineIn(seconds(30))); !r.isOk()) return c.fail("reconnect: " + r.toString());
    v = 41;
    if (Status r = send(*t, 1, 8, asBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk()) return c.fail("send: " + r.toString());
    if (Status r = recv(*t, 1, 9, asWritableBytes(std::span(&v, 1)), deadlineIn(seconds(10))); !r.isOk() || v != 42)
      return c.fail("echo: " + r.toString() + " v=" + std::to_string(v));
    c.report("exchanged");
    return 0;
  };
  ASSERT_TRUE(mp.spawnAll(2, body).isOk());
  for (int r : {0, 1}) ASSERT_TRUE(mp.waitFor(r, "ready", deadlineIn(seconds(30))).isOk());
  for (int r : {1, 0}) {
    ASSERT_TRUE(mp.signal(r, SIGKILL).isOk());
    ASSERT_EQ(*mp.waitExit(r, deadlineIn(seconds(5))), 128 + SIGKILL);
  }
  ASSERT_TRUE(mp.spawn(0, 2, body).isOk());
  auto waiting = mp.waitFor(0, "waiting", deadlineIn(seconds(30)));
  ASSERT_TRUE(waiting.isOk()) << waiting.status().toString();
  ASSERT_TRUE(mp.spawn(1, 2, body).isOk());
  auto exchanged = mp.waitFor(0, "exchanged", deadlineIn(seconds(30)));
  EXPECT_TRUE(exchanged.isOk()) << exchanged.status().toString();
  std::vector<int> codes;
  ASSERT_TRUE(mp.waitAllExit(deadlineIn(seconds(30)), &codes).isOk());
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == -1) continue;  // reaped above
    std::string log;
    for (const auto& line : mp.reports(static_cast<int>(r))) log += "\n  " + line;
    EXPECT_EQ(codes[r], 0) << "rank " << r << " reported:" << log;
  }
}

}  // namespace
}  // namespace chaosbed
