#include "experiments/run/tta.h"

namespace chaosbed::run {

bool TtaTracker::add(TtaPoint snapshot, double accuracy, bool refined) {
  const bool reached = accuracy >= target_;
  if (reached && !crossing_) {
    crossing_ = snapshot;
    before_crossing_ = previous_;
  }
  if (reached && !first_) first_ = snapshot;
  previous_ = snapshot;
  if (refined) return false;
  if (!reached) crossing_.reset();
  streak_ = reached ? streak_ + 1 : 0;
  if (sustained_ || streak_ < sustained_evals_) return false;
  sustained_ = crossing_;
  const int64_t steps = crossing_->steps - before_crossing_.steps;
  resolution_ = Resolution{crossing_->time_s - before_crossing_.time_s,
                           steps >= 0 ? std::optional<int64_t>(steps) : std::nullopt};
  return true;
}

}  // namespace chaosbed::run
