// SnapshotReceiver over real UCX processes: a sender stopped in the middle of a rendezvous message holds
// one wildcard receive, and messages from other senders still arrive; the stuck receive completes when the
// sender resumes, or is re-posted once older than the age limit.

#include "core/strategies/snapshot_receiver.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <set>

#include "tests/testing/multiprocess.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildContext;
using testing::MultiProcess;

constexpr size_t kBytes = 4 << 20;  // rendezvous: the sender moves the data only once it is matched
constexpr Tag kTag = 11;

std::unique_ptr<Transport> connect(ChildContext& c) { return testing::ucxTransport(c, "snaprecv"); }

// Rank 0 receives; rank 1 sends, and is stopped by the parent before rank 0 matches its message; rank 2
// sends once rank 0 has matched rank 1's message.
int body(ChildContext& c, int slots, milliseconds age_limit) {
  auto t = connect(c);
  // Wire up every endpoint first with one rendezvous message each way (UCX connects its lanes lazily), so
  // that rank 1's big send announces itself to rank 0 at once instead of waiting in rank 1's queue for a
  // handshake that a stopped process cannot finish.
  std::vector<std::byte> warm(kBytes);
  if (c.rank() != 0) {
    if (Status s = send(*t, 0, 1, warm, deadlineIn(seconds(20))); !s.isOk()) return c.fail("warm-up send: " + s.toString());
    if (Status s = recv(*t, 0, 2, warm, deadlineIn(seconds(20))); !s.isOk()) return c.fail("warm-up recv: " + s.toString());
  } else {
    for (int peer : {1, 2}) {
      if (Status s = recv(*t, peer, 1, warm, deadlineIn(seconds(20))); !s.isOk()) return c.fail("warm-up recv: " + s.toString());
      if (Status s = send(*t, peer, 2, warm, deadlineIn(seconds(20))); !s.isOk()) return c.fail("warm-up send: " + s.toString());
    }
  }
  if (c.rank() != 0) {
    std::vector<std::byte> data(kBytes, std::byte(c.rank()));
    if (c.rank() == 2)
      if (auto go = c.store().get("matched", deadlineIn(seconds(30))); !go.isOk()) return c.fail(go.status().toString());
    RequestPtr r = t->isend(0, kTag, data);
    c.report("posted");
    Status s = wait(*t, r, deadlineIn(seconds(40)));  // rank 1 is stopped in here
    if (!s.isOk()) return c.fail("send: " + s.toString());
    (void)c.store().set("sent-" + std::to_string(c.rank()), "1");
    (void)c.store().get("done", deadlineIn(seconds(30)));  // keep the endpoint up until rank 0 is done
    return 0;
  }
  if (auto go = c.store().get("stopped", deadlineIn(seconds(30))); !go.isOk()) return c.fail(go.status().toString());
  SnapshotReceiver receiver(*t, kTag, kBytes, slots, age_limit);
  // Let rank 0's receive match rank 1's announcement (its data cannot come: rank 1 is stopped).
  for (auto until = deadlineIn(milliseconds(300)); SteadyClock::now() < until;) t->progress(until);
  (void)c.store().set("matched", "1");
  std::set<int> from;
  const auto started = SteadyClock::now();
  // Two slots: both messages arrive. One slot: rank 1's message, matched to the receive that the age limit
  // retired, is dropped; its buffer is released once rank 1 has resumed and finished sending.
  auto sent1 = [&] {
    auto sent = c.store().contains("sent-1");
    return sent.isOk() && *sent;
  };
  auto finished = [&] {
    if (slots > 1) return from.size() == 2;
    return from.count(2) == 1 && receiver.retired() == 0 && sent1();
  };
  for (auto until = deadlineIn(seconds(30)); !finished() && SteadyClock::now() < until;) {
    t->progress(deadlineIn(milliseconds(20)));
    receiver.poll([&](std::span<const std::byte> m, const Request& r) {
      if (r.receivedBytes() == kBytes && m[0] == std::byte(r.source()) && m[kBytes - 1] == std::byte(r.source())) {
        from.insert(r.source());
        c.report("from " + std::to_string(r.source()) + " after " +
                 std::to_string(std::chrono::duration_cast<milliseconds>(SteadyClock::now() - started).count()) + " ms");
      }
    });
  }
  (void)c.store().set("done", "1");
  if (!finished())
    return c.fail("received from " + std::to_string(from.size()) + " senders, " + std::to_string(receiver.retired()) +
                  " receives still retired");
  return slots > 1 || from.count(1) == 0 ? 0 : c.fail("a message matched to a retired receive was delivered");
}

// Runs the three ranks and returns when rank 2's message has arrived at rank 0 (rank 1 still stopped):
// how long after rank 0 started polling, in ms. Then resumes rank 1 and expects every rank to exit 0.
int64_t rank2ArrivesWhileRank1IsStopped(int slots, milliseconds age_limit) {
  MultiProcess mp;
  EXPECT_TRUE(mp.spawnAll(3, [&](ChildContext& c) { return body(c, slots, age_limit); }).isOk());
  EXPECT_TRUE(mp.waitFor(1, "posted", deadlineIn(seconds(30))).isOk());
  EXPECT_TRUE(mp.signal(1, SIGSTOP).isOk());
  EXPECT_TRUE(mp.store().set("stopped", "1").isOk());
  int64_t ms = -1;
  if (auto line = mp.waitFor(0, "from 2", deadlineIn(seconds(15))); line.isOk()) {
    for (const auto& l : mp.reports(0)) {
      EXPECT_EQ(l.find("from 1"), std::string::npos) << "rank 1 is stopped: " << l;
      if (size_t at = l.find("from 2 after "); at != std::string::npos) ms = std::stoll(l.substr(at + 13));
    }
  } else {
    ADD_FAILURE() << "rank 2's message did not arrive while rank 1 was stopped: " << line.status().toString();
  }
  EXPECT_TRUE(mp.signal(1, SIGCONT).isOk());
  std::vector<int> codes;
  EXPECT_TRUE(mp.waitAllExit(deadlineIn(seconds(60)), &codes).isOk());
  for (size_t r = 0; r < codes.size(); ++r) {
    std::string log;
    for (const auto& line : mp.reports(int(r))) log += "\n  " + line;
    EXPECT_EQ(codes[r], 0) << "rank " << r << ":" << log;
  }
  return ms;
}

// Two receives: the stopped sender holds one; rank 2's message takes the other at once. Rank 1's message
// completes the stuck receive when rank 1 resumes.
TEST(SnapshotReceiver, AStoppedSenderHoldsOneReceiveWhileOthersStillArrive) {
  const int64_t ms = rank2ArrivesWhileRank1IsStopped(2, milliseconds(20000));
  EXPECT_GE(ms, 0);
  EXPECT_LT(ms, 5000);
}

// One receive, held by the stopped sender: rank 2's message arrives only once the age limit has re-posted
// it; rank 1's message, matched to the retired receive, is dropped, and the retired buffer is released
// once rank 1 has resumed and finished its send.
TEST(SnapshotReceiver, AReceiveOlderThanTheAgeLimitIsPostedAgain) {
  const int64_t ms = rank2ArrivesWhileRank1IsStopped(1, milliseconds(1500));
  EXPECT_GE(ms, 1500 - 300);  // the receive was posted up to 300 ms before polling started
  EXPECT_LT(ms, 8000);
}

}  // namespace
}  // namespace chaosbed
