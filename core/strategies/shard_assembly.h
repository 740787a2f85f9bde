#pragma once
// ShardAssembly: the evaluator's view of a parameter server's model, built from the shards the servers send
// (core/strategies/tags.h). Each shard replaces that range's previous copy if it was taken later; once every
// parameter has been replaced since the last snapshot, the whole buffer is one: a mix of the shards' latest
// copies, as a worker's pull is, stamped with the latest copy's time. Shards are matched by their ranges,
// never by tick numbers: a shard restored from its checkpoint counts its updates from an older number than
// the others, and its ticks never line up with theirs again.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/strategies/tags.h"

namespace chaosbed {

class ShardAssembly {
 public:
  explicit ShardAssembly(size_t params) : params_(params) {}

  struct Snapshot {
    int64_t realtime_ns = 0;  // the latest shard's copy
    int64_t updates = 0;      // the most updates any of its shards had applied
    std::span<const float> params;  // valid until the next add()
  };
  // One shard: h.count floats (as bytes off the wire) for h.offset on; the caller checked that they lie
  // inside the buffer. The assembled snapshot when this shard completes one.
  std::optional<Snapshot> add(const ShardSnapshotHeader& h, std::span<const std::byte> values);

 private:
  struct Range {
    int64_t count = 0;
    int64_t realtime_ns = 0;
    int64_t updates = 0;
    bool fresh = false;  // replaced since the last snapshot
  };
  std::vector<float> params_;
  std::map<int64_t, Range> ranges_;  // by offset
};

}  // namespace chaosbed
