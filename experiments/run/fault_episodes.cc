#include "experiments/run/fault_episodes.h"

#include <algorithm>

namespace chaosbed::run {
namespace {

using Samples = std::vector<std::pair<double, int64_t>>;

// Cumulative steps at time t, interpolated between samples (before the first: its value).
double stepsAt(const Samples& s, double t) {
  if (s.empty()) return 0;
  if (t <= s.front().first) return double(s.front().second);
  if (t >= s.back().first) return double(s.back().second);
  auto hi = std::lower_bound(s.begin(), s.end(), t, [](const auto& p, double v) { return p.first < v; });
  auto lo = hi - 1;
  const double span = hi->first - lo->first;
  const double f = span > 0 ? (t - lo->first) / span : 1;
  return double(lo->second) + f * double(hi->second - lo->second);
}

}  // namespace

nlohmann::json FaultEpisode::toJson() const {
  auto opt = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  return {{"fault", fault.name},     {"kind", fault.kind},           {"node", fault.node},
          {"start_s", fault.t},      {"pre_fault_steps_per_s", opt(pre_fault_rate)},
          {"detected_at_s", opt(fault.detected_t)},
          {"detection_s", fault.detected_t ? nlohmann::json(*fault.detected_t - fault.t) : nlohmann::json(nullptr)},
          {"recovered_at_s", opt(recovered_at)}, {"seconds", opt(seconds())}};
}

std::vector<FaultEpisode> faultEpisodes(const std::vector<FaultStart>& faults, const Samples& steps,
                                        const EpisodeOptions& o) {
  // Training has begun at the first sample with steps: start-up is no reference pace.
  double begun = 0;
  for (const auto& [t, n] : steps)
    if (n > 0) {
      begun = t;
      break;
    }
  std::vector<FaultEpisode> out;
  for (const FaultStart& f : faults) {
    FaultEpisode e{f, std::nullopt, std::nullopt};
    const double from = std::max({0.0, begun, f.t - o.baseline_s});
    if (!steps.empty() && f.t - from >= o.min_baseline_s) {
      const double rate = (stepsAt(steps, f.t) - stepsAt(steps, from)) / (f.t - from);
      if (rate > 0) e.pre_fault_rate = rate;
    }
    if (e.pre_fault_rate) {
      // The first window of `intervals` sample intervals, starting at the fault or at a sample after it, whose
      // pace is back: its start is when the pace came back. The window starts at or after the fault, so a
      // fast stretch after a stall cannot average the stall away; it spans two intervals, so one noisy
      // interval (±20% at 500 ms on a busy machine) neither ends nor prolongs an episode on its own.
      const double target = o.fraction * *e.pre_fault_rate;
      size_t first = 0;
      while (first < steps.size() && steps[first].first <= f.t) ++first;
      for (size_t i = first; i + size_t(o.intervals) <= steps.size() && !e.recovered_at; ++i) {
        const double a = i == first ? f.t : steps[i - 1].first;
        const double b = steps[i + size_t(o.intervals) - 1].first;
        if (b > a && (stepsAt(steps, b) - stepsAt(steps, a)) / (b - a) >= target) e.recovered_at = a;
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace chaosbed::run
