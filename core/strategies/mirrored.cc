// The mirrored strategy: set-up, the training loop, one synchronous step, snapshots and checkpoints.

#include "core/strategies/mirrored_worker.h"

#include <charconv>

#include "core/config/json_fields.h"

namespace chaosbed::mirrored_detail {

Status MirroredWorker::setup() {
  if (cfg_.batch_per_worker <= 0) return Status::invalidArgument("training.batch_per_worker: must be positive");
  bpw_ = static_cast<size_t>(cfg_.batch_per_worker);
  if (me_ < 0 || me_ >= ctx_.workers)
    return Status::invalidArgument("mirrored: rank " + std::to_string(me_) + " is not a worker rank (workers 0.." +
                                   std::to_string(ctx_.workers - 1) + ")");
  if (ctx_.workers > kMaxMembers && ctx_.strategy.backup_workers > 0)
    return Status::invalidArgument("mirrored: backup_workers supports at most " + std::to_string(kMaxMembers) +
                                   " workers, got " + std::to_string(ctx_.workers));
  if (ctx_.strategy.nccl && ctx_.strategy.backup_workers > 0)
    return Status::invalidArgument("mirrored: backup_workers forwards gradients point to point over UCX; it does "
                                   "not combine with cluster.transport: nccl");
  CHAOSBED_ASSIGN_OR_RETURN(reducer_, makeGradientReducer(ctx_));
  auto model = makeModel(cfg_, bpw_);
  if (!model.isOk()) return model.status().withContext("mirrored: model");
  model_ = std::move(model).value();
  if (train_.dims != model_->inputDims())
    return Status::invalidArgument("mirrored: training set has " + std::to_string(train_.dims) +
                                   " dims per sample but the model takes " + std::to_string(model_->inputDims()));
  optim::SgdOptions o{static_cast<float>(cfg_.learning_rate), static_cast<float>(cfg_.momentum),
                      static_cast<float>(cfg_.weight_decay)};
  // The optimizer steps the model's own parameters: an emulated model's padding is the accelerator's
  // business (the emulated compute time), not this CPU's.
  auto sgd = optim::Sgd::create(o, model_->realParameters());
  if (!sgd.isOk()) return sgd.status().withContext("mirrored: optimizer");
  sgd_.emplace(std::move(sgd).value());
  auto accelerator = EmulatedAccelerator::create(ctx_, model_->realParameters(), /*allreduce=*/true);
  if (!accelerator.isOk()) return accelerator.status().withContext("mirrored: workload.emulate");
  accelerator_.emplace(std::move(accelerator).value());
  resetToInitialState();
  slice_images_.resize(bpw_ * train_.dims);
  slice_labels_.resize(bpw_);
  start_ns_ = ctx_.control.startNs() != 0 ? ctx_.control.startNs() : realtimeNs();
  next_snapshot_ = SteadyClock::now();
  next_checkpoint_ = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                              std::chrono::duration<double>(cfg_.checkpoint_interval_s));
  return Status::ok();
}

void MirroredWorker::resetToInitialState() {
  model_->initialize(cfg_.seed);
  std::fill(sgd_->velocity().begin(), sgd_->velocity().end(), 0.0f);
  progress_ = Progress{};
  has_state_ = true;
}

bool MirroredWorker::timeUp() const {
  return cfg_.time_limit_s > 0 && double(realtimeNs() - start_ns_) * 1e-9 >= cfg_.time_limit_s;
}

int64_t MirroredWorker::mySamplesAtStep(int64_t step) const {
  if (my_cum_.empty()) return my_samples_;
  const int64_t i = std::clamp<int64_t>(step - cum_base_step_, 0, static_cast<int64_t>(my_cum_.size()) - 1);
  return my_cum_[static_cast<size_t>(i)];
}

void MirroredWorker::resetSampleHistory() {
  cum_base_step_ = progress_.step;
  my_cum_.assign(1, my_samples_);
}

// --------------------------------------------------------------------------------------------------- steps

// Copies this member's slice of the next global batch (position of members).
Status MirroredWorker::nextSlice(int position, int members) {
  const int64_t global = static_cast<int64_t>(bpw_) * members;
  if (progress_.cursor + global > static_cast<int64_t>(train_.size())) {
    ++progress_.epoch;
    progress_.cursor = 0;
  }
  if (order_epoch_ != progress_.epoch) {
    auto order = data::shardOrder(train_.size(), data::ShardSpec{0, 1}, cfg_.seed,
                                  static_cast<uint64_t>(progress_.epoch));
    CHECK(order.isOk()) << order.status().toString();  // a one-shard spec is always valid
    order_ = std::move(order).value();
    order_epoch_ = progress_.epoch;
  }
  const size_t dims = train_.dims;
  const size_t first = static_cast<size_t>(progress_.cursor) + static_cast<size_t>(position) * bpw_;
  for (size_t i = 0; i < bpw_; ++i) {
    const uint32_t s = order_[first + i];
    CHAOSBED_RETURN_IF_ERROR(train_.copySample(s, slice_images_.data() + i * dims));
    slice_labels_[i] = train_.labels[s];
  }
  return Status::ok();
}

uint32_t MirroredWorker::myFlags() {
  uint32_t flags = 0;
  if (ctx_.control.stopRequested() || timeUp()) flags |= kFlagStop;
  if (ctx_.noticeReceived()) {
    flags |= kFlagNotice;
    if (!notice_published_) {
      notice_published_ = true;
      if (Status s = ctx_.control.noticeReceived(); !s.isOk())
        LOG(WARNING) << "the notice was not recorded in the store: " << s.toString();
    }
  }
  return flags;
}

Status MirroredWorker::computeGradient(int position, int members) {
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
  const auto started = SteadyClock::now();
  CHAOSBED_RETURN_IF_ERROR(nextSlice(position, members));
  auto loss = model_->computeGradients(slice_images_, slice_labels_);
  if (!loss.isOk()) return loss.status().withContext("mirrored: computing gradients");
  accelerator_->afterCompute(started);
  if (hooks_.after_gradient) hooks_.after_gradient(progress_.step, membership_.generation);
  return Status::ok();
}

Status MirroredWorker::applyGradient(float scale) {
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
  const size_t real = model_->realParameters();
  return sgd_->apply(model_->parameters().first(real), model_->gradients().first(real), scale);
}

Status MirroredWorker::step(StepOutcome& out) {
  const int n = comm_.size();
  const auto started = SteadyClock::now();
  CHAOSBED_RETURN_IF_ERROR(computeGradient(comm_.myIndex(), n));
  StepHeader header{realtimeNs(), ctx_.control.latestGeneration(), progress_.step, myFlags(), me_};
  std::vector<StepHeader> headers(static_cast<size_t>(n));
  out.failed_at = SteadyClock::now();
  Status s = allgather(comm_, podBytes(header), std::as_writable_bytes(std::span<StepHeader>(headers)),
                       collectiveDeadline());
  if (!s.isOk()) return s.withContext("mirrored: step header of step " + std::to_string(progress_.step));
  const double exchange = secondsSince(out.failed_at);
  int64_t last_arrival = header.arrival_ns;
  out.generation = membership_.generation;
  for (const StepHeader& h : headers) {
    if (h.step != progress_.step)
      return Status::internal("mirrored: rank " + std::to_string(h.rank) + " is at step " + std::to_string(h.step) +
                              ", this rank at " + std::to_string(progress_.step));
    last_arrival = std::max(last_arrival, h.arrival_ns);
    out.generation = std::max(out.generation, h.generation);
    out.stop = out.stop || (h.flags & kFlagStop);
    if (h.flags & kFlagNotice) out.noticed.push_back(h.rank);
  }
  // Waiting for the last member to arrive is idle; the rest of the exchange moved data.
  // A member frozen or dying in the middle of an exchange shows as an exchange far longer than usual.
  const double idle = std::clamp(double(last_arrival - header.arrival_ns) * 1e-9, 0.0, exchange);
  const auto header_split = header_splitter_.split(exchange - idle);
  ctx_.accounting.add(
      {{TimeCategory::kIdlePeer, idle + header_split.idle}, {TimeCategory::kTransfer, header_split.transfer}});

  out.failed_at = SteadyClock::now();
  s = reducer_->allreduce(comm_, model_->gradients(), collectiveDeadline());
  // A failed all-reduce is booked by recover(), from failed_at, as recovery: not here as well.
  if (!s.isOk()) return s.withContext("mirrored: gradient all-reduce of step " + std::to_string(progress_.step));
  const auto reduce_split = allreduce_splitter_.split(secondsSince(out.failed_at));
  ctx_.accounting.add(
      {{TimeCategory::kTransfer, reduce_split.transfer}, {TimeCategory::kIdlePeer, reduce_split.idle}});
  CHAOSBED_RETURN_IF_ERROR(applyGradient(1.0f / static_cast<float>(n)));
  completeStep(static_cast<int64_t>(bpw_) * n, static_cast<int64_t>(bpw_), started);
  return Status::ok();
}

void MirroredWorker::completeStep(int64_t global_samples, int64_t my_samples, SteadyClock::time_point started) {
  ++progress_.step;
  progress_.cursor += static_cast<int64_t>(bpw_) * comm_.size();
  progress_.samples += global_samples;
  my_samples_ += my_samples;
  my_cum_.push_back(my_samples_);
  ctx_.accounting.step(my_samples, secondsSince(started));
  ctx_.accounting.epoch(progress_.epoch);
  if (recovery_started_) {
    const double seconds = secondsSince(*recovery_started_);
    ctx_.accounting.recovery(seconds);
    ctx_.control.record(events::MirroredRecovered{
        .seconds = seconds, .generation = membership_.generation, .step = progress_.step});
    recovery_started_.reset();
  }
}

// ------------------------------------------------------------------------------- snapshots and checkpoints

void MirroredWorker::maybeSnapshot(bool force) {
  const int evaluator = ctx_.evaluatorRank();
  if (evaluator >= ctx_.transport.size() || evaluator == me_) return;
  const auto now = SteadyClock::now();
  // By steps: the first step boundary at or after each multiple of N gradients (global samples / batch), so
  // that a snapshot that waited for a busy evaluator goes at the next step rather than being skipped. A
  // rollback to a checkpoint moves the count back: snapshots go on from there, not from where it was.
  const int64_t every = cfg_.eval_interval_steps * static_cast<int64_t>(bpw_);
  const int64_t tick = every > 0 ? progress_.samples / every : 0;
  if (!force && (every > 0 ? tick == last_snapshot_tick_ : now < next_snapshot_)) return;
  if (progress_.step == last_snapshot_step_) return;
  if (snapshot_request_ && !snapshot_request_->isComplete()) return;  // never wait for the evaluator
  const auto params = model_->parameters();
  snapshot_buffer_.resize(snapshotMessageBytes(params.size()));
  // Its step counts gradients, as the summary's steps and eval_interval_steps do: a step of W workers is W.
  SnapshotHeader h{progress_.samples / static_cast<int64_t>(bpw_), realtimeNs(), static_cast<int64_t>(params.size())};
  std::memcpy(snapshot_buffer_.data(), &h, sizeof(h));
  std::memcpy(snapshot_buffer_.data() + sizeof(h), params.data(), params.size_bytes());
  snapshot_request_ = ctx_.transport.isend(evaluator, kSnapshotTag, snapshot_buffer_);
  last_snapshot_step_ = progress_.step;
  last_snapshot_tick_ = tick;
  next_snapshot_ = now + std::chrono::duration_cast<SteadyClock::duration>(
                             std::chrono::duration<double>(cfg_.eval_interval_s));
}

// At the end of training: the final parameters reach the evaluator unless it is gone (bounded wait).
void MirroredWorker::finishSnapshot() {
  if (!in_generation_ || !lowest()) return;
  const Deadline deadline = deadlineIn(kFinalSnapshotWait);
  if (snapshot_request_ && !wait(ctx_.transport, snapshot_request_, deadline).isOk()) return;
  snapshot_request_.reset();
  maybeSnapshot(true);
  if (snapshot_request_) (void)wait(ctx_.transport, snapshot_request_, deadline);  // best effort: the run ends
  snapshot_request_.reset();
}

void MirroredWorker::writeCheckpoint(const char* reason) {
  const auto started = SteadyClock::now();
  Status s;
  if (!checkpoint_dir_) {
    auto dir = CheckpointDir::open(ctx_.checkpoint_dir, kCheckpointsKept);
    if (dir.isOk()) checkpoint_dir_.emplace(std::move(dir).value());
    else s = dir.status();
  }
  if (checkpoint_dir_) {
    TrainingState state;
    auto params = model_->parameters();
    auto velocity = sgd_->velocity();
    state.params.assign(params.begin(), params.end());
    state.optimizer.emplace_back(velocity.begin(), velocity.end());
    state.step = static_cast<uint64_t>(progress_.step);
    state.epoch = static_cast<uint64_t>(progress_.epoch);
    state.samples = static_cast<uint64_t>(progress_.samples);
    state.metadata = {{"strategy", "mirrored"},
                      {"label", ctx_.strategy.label},
                      {"cursor", std::to_string(progress_.cursor)},
                      {"generation", std::to_string(membership_.generation)},
                      {"seed", std::to_string(cfg_.seed)}};
    s = checkpoint_dir_->save(state);
  }
  // The saver's own time; the other members wait for it at the next step (idle, peer).
  ctx_.accounting.add(TimeCategory::kCheckpoint, secondsSince(started));
  ctx_.accounting.checkpoint(s.isOk());
  if (s.isOk()) {
    ctx_.control.record(events::MirroredCheckpoint{.step = progress_.step, .reason = reason});
  } else {
    LOG(WARNING) << "mirrored rank " << me_ << ": checkpoint of step " << progress_.step << " failed: " << s.toString();
    ctx_.control.record(events::MirroredCheckpointFailed{.step = progress_.step, .error = s.toString()});
  }
  next_checkpoint_ = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                              std::chrono::duration<double>(cfg_.checkpoint_interval_s));
}

// Restores the newest good checkpoint (NotFound: there is none yet, everyone starts from the seed).
Status MirroredWorker::restoreCheckpoint() {
  auto dir = CheckpointDir::open(ctx_.checkpoint_dir, kCheckpointsKept);
  if (!dir.isOk()) return dir.status().withContext("mirrored: checkpoint dir " + ctx_.checkpoint_dir);
  auto loaded = dir->loadLatestGood();
  if (!loaded.isOk()) {
    if (loaded.status().code() != StatusCode::kNotFound)
      return loaded.status().withContext("mirrored: restoring a checkpoint");
    resetToInitialState();
    return Status::ok();
  }
  for (const std::string& skipped : loaded->skipped)
    LOG(WARNING) << "mirrored rank " << me_ << ": skipped checkpoint " << skipped;
  const TrainingState& st = loaded->state;
  if (st.params.size() != model_->numParameters() || st.optimizer.size() != 1 ||
      st.optimizer[0].size() != model_->realParameters())
    return Status::invalidArgument("mirrored: checkpoint " + loaded->path + " holds " +
                                   std::to_string(st.params.size()) + " parameters and " +
                                   std::to_string(st.optimizer.size()) + " optimizer buffers; the model has " +
                                   std::to_string(model_->numParameters()) + " parameters and 1 buffer");
  std::copy(st.params.begin(), st.params.end(), model_->parameters().begin());
  std::copy(st.optimizer[0].begin(), st.optimizer[0].end(), sgd_->velocity().begin());
  progress_.step = static_cast<int64_t>(st.step);
  progress_.epoch = static_cast<int64_t>(st.epoch);
  progress_.samples = static_cast<int64_t>(st.samples);
  auto cursor = st.metadata.find("cursor");
  progress_.cursor = 0;
  if (cursor != st.metadata.end()) {
    // A position in the epoch's permutation: anything else would index outside it, so it is ignored and
    // the epoch restarts (which only changes the order of the next samples).
    int64_t c = -1;
    const std::string& text = cursor->second;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), c);
    if (ec == std::errc() && p == text.data() + text.size() && c >= 0 && c <= static_cast<int64_t>(train_.size()))
      progress_.cursor = c;
    else
      LOG(WARNING) << "mirrored rank " << me_ << ": checkpoint " << loaded->path << ": ignoring malformed cursor \""
                   << config::excerpt(text, 40) << "\"";
  }
  has_state_ = true;
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------- run

Result<MirroredOutcome> MirroredWorker::run() {
  {
    Accounting::Frame setting_up(ctx_.accounting, ctx_.setUpCategory());
    CHAOSBED_RETURN_IF_ERROR(setup());
  }
  bool stopped = false;
  Status joined = joinFirst(stopped);
  if (!joined.isOk() && !stopped) return joined;
  const bool backup = ctx_.strategy.backup_workers > 0;
  while (!stopped) {
    // A step's own bookkeeping (batches, headers, snapshots, the loop's tests) is compute: the iteration adds
    // up to its wall time, and every instant between two iterations is booked.
    Accounting::Frame iteration(ctx_.accounting, TimeCategory::kCompute);
    if (ctx_.config.max_steps > 0 && progress_.step >= ctx_.config.max_steps) break;
    if (static_cast<int64_t>(train_.size()) < static_cast<int64_t>(bpw_) * comm_.size())
      return Status::invalidArgument("mirrored: the training set (" + std::to_string(train_.size()) +
                                     " samples) is smaller than one global batch (" + std::to_string(comm_.size()) +
                                     " x " + std::to_string(bpw_) + ")");
    StepOutcome out;
    Status s = backup && comm_.size() > 1 ? backupStep(out) : step(out);
    if (!s.isOk()) {
      if (!isPeerFailure(s)) return s;
      CHAOSBED_RETURN_IF_ERROR(recover(s, out.failed_at, stopped, "collective failed"));
      continue;
    }
    if (lowest()) maybeSnapshot(false);
    const bool leaving = ctx_.strategy.checkpoint_on_notice && !out.noticed.empty();
    const bool last = out.stop || (ctx_.config.max_steps > 0 && progress_.step >= ctx_.config.max_steps);
    if (leaving || last || out.generation > membership_.generation) {
      // Late members (backup workers) still need the gradients in flight to reach this step boundary.
      const auto flush_started = SteadyClock::now();
      Status f = checkPending(true, collectiveDeadline());
      ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(flush_started));
      if (!f.isOk()) {
        if (!isPeerFailure(f)) return f;
        CHAOSBED_RETURN_IF_ERROR(recover(f, SteadyClock::now(), stopped, "forwarding to late members failed"));
        continue;
      }
    }
    if (leaving) {
      // The lowest member that stays saves this step; the stayers wait for it before anyone may restore.
      std::vector<int> stayers;
      for (int r : comm_.members)
        if (!contains(out.noticed, r)) stayers.push_back(r);
      const int saver = stayers.empty() ? comm_.members.front() : stayers.front();
      const uint64_t op = comm_.next_op++;
      if (me_ == saver) writeCheckpoint("notice");
      if (contains(out.noticed, me_)) {
        left_on_notice_ = true;
        ctx_.control.record(events::MirroredLeftOnNotice{.step = progress_.step, .generation = membership_.generation});
        break;
      }
      const auto departed = SteadyClock::now();
      Communicator staying{&ctx_.transport, stayers, comm_.epoch, op};
      Status b = barrier(staying, collectiveDeadline());
      if (!b.isOk() && !isPeerFailure(b)) return b;
      CHAOSBED_RETURN_IF_ERROR(recover(Status::aborted("preemption notice", out.noticed.front()), departed, stopped,
                                       "members left on notice " + ranksToString(out.noticed), /*planned=*/true));
      continue;
    }
    if (lowest() && SteadyClock::now() >= next_checkpoint_) writeCheckpoint("interval");
    if (out.stop || (ctx_.config.max_steps > 0 && progress_.step >= ctx_.config.max_steps)) break;
    if (out.generation > membership_.generation) CHAOSBED_RETURN_IF_ERROR(switchGeneration(out.generation, stopped));
  }
  {
    // Handing the last snapshot to the evaluator (the lowest rank only) is transfer; a replacement that lived
    // 0.3 s left its 50 ms unattributed (17% of its wall) when this ran outside any frame.
    Accounting::Frame finishing(ctx_.accounting, TimeCategory::kTransfer);
    if (!left_on_notice_) finishSnapshot();
    cancelPending();
  }
  MirroredOutcome outcome;
  {
    // Copying out the model (2 MB for the default MLP) is the worker's own compute.
    Accounting::Frame handing_over(ctx_.accounting, TimeCategory::kCompute);
    auto params = model_->parameters();
    auto velocity = sgd_->velocity();
    outcome.parameters.assign(params.begin(), params.end());
    outcome.velocity.assign(velocity.begin(), velocity.end());
    outcome.step = progress_.step;
    outcome.generation = membership_.generation;
    outcome.left_on_notice = left_on_notice_;
  }
  ctx_.accounting.finish();  // the role's work is done; tearing its objects down is not part of it
  return outcome;
}


}  // namespace chaosbed::mirrored_detail

namespace chaosbed {

Result<MirroredOutcome> runMirrored(NodeContext& ctx, const data::Dataset& train, const MirroredHooks& hooks) {
  mirrored_detail::MirroredWorker worker(ctx, train, hooks);
  return worker.run();
}

Status runMirroredWorker(NodeContext& ctx) {
  if (ctx.data) return runMirrored(ctx, ctx.data->train).status();
  CHAOSBED_ASSIGN_OR_RETURN(data::DatasetSplits data, loadTrainingData(ctx.config, Splits::kTrain));
  return runMirrored(ctx, data.train).status();
}

}  // namespace chaosbed
