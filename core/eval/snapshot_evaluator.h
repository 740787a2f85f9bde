#pragma once
// SnapshotEvaluator: evaluates parameter snapshots on a held-out set on its own thread, off the training
// critical path, and derives time-to-accuracy (TTA) as docs/design.md defines it: the wall time of the FIRST
// SNAPSHOT whose accuracy reaches the target (the snapshot's time counts, not the time its evaluation ended).
//
// Contract
// - It does not care where parameters come from (a local trainer, a pull from parameter servers, a
//   checkpoint): submit() takes a time, a step and a copy of the flat parameter buffer (core/model/mlp.h
//   layout for the layers given at creation).
// - Each evaluation takes the newest snapshot (at most one per options.pace_s of snapshot time); the ones
//   submitted since the previous evaluation are held. When this one reaches the target and the previous one
//   did not, the held ones are evaluated oldest first up to the first that reaches it (records marked
//   refined): a crossing is dated to the snapshot interval, not to the pace of evaluation or its speed.
//   Held snapshots are dropped otherwise (and every other one when they would hold more than
//   options.held_bytes). submit() never blocks.
// - All methods are thread-safe. The held-out dataset must outlive the evaluator. The destructor finishes
//   the evaluation in progress (bounded: one pass over the dataset) and discards the rest of the queue.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/data/dataset.h"
#include "core/model/emulation.h"
#include "core/model/model.h"
#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed::eval {

struct SnapshotRecord {
  double time_s = 0;  // wall seconds since the start of training when the snapshot was taken
  int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
  bool refined = false;  // evaluated only to resolve a crossing of the target between two paced evaluations
};

struct EvaluatorOptions {
  double target_accuracy = 0.85;
  size_t eval_batch = 1000;  // samples per forward pass (a convolutional model splits it further)
  model::Kind kind = model::Kind::kMlp;
  model::EmulationSpec emulate{};  // snapshots of an emulated model carry its padding
  // The newest snapshot is evaluated once it is pace_s (snapshot time) after the last paced one; 0: as soon
  // as the evaluator is free.
  double pace_s = 0;
  size_t held_bytes = size_t(256) << 20;  // bound on the queued and held snapshots' parameters
};

class SnapshotEvaluator {
 public:
  // A model of options.kind with these layers (see model::create). InvalidArgument if they or eval_batch are unusable, or the dataset does not fit the model.
  static Result<std::unique_ptr<SnapshotEvaluator>> create(std::vector<size_t> layers, const data::Dataset& test_set,
                                                           const EvaluatorOptions& options);
  ~SnapshotEvaluator();
  SnapshotEvaluator(const SnapshotEvaluator&) = delete;
  SnapshotEvaluator& operator=(const SnapshotEvaluator&) = delete;

  // Queues a snapshot and returns at once. InvalidArgument if params has the wrong size or time_s is
  // earlier than the previous snapshot's.
  Status submit(double time_s, int64_t step, std::vector<float> params);

  // Evaluates the newest snapshot at once (and its crossing, if it is one) and waits for that. Timeout if the deadline passes first; the first
  // evaluation error otherwise (sticky), else OK.
  Status drain(Deadline deadline);

  // True once some snapshot reached the target. Cheap; safe to poll every training step.
  bool targetReached() const;
  // The time of the first snapshot that reached the target, if any has.
  std::optional<double> timeToAccuracy() const;
  // Evaluated snapshots so far, in snapshot-time order (a crossing's refined records come before the record
  // that revealed it, and all of them at once).
  std::vector<SnapshotRecord> records() const;
  std::optional<SnapshotRecord> latest() const;
  double targetAccuracy() const { return options_.target_accuracy; }
  size_t numParameters() const { return num_parameters_; }

 private:
  SnapshotEvaluator(std::unique_ptr<model::Model> model, const data::Dataset& test_set, const EvaluatorOptions& options);
  struct Pending {
    double time_s;
    int64_t step;
    std::vector<float> params;
  };

  void run();
  bool dueLocked() const;
  Result<SnapshotRecord> evaluate(const Pending& snapshot, bool refined);

  std::unique_ptr<model::Model> model_;  // used by the evaluation thread only
  const data::Dataset& test_set_;
  const EvaluatorOptions options_;
  const size_t num_parameters_;  // of model_, readable from any thread

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;               // guarded by mu_
  std::vector<SnapshotRecord> records_;     // guarded by mu_
  std::optional<double> tta_;               // guarded by mu_
  Status error_;                            // guarded by mu_
  double last_time_s_ = 0;                  // guarded by mu_
  double paced_time_s_ = 0;                 // guarded by mu_: the last paced evaluation's snapshot time
  bool paced_reached_ = false;              // guarded by mu_: whether it reached the target
  bool busy_ = false;                       // guarded by mu_: a snapshot is being evaluated
  bool draining_ = false;                   // guarded by mu_: drain() waits: evaluate the newest now
  bool stop_ = false;                       // guarded by mu_
  std::atomic<bool> reached_{false};
  std::thread thread_;
};

}  // namespace chaosbed::eval
