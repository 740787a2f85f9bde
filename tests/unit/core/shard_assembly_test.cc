// ShardAssembly: a parameter server's snapshot from the latest copy of each shard, matched by range.

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/strategies/shard_assembly.h"

namespace chaosbed {
namespace {

constexpr size_t kParams = 6;  // two shards: [0, 4) and [4, 6)

struct Shard {
  ShardSnapshotHeader header;
  std::vector<std::byte> bytes;
};

Shard shard(int64_t offset, std::vector<float> values, int64_t realtime_ns, int64_t updates) {
  Shard s;
  s.header.realtime_ns = realtime_ns;
  s.header.offset = offset;
  s.header.count = int64_t(values.size());
  s.header.updates = updates;
  s.bytes.resize(values.size() * sizeof(float));
  std::memcpy(s.bytes.data(), values.data(), s.bytes.size());
  return s;
}

std::optional<ShardAssembly::Snapshot> add(ShardAssembly& a, const Shard& s) { return a.add(s.header, s.bytes); }

TEST(ShardAssembly, EveryRangeMakesOneSnapshotStampedWithTheLatestCopy) {
  ShardAssembly a(kParams);
  EXPECT_FALSE(add(a, shard(0, {1, 2, 3, 4}, 100, 7)));
  auto s = add(a, shard(4, {5, 6}, 90, 8));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->realtime_ns, 100);
  EXPECT_EQ(s->updates, 8);
  EXPECT_EQ(std::vector<float>(s->params.begin(), s->params.end()), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // The next needs a newer copy of every range: the first shard again is not enough.
  EXPECT_FALSE(add(a, shard(0, {9, 9, 9, 9}, 200, 9)));
  s = add(a, shard(4, {8, 8}, 210, 9));
  ASSERT_TRUE(s);
  EXPECT_EQ(std::vector<float>(s->params.begin(), s->params.end()), (std::vector<float>{9, 9, 9, 9, 8, 8}));
}

// A shard restored from its checkpoint counts fewer updates (its ticks by steps went back): its copies are
// still taken, by time, and snapshots go on.
TEST(ShardAssembly, ARestoredShardWithFewerUpdatesStillCompletesSnapshots) {
  ShardAssembly a(kParams);
  ASSERT_FALSE(add(a, shard(0, {1, 1, 1, 1}, 100, 500)));
  ASSERT_TRUE(add(a, shard(4, {1, 1}, 100, 500)));
  EXPECT_FALSE(add(a, shard(0, {2, 2, 2, 2}, 300, 620)));
  auto s = add(a, shard(4, {3, 3}, 310, 400));  // the replacement, restored to 400 updates
  ASSERT_TRUE(s);
  EXPECT_EQ(s->updates, 620);
  EXPECT_EQ(s->realtime_ns, 310);
}

TEST(ShardAssembly, AnOlderCopyOfARangeIsIgnored) {
  ShardAssembly a(kParams);
  ASSERT_FALSE(add(a, shard(0, {1, 1, 1, 1}, 100, 1)));
  EXPECT_FALSE(add(a, shard(0, {7, 7, 7, 7}, 50, 1)));  // sent before the one held: arrives late
  auto s = add(a, shard(4, {2, 2}, 120, 1));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->params[0], 1);
}

TEST(ShardAssembly, RangesThatLeaveAGapNeverComplete) {
  ShardAssembly a(kParams);
  EXPECT_FALSE(add(a, shard(0, {1, 1, 1}, 100, 1)));
  EXPECT_FALSE(add(a, shard(4, {1, 1}, 100, 1)));  // [3, 4) missing
  EXPECT_FALSE(add(a, shard(0, {1, 1, 1}, 200, 1)));
}

}  // namespace
}  // namespace chaosbed
