#include "core/eval/snapshot_evaluator.h"

#include <algorithm>
#include <string>
#include <utility>

namespace chaosbed::eval {

Result<std::unique_ptr<SnapshotEvaluator>> SnapshotEvaluator::create(std::vector<size_t> layers,
                                                                     const data::Dataset& test_set,
                                                                     const EvaluatorOptions& options) {
  CHAOSBED_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::create(options.kind, layers, options.eval_batch));
  if (options.emulate.enabled()) {
    CHAOSBED_ASSIGN_OR_RETURN(model::EmulationPlan plan, model::planEmulation(options.emulate, model->numParameters()));
    model->padTo(plan.padded_parameters);
  }
  if (test_set.size() == 0) return Status::invalidArgument("snapshot evaluator: empty test set");
  if (test_set.dims != model->inputDims() || static_cast<size_t>(test_set.num_classes) > model->numClasses()) {
    return Status::invalidArgument("snapshot evaluator: test set has " + std::to_string(test_set.dims) + " dims and " +
                                   std::to_string(test_set.num_classes) + " classes; the model takes " +
                                   std::to_string(model->inputDims()) + " and outputs " + std::to_string(model->numClasses()));
  }
  return std::unique_ptr<SnapshotEvaluator>(new SnapshotEvaluator(std::move(model), test_set, options));
}

SnapshotEvaluator::SnapshotEvaluator(std::unique_ptr<model::Model> model, const data::Dataset& test_set, const EvaluatorOptions& options)
    : model_(std::move(model)), test_set_(test_set), options_(options),
      num_parameters_(model_->numParameters()), thread_([this] { run(); }) {}

SnapshotEvaluator::~SnapshotEvaluator() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status SnapshotEvaluator::submit(double time_s, int64_t step, std::vector<float> params) {
  if (params.size() != model_->numParameters()) {
    return Status::invalidArgument("snapshot evaluator: snapshot has " + std::to_string(params.size()) +
                                   " parameters, the model " + std::to_string(model_->numParameters()));
  }
  {
    std::lock_guard lock(mu_);
    if (time_s < last_time_s_) {
      return Status::invalidArgument("snapshot evaluator: snapshot time " + std::to_string(time_s) +
                                     " s is before the previous one at " + std::to_string(last_time_s_) + " s");
    }
    last_time_s_ = time_s;
    queue_.push_back({time_s, step, std::move(params)});
    // Over the bound, every other held snapshot goes (the newest stays): the crossing is then resolved to
    // twice the snapshot interval, and the records show the gap that was measured.
    if (queue_.size() * num_parameters_ * sizeof(float) > options_.held_bytes && queue_.size() > 2) {
      std::deque<Pending> kept;
      for (size_t i = 0; i < queue_.size(); ++i)
        if ((queue_.size() - 1 - i) % 2 == 0) kept.push_back(std::move(queue_[i]));
      queue_ = std::move(kept);
    }
  }
  cv_.notify_all();
  return Status::ok();
}

Status SnapshotEvaluator::drain(Deadline deadline) {
  std::unique_lock lock(mu_);
  draining_ = true;
  cv_.notify_all();
  const bool done = cv_.wait_until(lock, deadline, [this] { return queue_.empty() && !busy_; });
  draining_ = false;
  if (!done) {
    return Status::timeout("snapshot evaluator: " + std::to_string(queue_.size() + (busy_ ? 1 : 0)) +
                           " snapshots still unevaluated at the deadline");
  }
  return error_;
}

bool SnapshotEvaluator::targetReached() const { return reached_.load(std::memory_order_acquire); }

std::optional<double> SnapshotEvaluator::timeToAccuracy() const {
  std::lock_guard lock(mu_);
  return tta_;
}

std::vector<SnapshotRecord> SnapshotEvaluator::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

std::optional<SnapshotRecord> SnapshotEvaluator::latest() const {
  std::lock_guard lock(mu_);
  if (records_.empty()) return std::nullopt;
  return records_.back();
}

bool SnapshotEvaluator::dueLocked() const {
  if (queue_.empty()) return false;
  return draining_ || options_.pace_s <= 0 || queue_.back().time_s >= paced_time_s_ + options_.pace_s;
}

Result<SnapshotRecord> SnapshotEvaluator::evaluate(const Pending& snapshot, bool refined) {
  std::copy(snapshot.params.begin(), snapshot.params.end(), model_->parameters().begin());
  Result<model::EvalResult> result = model_->evaluate(test_set_);
  if (!result.isOk()) return result.status().withContext("snapshot at " + std::to_string(snapshot.time_s) + " s");
  return SnapshotRecord{snapshot.time_s, snapshot.step, result->accuracy, result->loss, refined};
}

void SnapshotEvaluator::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || dueLocked(); });
    if (stop_) return;
    // The newest snapshot is evaluated; the ones before it (since the last evaluation) are held for a crossing.
    const Pending newest = std::move(queue_.back());
    queue_.pop_back();
    const std::deque<Pending> held = std::exchange(queue_, {});
    const bool was_reached = paced_reached_;
    busy_ = true;
    lock.unlock();

    std::vector<SnapshotRecord> records;
    Status failed;
    Result<SnapshotRecord> paced = evaluate(newest, /*refined=*/false);
    if (paced.isOk() && paced->accuracy >= options_.target_accuracy && !was_reached) {
      for (const Pending& snapshot : held) {
        if (std::lock_guard stopping(mu_); stop_) break;  // the destructor waits for no more than one
        Result<SnapshotRecord> r = evaluate(snapshot, /*refined=*/true);
        if (!r.isOk()) {
          failed = r.status();
          break;
        }
        records.push_back(*r);
        if (r->accuracy >= options_.target_accuracy) break;  // the crossing: the snapshots after it tell no more
      }
    }
    if (paced.isOk()) records.push_back(*paced);
    else failed = paced.status();

    lock.lock();
    busy_ = false;
    paced_time_s_ = newest.time_s;
    if (paced.isOk()) paced_reached_ = paced->accuracy >= options_.target_accuracy;
    if (!failed.isOk() && error_.isOk()) error_ = failed;
    for (const SnapshotRecord& r : records) {
      records_.push_back(r);
      if (!tta_ && r.accuracy >= options_.target_accuracy) {
        tta_ = r.time_s;
        reached_.store(true, std::memory_order_release);
      }
    }
    cv_.notify_all();
  }
}

}  // namespace chaosbed::eval
