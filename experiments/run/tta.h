#pragma once
// TtaTracker: time to accuracy from the evaluator's records, in the order it publishes them
// (core/eval/snapshot_evaluator.h): paced evaluations and, just before a paced one that reached the target
// from below, refined evaluations of the snapshots taken between the two, up to the first that reached it.
// The sustained streak counts paced evaluations only (so that it spans time, not a burst of close
// snapshots); it is dated by the first evaluated snapshot at or above the target since the last paced
// evaluation below it, so a refined crossing dates it to the snapshot interval. docs/design.md §4.1.

#include <cstdint>
#include <optional>

namespace chaosbed::run {

struct TtaPoint {
  double time_s = 0;  // the snapshot's time since the start of training
  int64_t steps = 0;  // mini-batch gradients in the snapshot's parameters
};

class TtaTracker {
 public:
  TtaTracker(double target_accuracy, int sustained_evals)
      : target_(target_accuracy), sustained_evals_(sustained_evals) {}

  // One record; true when it completes the first sustained streak (the run stops there).
  bool add(TtaPoint snapshot, double accuracy, bool refined);

  const std::optional<TtaPoint>& first() const { return first_; }
  const std::optional<TtaPoint>& sustained() const { return sustained_; }
  // How late sustained() can be: its distance to the evaluated snapshot before it (or to the start). In
  // steps only where that snapshot's parameters are its ancestors: none where a rollback came between.
  struct Resolution {
    double seconds = 0;
    std::optional<int64_t> steps;
  };
  const std::optional<Resolution>& resolution() const { return resolution_; }

 private:
  const double target_;
  const int sustained_evals_;
  int streak_ = 0;              // consecutive paced evaluations at or above the target
  TtaPoint previous_;           // the last evaluated snapshot: the start of training before any
  std::optional<TtaPoint> crossing_;  // the first at or above the target since the last paced one below
  TtaPoint before_crossing_;          // and the evaluated snapshot before it
  std::optional<TtaPoint> first_, sustained_;
  std::optional<Resolution> resolution_;
};

}  // namespace chaosbed::run
