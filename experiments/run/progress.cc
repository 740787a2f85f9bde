#include "experiments/run/progress.h"

#include <algorithm>
#include <cmath>

namespace chaosbed::run {

std::optional<double> etaSeconds(const std::vector<std::pair<double, double>>& evaluations, double target,
                                 size_t window) {
  if (evaluations.size() < 3 || window < 3) return std::nullopt;
  const size_t from = evaluations.size() - std::min(window, evaluations.size());
  double n = 0, st = 0, sa = 0, stt = 0, sta = 0;
  for (size_t i = from; i < evaluations.size(); ++i) {
    const auto [t, a] = evaluations[i];
    n += 1;
    st += t;
    sa += a;
    stt += t * t;
    sta += t * a;
  }
  const double denom = n * stt - st * st;
  if (denom <= 0) return std::nullopt;
  const double slope = (n * sta - st * sa) / denom;
  if (!(slope > 0)) return std::nullopt;
  const double intercept = (sa - slope * st) / n;
  const double now = evaluations.back().first;
  // Where the line meets the target, from the latest evaluation on (0 once the trend is past it).
  return std::max(0.0, (target - intercept) / slope - now);
}

std::string ProgressPrinter::line(const Progress& p) const {
  char acc[32] = "-";
  if (p.accuracy) std::snprintf(acc, sizeof acc, "%.4f", *p.accuracy);
  char eta[48] = "ETA -";
  auto it = evaluations_.find(p.label);
  if (p.accuracy && *p.accuracy >= target_) {
    std::snprintf(eta, sizeof eta, "at target");
  } else if (it != evaluations_.end()) {
    if (auto s = etaSeconds(it->second, target_)) {
      // The trend's arrival, counted from now: the latest evaluation was taken a little earlier.
      const double remaining = std::max(0.0, *s - (p.elapsed_s - it->second.back().first));
      if (p.time_limit_s > 0 && p.elapsed_s + remaining > p.time_limit_s)
        std::snprintf(eta, sizeof eta, "ETA past the %.0f s limit", p.time_limit_s);
      else if (remaining < 1)
        std::snprintf(eta, sizeof eta, "ETA <1 s");  // the trend is there; the next evaluations will tell
      else
        std::snprintf(eta, sizeof eta, "ETA %.0f s", std::ceil(remaining));
    }
  }
  double steps_per_s = 0;
  if (auto last = last_printed_.find(p.label); last != last_printed_.end() && p.elapsed_s > last->second.elapsed_s)
    steps_per_s = double(p.steps - last->second.steps) / (p.elapsed_s - last->second.elapsed_s);
  char buf[256];
  std::snprintf(buf, sizeof buf, "[%s] %6.1f s  acc %s / %.2f  %s  %.0f steps/s  nodes %d/%d  faults %d active, %d applied",
                p.label.c_str(), p.elapsed_s, acc, target_, eta, steps_per_s, p.alive, p.nodes, p.faults_active,
                p.faults);
  return buf;
}

void ProgressPrinter::update(const Progress& p) {
  if (p.accuracy && p.accuracy_at_s) {
    auto& evals = evaluations_[p.label];
    if (evals.empty() || evals.back().first < *p.accuracy_at_s) evals.emplace_back(*p.accuracy_at_s, *p.accuracy);
  }
  if (!out_) return;
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s", line(p).c_str());
  } else {
    auto last = last_printed_.find(p.label);
    if (last != last_printed_.end() && p.elapsed_s - last->second.elapsed_s < pipe_interval_s_) return;
    std::fprintf(out_, "%s\n", line(p).c_str());
  }
  last_printed_[p.label] = {p.elapsed_s, p.steps};
  std::fflush(out_);
}

void ProgressPrinter::done(const std::string& label, const std::string& reason) {
  if (!out_) return;
  std::fprintf(out_, "%s[%s] done: %s\n", tty_ ? "\n" : "", label.c_str(), reason.c_str());
  std::fflush(out_);
}

}  // namespace chaosbed::run
