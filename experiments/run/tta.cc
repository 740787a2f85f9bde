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
  resolution_ = TtaPoint{crossing_->time_s - before_crossing_.time_s, crossing_->steps - before_crossing_.steps};
  return true;
}

}  // namespace chaosbed::run
