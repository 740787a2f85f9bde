// Sharding, per-epoch shuffling, batching and the synthetic dataset.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/data/batches.h"
#include "core/data/dataset.h"

namespace chaosbed::data {
namespace {

TEST(ShardOrder, ShardsAreDisjointAndCoverEverySample) {
  for (int count : {1, 3, 7}) {
    std::vector<int> seen(1001, 0);
    size_t smallest = SIZE_MAX, largest = 0;
    for (int i = 0; i < count; ++i) {
      auto order = shardOrder(1001, {i, count}, 42, 5);
      ASSERT_TRUE(order.isOk()) << order.status().toString();
      smallest = std::min(smallest, order->size());
      largest = std::max(largest, order->size());
      for (uint32_t s : *order) ++seen[s];
    }
    for (size_t s = 0; s < seen.size(); ++s) ASSERT_EQ(seen[s], 1) << "sample " << s << " with " << count << " shards";
    EXPECT_LE(largest - smallest, 1u);
  }
}

TEST(ShardOrder, SameSeedSameOrderOtherEpochOrSeedDifferentOrder) {
  auto a = shardOrder(500, {1, 2}, 7, 3);
  auto b = shardOrder(500, {1, 2}, 7, 3);
  auto next_epoch = shardOrder(500, {1, 2}, 7, 4);
  auto other_seed = shardOrder(500, {1, 2}, 8, 3);
  ASSERT_TRUE(a.isOk() && b.isOk() && next_epoch.isOk() && other_seed.isOk());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *next_epoch);
  EXPECT_NE(*a, *other_seed);
  // Shuffled, not the identity.
  std::vector<uint32_t> sorted = *a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, *a);
}

TEST(ShardOrder, RejectsBadShard) {
  EXPECT_EQ(shardOrder(10, {2, 2}, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shardOrder(10, {0, 0}, 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shardOrder(10, {-1, 2}, 1, 0).status().code(), StatusCode::kInvalidArgument);
}

Dataset indexDataset(size_t n, size_t dims) {
  Dataset d;
  d.dims = dims;
  d.num_classes = 10;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < dims; ++j) d.images.push_back(static_cast<float>(i));
    d.labels.push_back(static_cast<uint8_t>(i % 10));
  }
  return d;
}

TEST(BatchIterator, CopiesTheShardsSamplesInOrderAndRollsOverEpochs) {
  const Dataset d = indexDataset(103, 3);
  auto it = BatchIterator::create(d, {1, 2}, 9, 10);
  ASSERT_TRUE(it.isOk()) << it.status().toString();
  auto expected = shardOrder(103, {1, 2}, 9, 0);
  ASSERT_TRUE(expected.isOk());
  EXPECT_EQ(it->shardSize(), expected->size());
  EXPECT_EQ(it->batchesPerEpoch(), 6u);  // 52 samples: 5 full batches and one of 2

  Batch b;
  std::vector<uint32_t> got;
  for (size_t k = 0; k < it->batchesPerEpoch(); ++k) {
    EXPECT_EQ(it->epoch(), 0u);
    EXPECT_EQ(it->batchInEpoch(), k);
    ASSERT_TRUE(it->next(b).isOk());
    EXPECT_EQ(b.size, k < 5 ? 10u : 2u);
    ASSERT_EQ(b.images.size(), b.size * 3);
    for (size_t i = 0; i < b.size; ++i) {
      const auto s = static_cast<uint32_t>(b.images[i * 3]);
      EXPECT_EQ(b.images[i * 3 + 2], static_cast<float>(s));
      EXPECT_EQ(b.labels[i], s % 10);
      got.push_back(s);
    }
  }
  EXPECT_EQ(got, *expected);
  ASSERT_TRUE(it->next(b).isOk());
  EXPECT_EQ(it->epoch(), 1u);
  auto epoch1 = shardOrder(103, {1, 2}, 9, 1);
  ASSERT_TRUE(epoch1.isOk());
  EXPECT_EQ(static_cast<uint32_t>(b.images[0]), (*epoch1)[0]);
}

TEST(BatchIterator, StartsAtAGivenEpoch) {
  const Dataset d = indexDataset(50, 1);
  auto it = BatchIterator::create(d, {0, 1}, 3, 50, 4);
  ASSERT_TRUE(it.isOk());
  Batch b;
  ASSERT_TRUE(it->next(b).isOk());
  auto order = shardOrder(50, {0, 1}, 3, 4);
  ASSERT_TRUE(order.isOk());
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(static_cast<uint32_t>(b.images[i]), (*order)[i]);
}

TEST(BatchIterator, RejectsEmptyShardsAndZeroBatch) {
  const Dataset d = indexDataset(3, 1);
  EXPECT_EQ(BatchIterator::create(d, {0, 4}, 1, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchIterator::create(d, {0, 1}, 1, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(Synthetic, IsDeterministicBalancedAndValidated) {
  SyntheticOptions o;
  o.dims = 16;
  o.train_size = 200;
  o.test_size = 50;
  auto a = makeSynthetic(o);
  auto b = makeSynthetic(o);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->train.images, b->train.images);
  EXPECT_EQ(a->test.labels, b->test.labels);
  EXPECT_NE(a->train.images, std::vector<float>(a->train.images.size(), 0.0f));
  EXPECT_EQ(a->train.size(), 200u);
  EXPECT_EQ(a->test.size(), 50u);
  EXPECT_EQ(std::count(a->train.labels.begin(), a->train.labels.end(), 3), 20);
  o.seed = 2;
  auto c = makeSynthetic(o);
  ASSERT_TRUE(c.isOk());
  EXPECT_NE(a->train.images, c->train.images);

  o.dims = 0;
  EXPECT_EQ(makeSynthetic(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chaosbed::data
