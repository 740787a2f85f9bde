#pragma once
// Membership: who takes part in training, as the controller decides it and publishes it in the store
// (core/control/keys.h), and as every node reads it back (core/runtime/control.h).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/base/status.h"

namespace chaosbed {

// Ranks are transport ranks.
struct Membership {
  static constexpr size_t kMaxMembers = 65536;

  int64_t generation = 0;
  std::vector<int> workers;  // live worker ranks of this generation, sorted
  bool rollback = false;     // everyone restores the latest checkpoint before continuing (restart policy)
  std::vector<int> joined;   // replacements that join in this generation (elastic: receive params)
  // The incarnation of each member (parallel to workers; empty: every member is a first incarnation). A
  // replacement enters only a generation that names its own incarnation, never one meant for its predecessor.
  std::vector<int> incarnations;

  // rank's incarnation in this generation; nullopt when rank is not a member.
  std::optional<int> incarnationOf(int rank) const;
  nlohmann::json toJson() const;
  // Checked decode, never throws. InvalidArgument unless: generation is an integer >= 0; workers is a
  // non-empty, strictly increasing list of ranks in [0, world_workers) (only >= 0 when world_workers is 0);
  // rollback, when present, is a boolean; joined, when present, lists distinct members of workers;
  // incarnations, when present, holds one integer >= 0 per member.
  static Result<Membership> fromJson(const nlohmann::json& j, int world_workers = 0);
  static Result<Membership> decode(std::string_view text, int world_workers = 0);
};

}  // namespace chaosbed
