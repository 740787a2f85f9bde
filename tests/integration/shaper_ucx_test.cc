// The link shaper over the real UCX transport, one forked process per rank: a mirrored-like loop (a small
// all-gather, then a 0.9 MB all-reduce) on a ring whose two cross links are shaped keeps going. Each
// collective has a deadline (10 s) far above what the shaped link needs (about 0.2 s a round), so a lost
// wake-up or a lost message shows as a Timeout, never as a slow pass.

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/testing/multiprocess.h"
#include "transports/collective.h"
#include "transports/shaper/link_shaper.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::ChildContext;
using testing::MultiProcess;

TEST(ShaperUcx, ShapedRingNeverStalls) {
  constexpr int kRanks = 4;
  constexpr int kRounds = 40;
  MultiProcess mp;
  ASSERT_TRUE(mp.spawnAll(kRanks, [](ChildContext& c) {
    LinkShaper shaper(testing::ucxTransport(c, "shapertest"));
    // The ring is 0->1->2->3->0; shape the two links that cross between the halves {0,1} and {2,3}.
    LinkParams shaped;
    shaped.latency = milliseconds(5);
    shaped.bandwidth_bytes_per_s = 50e6 / 8;
    for (int peer = 0; peer < c.size(); ++peer)
      if ((c.rank() < 2) != (peer < 2))
        if (Status s = shaper.setLink(peer, shaped); !s.isOk()) return c.fail(s.toString());
    auto comm = worldCommunicator(&shaper);
    if (!comm.isOk()) return c.fail(comm.status().toString());
    std::vector<float> gradient(225'000, 1.0f);
    std::array<std::byte, 40> header{};
    std::vector<std::byte> headers(header.size() * kRanks);
    for (int round = 0; round < kRounds; ++round) {
      if (Status s = allgather(*comm, header, headers, deadlineIn(seconds(10))); !s.isOk())
        return c.fail("round " + std::to_string(round) + " header: " + s.toString());
      std::fill(gradient.begin(), gradient.end(), 1.0f);
      if (Status s = allreduce(*comm, gradient, deadlineIn(seconds(10))); !s.isOk())
        return c.fail("round " + std::to_string(round) + " all-reduce: " + s.toString());
      if (gradient.front() != kRanks || gradient.back() != kRanks) return c.fail("wrong sum");
    }
    if (Status s = c.store().set("finished/" + std::to_string(c.rank()), "1"); !s.isOk()) return c.fail(s.toString());
    for (int r = 0; r < c.size(); ++r)
      if (auto v = c.store().get("finished/" + std::to_string(r), deadlineIn(seconds(60))); !v.isOk())
        return c.fail(v.status().toString());
    return 0;
  }).isOk());
  std::vector<int> codes;
  ASSERT_TRUE(mp.waitAllExit(deadlineIn(seconds(240)), &codes).isOk());
  for (int r = 0; r < kRanks; ++r) {
    std::string log;
    for (const auto& line : mp.reports(r)) log += "\n  " + line;
    EXPECT_EQ(codes[static_cast<size_t>(r)], 0) << "rank " << r << log;
  }
}

}  // namespace
}  // namespace chaosbed
