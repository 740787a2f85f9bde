#include "core/strategies/shard_assembly.h"

#include <algorithm>
#include <cstring>

namespace chaosbed {

std::optional<ShardAssembly::Snapshot> ShardAssembly::add(const ShardSnapshotHeader& h, std::span<const std::byte> values) {
  Range& r = ranges_[h.offset];
  if (r.count == h.count && h.realtime_ns <= r.realtime_ns) return std::nullopt;  // a copy older than the one held
  std::memcpy(params_.data() + h.offset, values.data(), size_t(h.count) * sizeof(float));
  r = Range{h.count, h.realtime_ns, h.updates, true};
  // Complete when the fresh ranges tile the buffer (one that overlaps the tiling so far is passed over).
  int64_t covered = 0;
  Snapshot s;
  for (const auto& [offset, range] : ranges_) {
    if (!range.fresh || offset < covered) continue;
    if (offset > covered) return std::nullopt;
    covered += range.count;
    s.realtime_ns = std::max(s.realtime_ns, range.realtime_ns);
    s.updates = std::max(s.updates, range.updates);
  }
  if (covered != int64_t(params_.size())) return std::nullopt;
  for (auto& [offset, range] : ranges_) range.fresh = false;
  s.params = params_;
  return s;
}

}  // namespace chaosbed
