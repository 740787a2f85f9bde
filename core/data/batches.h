#pragma once
// Deterministic sharding and batching of a Dataset across workers.
//
// Each epoch has one permutation of all samples, drawn from (seed, epoch) alone; shard i of n takes the
// contiguous block [i*N/n, (i+1)*N/n) of it. So within an epoch the shards are disjoint and together cover
// every sample exactly once, every worker computes its block without talking to the others, and each epoch
// visits the samples in a different order. Nothing depends on the clock or on thread timing.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/data/dataset.h"
#include "transports/base/status.h"

namespace chaosbed::data {

struct ShardSpec {
  int index = 0;  // 0..count-1
  int count = 1;
};

// The sample indices of one shard in one epoch, in visiting order. InvalidArgument for a bad ShardSpec.
Result<std::vector<uint32_t>> shardOrder(size_t dataset_size, ShardSpec shard, uint64_t seed, uint64_t epoch);

// A batch copied into contiguous buffers: images is size x dims floats, labels size bytes.
struct Batch {
  std::vector<float> images;
  std::vector<uint8_t> labels;
  size_t size = 0;
  size_t dims = 0;
};

// Walks one shard of a dataset epoch by epoch, batch by batch. The last batch of an epoch may be smaller
// (the shard size need not be a multiple of the batch size); the next call starts the following epoch.
// The dataset must outlive the iterator. Not thread-safe; one iterator per worker.
class BatchIterator {
 public:
  // InvalidArgument for an empty dataset, a bad shard, a shard with no samples, or batch_size 0.
  static Result<BatchIterator> create(const Dataset& dataset, ShardSpec shard, uint64_t seed, size_t batch_size,
                                      uint64_t start_epoch = 0);

  // Copies the next batch into `out` (reusing its storage: no allocation once it has held a full batch).
  // An error only when the dataset's file fails to read.
  [[nodiscard]] Status next(Batch& out);

  // Position of the next batch: its epoch, and its index within the epoch.
  uint64_t epoch() const { return epoch_; }
  size_t batchInEpoch() const { return cursor_ / batch_size_; }
  size_t batchesPerEpoch() const { return (order_.size() + batch_size_ - 1) / batch_size_; }
  size_t shardSize() const { return order_.size(); }

 private:
  BatchIterator(const Dataset& dataset, ShardSpec shard, uint64_t seed, size_t batch_size, uint64_t epoch);
  void startEpoch(uint64_t epoch);

  const Dataset* dataset_;
  ShardSpec shard_;
  uint64_t seed_;
  size_t batch_size_;
  uint64_t epoch_ = 0;
  size_t cursor_ = 0;
  std::vector<uint32_t> order_;
};

}  // namespace chaosbed::data
