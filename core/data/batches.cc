#include "core/data/batches.h"

#include <algorithm>
#include <numeric>

#include "core/data/random.h"

namespace chaosbed::data {
namespace {

Status checkShard(size_t dataset_size, ShardSpec shard) {
  if (shard.count < 1 || shard.index < 0 || shard.index >= shard.count) {
    return Status::invalidArgument("shard " + std::to_string(shard.index) + " of " + std::to_string(shard.count) +
                                   ": index must be in 0..count-1 and count positive");
  }
  if (dataset_size > UINT32_MAX) return Status::invalidArgument("dataset has more than 2^32 samples");
  return Status::ok();
}

// Fills `out` with shard's block of the epoch's permutation; `scratch` holds the whole permutation.
void fillOrder(size_t n, ShardSpec shard, uint64_t seed, uint64_t epoch, std::vector<uint32_t>& scratch,
               std::vector<uint32_t>& out) {
  scratch.resize(n);
  std::iota(scratch.begin(), scratch.end(), 0u);
  Rng rng(mixSeed(seed, epoch, 0x5eed));
  shuffle(scratch, rng);
  const size_t begin = n * static_cast<size_t>(shard.index) / static_cast<size_t>(shard.count);
  const size_t end = n * static_cast<size_t>(shard.index + 1) / static_cast<size_t>(shard.count);
  out.assign(scratch.begin() + static_cast<std::ptrdiff_t>(begin), scratch.begin() + static_cast<std::ptrdiff_t>(end));
}

}  // namespace

Result<std::vector<uint32_t>> shardOrder(size_t dataset_size, ShardSpec shard, uint64_t seed, uint64_t epoch) {
  CHAOSBED_RETURN_IF_ERROR(checkShard(dataset_size, shard));
  std::vector<uint32_t> scratch, out;
  fillOrder(dataset_size, shard, seed, epoch, scratch, out);
  return out;
}

Result<BatchIterator> BatchIterator::create(const Dataset& dataset, ShardSpec shard, uint64_t seed,
                                            size_t batch_size, uint64_t start_epoch) {
  CHAOSBED_RETURN_IF_ERROR(checkShard(dataset.size(), shard));
  if (batch_size == 0) return Status::invalidArgument("batch size must be positive");
  if (dataset.size() / static_cast<size_t>(shard.count) == 0) {
    return Status::invalidArgument("shard " + std::to_string(shard.index) + " of " + std::to_string(shard.count) +
                                   " of a dataset of " + std::to_string(dataset.size()) + " samples is empty");
  }
  return BatchIterator(dataset, shard, seed, batch_size, start_epoch);
}

BatchIterator::BatchIterator(const Dataset& dataset, ShardSpec shard, uint64_t seed, size_t batch_size,
                             uint64_t epoch)
    : dataset_(&dataset), shard_(shard), seed_(seed), batch_size_(batch_size) {
  startEpoch(epoch);
}

void BatchIterator::startEpoch(uint64_t epoch) {
  std::vector<uint32_t> scratch;
  fillOrder(dataset_->size(), shard_, seed_, epoch, scratch, order_);
  epoch_ = epoch;
  cursor_ = 0;
}

Status BatchIterator::next(Batch& out) {
  if (cursor_ >= order_.size()) startEpoch(epoch_ + 1);
  const size_t n = std::min(batch_size_, order_.size() - cursor_);
  const size_t dims = dataset_->dims;
  out.images.resize(n * dims);
  out.labels.resize(n);
  out.size = n;
  out.dims = dims;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = order_[cursor_ + i];
    CHAOSBED_RETURN_IF_ERROR(dataset_->copySample(s, out.images.data() + i * dims));
    out.labels[i] = dataset_->labels[s];
  }
  cursor_ += n;
  return Status::ok();
}

}  // namespace chaosbed::data
