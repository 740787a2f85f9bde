#pragma once
// Fault episodes: for every fault that was applied, how long training took to get back to its pace.
//
// An episode starts when the fault is applied and ends where the first window of `intervals` sample
// intervals begins (at the fault, or at a sample after it) over which the workers' steps per second are at
// least `fraction` of the pace just before the fault (over baseline_s, start-up excluded). A fault that
// does not slow training has an episode of 0 s.
// It is measured for every fault kind, so a pause, a throttled node or a slow link has a recovery time just
// as a kill has; the fault's own duration is part of it by definition. Throughput comes from the
// supervisor's samples of the workers' step count (every 500 ms), so times are that coarse.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace chaosbed::run {

struct FaultStart {
  std::string name, kind, node;
  double t = 0;  // training time of the apply, in seconds
  // When the cluster saw the node go (its exit; for a vanish or an overlong pause, the failure detector's
  // declaration); none for faults that do not end a node.
  std::optional<double> detected_t;
};

struct FaultEpisode {
  FaultStart fault;
  std::optional<double> pre_fault_rate;  // steps/s before the fault; none when there is no such stretch
  std::optional<double> recovered_at;    // when the pace came back; none if it did not before the run ended
  std::optional<double> seconds() const {
    if (!recovered_at) return std::nullopt;
    return *recovered_at - fault.t;
  }
  nlohmann::json toJson() const;
};

struct EpisodeOptions {
  double baseline_s = 5;   // the stretch before the fault whose pace is the reference (shorter if it must be)
  double min_baseline_s = 1;
  int intervals = 2;       // sample intervals (500 ms each) per window
  double fraction = 0.9;
};

// `steps`: (time, cumulative worker steps) samples, in time order.
std::vector<FaultEpisode> faultEpisodes(const std::vector<FaultStart>& faults,
                                        const std::vector<std::pair<double, int64_t>>& steps,
                                        const EpisodeOptions& options = {});

}  // namespace chaosbed::run
