#include "core/control/failure_detector.h"

namespace chaosbed::control {

void FailureDetector::observe(const NodeId& node, double heartbeat, double t) {
  auto [it, first] = last_.try_emplace(node, Seen{heartbeat, t});
  if (!first && it->second.heartbeat != heartbeat) it->second = Seen{heartbeat, t};
}

std::vector<FailureDetector::Lost> FailureDetector::expired(double t) {
  std::vector<Lost> lost;
  for (auto it = last_.begin(); it != last_.end();) {
    if (t - it->second.changed_at_s >= timeout_s_) {
      lost.push_back({it->first, it->second.changed_at_s});
      it = last_.erase(it);
    } else {
      ++it;
    }
  }
  return lost;
}

}  // namespace chaosbed::control
