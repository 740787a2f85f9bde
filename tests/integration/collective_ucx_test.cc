// Collectives over the UCX transport, one forked process per rank (tests/testing/multiprocess.h): results
// against a serial double-precision sum, a SIGKILLed member aborting every survivor naming it within 2 s, a
// SIGSTOPped member tripping the deadline, and a communicator rebuilt from the survivors. Children report
// "lost CODE RANK NS" lines (NS: steady clock, which all processes on the machine share) and then wait on
// the store key "done", so that no survivor's exit is mistaken by another for a failure.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "tests/testing/multiprocess.h"
#include "transports/collective.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildContext;
using testing::MultiProcess;

std::unique_ptr<Transport> makeTransport(ChildContext& c) { return testing::ucxTransport(c, "colltest"); }

// What rank `rank` contributes to an all-reduce of n elements in round `round`: every process can compute
// everybody's input, hence the expected sum.
std::vector<float> input(int rank, size_t n, int round) {
  std::mt19937 gen(static_cast<uint32_t>(rank * 1000003 + round * 7919 + n));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::string checkAllreduce(Communicator& comm, size_t n, int round, const CollectiveOptions& options = {}) {
  std::vector<float> data = input(comm.transport->rank(), n, round);
  if (Status s = allreduce(comm, data, deadlineIn(seconds(30)), options); !s.isOk())
    return "allreduce of " + std::to_string(n) + ": " + s.toString();
  std::vector<double> want(n, 0.0);
  for (int member : comm.members) {
    std::vector<float> in = input(member, n, round);
    for (size_t i = 0; i < n; ++i) want[i] += in[i];
  }
  for (size_t i = 0; i < n; ++i)
    if (std::fabs(data[i] - want[i]) > 1e-5 * comm.size())
      return "allreduce of " + std::to_string(n) + " elements: element " + std::to_string(i) + " is " +
             std::to_string(data[i]) + ", expected " + std::to_string(want[i]);
  return "";
}

int64_t nowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count(); }

// Reports "lost CODE PEER NS" and waits for the parent's "done".
int reportLoss(ChildContext& c, const Status& s) {
  c.report("lost " + std::string(statusCodeName(s.code())) + " " + std::to_string(s.peer()) + " " +
           std::to_string(nowNs()) + " " + s.toString());
  (void)c.store().get("done", deadlineIn(seconds(30)));
  return 0;
}

struct Loss {
  std::string code;
  int peer = -1;
  int64_t ns = 0;
  std::string line;
};
Loss parseLoss(const std::string& line) {
  Loss l;
  std::istringstream in(line);
  std::string word;
  in >> word >> l.code >> l.peer >> l.ns;
  l.line = line;
  return l;
}

// Leaves only once every rank got here: a rank that exits (closes its transport) while another is still
// inside a collective would rightly look like a dead member to it.
int finishTogether(ChildContext& c, const std::vector<int>& ranks) {
  if (Status s = c.store().set("finished/" + std::to_string(c.rank()), "1"); !s.isOk()) return c.fail(s.toString());
  for (int r : ranks)
    if (auto v = c.store().get("finished/" + std::to_string(r), deadlineIn(seconds(60))); !v.isOk())
      return c.fail("waiting for rank " + std::to_string(r) + " to finish: " + v.status().toString());
  return 0;
}

void expectAllExitZero(MultiProcess& mp, seconds limit) {
  std::vector<int> codes;
  ASSERT_TRUE(mp.waitAllExit(deadlineIn(limit), &codes).isOk());
  for (size_t r = 0; r < codes.size(); ++r) {
    if (codes[r] == -1) continue;
    std::string log;
    for (const auto& line : mp.reports(static_cast<int>(r))) log += "\n  " + line;
    EXPECT_EQ(codes[r], 0) << "rank " << r << " reported:" << log;
  }
}

TEST(CollectiveUcx, AllreduceBroadcastBarrierMatchSerialResults) {
  for (int ranks = 2; ranks <= 5; ++ranks) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    MultiProcess mp;
    ASSERT_TRUE(mp.spawnAll(ranks, [](ChildContext& c) {
      auto t = makeTransport(c);
      auto comm = worldCommunicator(t.get());
      if (!comm.isOk()) return c.fail(comm.status().toString());
      // Fixed awkward sizes plus random ones; the same sequence on every rank.
      std::vector<size_t> sizes{1, 2, 3, 5, 1000, 65537, (1u << 20) + 3};
      std::mt19937 gen(12345);
      for (int i = 0; i < 4; ++i) sizes.push_back(std::uniform_int_distribution<size_t>(1, 300000)(gen));
      for (size_t k = 0; k < sizes.size(); ++k)
        if (std::string err = checkAllreduce(*comm, sizes[k], static_cast<int>(k)); !err.empty()) return c.fail(err);
      for (int root = 0; root < c.size(); ++root) {
        std::vector<std::byte> buf(300001, std::byte{0});
        if (c.rank() == root)
          for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 13 + root) & 0xff);
        if (Status s = broadcast(*comm, buf, root, deadlineIn(seconds(30))); !s.isOk()) return c.fail(s.toString());
        for (size_t i = 0; i < buf.size(); ++i)
          if (buf[i] != static_cast<std::byte>((i * 13 + root) & 0xff))
            return c.fail("broadcast from " + std::to_string(root) + ": byte " + std::to_string(i));
      }
      for (int i = 0; i < 5; ++i)
        if (Status s = barrier(*comm, deadlineIn(seconds(30))); !s.isOk()) return c.fail(s.toString());
      c.report("done");
      std::vector<int> all(static_cast<size_t>(c.size()));
      std::iota(all.begin(), all.end(), 0);
      return finishTogether(c, all);
    }).isOk());
    expectAllExitZero(mp, seconds(120));
  }
}

// Survivors loop on 16 MiB all-reduces; the victim dies (SIGKILL) while one is in flight.
TEST(CollectiveUcx, KilledMemberAbortsEverySurvivorNamingItWithinTwoSeconds) {
  const int ranks = 4, victim = 2;
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(ranks, [](ChildContext& c) {
    auto t = makeTransport(c);
    auto comm = worldCommunicator(t.get());
    if (!comm.isOk()) return c.fail(comm.status().toString());
    std::vector<float> data(4 << 20, 1.0f);
    for (int iter = 0; iter < 100000; ++iter) {
      c.report("iter " + std::to_string(iter));
      if (Status s = allreduce(*comm, data, deadlineIn(seconds(20))); !s.isOk()) return reportLoss(c, s);
      std::fill(data.begin(), data.end(), 1.0f);
    }
    return c.fail("never lost anyone");
  }).isOk());
  ASSERT_TRUE(mp.waitFor(victim, "iter 3", deadlineIn(seconds(30))).isOk());
  const int64_t killed_ns = nowNs();
  ASSERT_TRUE(mp.signal(victim, SIGKILL).isOk());
  for (int r = 0; r < ranks; ++r) {
    if (r == victim) continue;
    auto line = mp.waitFor(r, "lost", deadlineIn(seconds(10)));
    ASSERT_TRUE(line.isOk()) << "rank " << r << ": " << line.status().toString();
    Loss loss = parseLoss(*line);
    EXPECT_TRUE(loss.code == "PeerLost" || loss.code == "Aborted") << loss.line;
    EXPECT_EQ(loss.peer, victim) << loss.line;
    EXPECT_LT(loss.ns - killed_ns, 2'000'000'000) << "rank " << r << " took " << (loss.ns - killed_ns) / 1e6
                                                   << " ms: " << loss.line;
  }
  ASSERT_TRUE(mp.store().set("done", "1").isOk());
  ASSERT_TRUE(mp.waitExit(victim, deadlineIn(seconds(10))).isOk());
  expectAllExitZero(mp, seconds(30));
}

// A paused member keeps its connections open: only the deadline catches it.
TEST(CollectiveUcx, StoppedMemberTripsTheDeadline) {
  const int ranks = 3, victim = 1;
  const auto op_deadline = milliseconds(1500);
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(ranks, [op_deadline](ChildContext& c) {
    auto t = makeTransport(c);
    auto comm = worldCommunicator(t.get());
    if (!comm.isOk()) return c.fail(comm.status().toString());
    std::vector<float> data(1 << 20, 1.0f);
    for (int iter = 0; iter < 100000; ++iter) {
      c.report("iter " + std::to_string(iter));
      if (Status s = allreduce(*comm, data, deadlineIn(op_deadline)); !s.isOk()) return reportLoss(c, s);
      std::fill(data.begin(), data.end(), 1.0f);
    }
    return c.fail("never timed out");
  }).isOk());
  ASSERT_TRUE(mp.waitFor(victim, "iter 3", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.signal(victim, SIGSTOP).isOk());
  const int64_t stopped_ns = nowNs();
  for (int r = 0; r < ranks; ++r) {
    if (r == victim) continue;
    auto line = mp.waitFor(r, "lost", deadlineIn(seconds(10)));
    ASSERT_TRUE(line.isOk()) << "rank " << r << ": " << line.status().toString();
    Loss loss = parseLoss(*line);
    EXPECT_EQ(loss.code, "Timeout") << loss.line;
    // Within twice the operation's deadline of the pause (Gloo's criterion).
    EXPECT_LT(loss.ns - stopped_ns, 2 * std::chrono::nanoseconds(op_deadline).count()) << loss.line;
  }
  ASSERT_TRUE(mp.store().set("done", "1").isOk());
  ASSERT_TRUE(mp.signal(victim, SIGKILL).isOk());
  ASSERT_TRUE(mp.waitExit(victim, deadlineIn(seconds(10))).isOk());
  expectAllExitZero(mp, seconds(30));
}

// After the victim's death the survivors rebuild a communicator (epoch 1) and get correct sums, with every
// algorithm: the recursive ones send both ways between a pair, so a survivor that reconnected to a live
// peer (its send was abandoned with the aborted call) must still take that peer's rendezvous messages.
TEST(CollectiveUcx, CommunicatorRebuiltFromSurvivorsIsCorrect) {
  const int ranks = 4, victim = 3;
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(ranks, [](ChildContext& c) {
    auto t = makeTransport(c);
    auto comm = worldCommunicator(t.get());
    if (!comm.isOk()) return c.fail(comm.status().toString());
    std::vector<float> data(1 << 20, 1.0f);
    Status lost;
    for (int iter = 0; lost.isOk(); ++iter) {
      c.report("iter " + std::to_string(iter));
      lost = allreduce(*comm, data, deadlineIn(seconds(20)));
    }
    if (lost.peer() != victim) return c.fail("lost " + lost.toString());
    std::vector<int> survivors;
    for (int r = 0; r < c.size(); ++r)
      if (r != victim) survivors.push_back(r);
    auto rebuilt = rebuildCommunicator(t.get(), survivors, comm->epoch + 1, deadlineIn(seconds(10)));
    if (!rebuilt.isOk()) return c.fail("rebuild: " + rebuilt.status().toString());
    for (auto algorithm : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
                           AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kDirect})
      for (size_t n : {size_t{7}, size_t{100003}, size_t{1} << 20})
        if (std::string err = checkAllreduce(*rebuilt, n, 99, {.algorithm = algorithm}); !err.empty())
          return c.fail("rebuilt: " + err);
    if (Status s = barrier(*rebuilt, deadlineIn(seconds(10))); !s.isOk()) return c.fail(s.toString());
    c.report("rebuilt ok");
    return finishTogether(c, survivors);
  }).isOk());
  ASSERT_TRUE(mp.waitFor(victim, "iter 2", deadlineIn(seconds(30))).isOk());
  ASSERT_TRUE(mp.signal(victim, SIGKILL).isOk());
  ASSERT_TRUE(mp.waitExit(victim, deadlineIn(seconds(10))).isOk());
  for (int r = 0; r < ranks - 1; ++r) {
    auto line = mp.waitFor(r, "rebuilt ok", deadlineIn(seconds(30)));
    EXPECT_TRUE(line.isOk()) << "rank " << r << ": " << line.status().toString();
  }
  expectAllExitZero(mp, seconds(30));
}

}  // namespace
}  // namespace chaosbed
