#include "core/strategies/mirrored.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint/checkpoint.h"
#include "core/data/batches.h"
#include "core/model/mlp.h"
#include "core/optim/sgd.h"
#include "core/strategies/gradient_reducer.h"
#include "core/strategies/tags.h"
#include "transports/collective.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kFlagStop = 1;
constexpr uint32_t kFlagNotice = 2;
constexpr int kCheckpointsKept = 3;
constexpr int kMaxMembers = 64;           // backup workers: the included set is a 64-bit mask
constexpr size_t kForwardBudgetBytes = size_t{64} << 20;  // backup workers: forwarded gradients in flight
constexpr int kMinForwardLag = 4;                          //   to one late member: bytes, and at least steps
constexpr uint64_t kBackupOpBase = uint64_t{1} << 18;  // backup workers: collective op numbers per step
constexpr auto kMembershipPoll = 250ms;   // how often a wait for the controller checks stop and time limit
constexpr auto kFinalSnapshotWait = 2s;

// Exchanged by every member before the gradient all-reduce (allgather; or sent to the coordinator).
struct StepHeader {
  int64_t arrival_ns = 0;  // realtime when the member finished its gradient
  int64_t generation = 0;  // newest membership generation the member has seen
  int64_t step = 0;        // the step being taken
  uint32_t flags = 0;      // kFlagStop | kFlagNotice
  int32_t rank = 0;
};

// Exchanged when a generation is entered, to agree on the state everyone continues from.
struct SyncInfo {
  int64_t step = 0;
  int64_t pre_rollback_step = -1;  // the step a member rolled back from (-1: none, or a fresh replacement)
  int32_t has_state = 0;           // 0 for an elastic joiner, which needs the state broadcast
  int32_t rank = 0;
};

// Progress counters that travel with the parameters (broadcast, checkpoint).
struct Progress {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t cursor = 0;   // position of the next global batch in the epoch's permutation
  int64_t samples = 0;  // samples applied to the model (global)
};

// Backup workers: the coordinator's verdict on a step.
struct Decision {
  uint64_t included = 0;  // bit i: member at position i contributes its gradient
  uint64_t noticed = 0;   // bit i: member at position i leaves after this step (checkpoint_on_notice)
  int64_t generation = 0; // newest generation any known header reported
  uint32_t flags = 0;
  uint32_t pad = 0;
};

bool isPeerFailure(const Status& s) {
  return s.code() == StatusCode::kPeerLost || s.code() == StatusCode::kAborted || s.code() == StatusCode::kTimeout;
}

double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

template <class T>
std::span<const std::byte> podBytes(const T& v) { return std::as_bytes(std::span<const T>(&v, 1)); }
template <class T>
std::span<std::byte> podWritableBytes(T& v) { return std::as_writable_bytes(std::span<T>(&v, 1)); }

std::string ranksToString(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ',';
    s += std::to_string(r);
  }
  return "[" + s + "]";
}

// What one step decided, for the loop.
struct StepOutcome {
  bool stop = false;
  int64_t generation = 0;     // max generation seen by the members
  std::vector<int> noticed;   // members that leave after this step (checkpoint_on_notice)
  SteadyClock::time_point failed_at{};  // start of the collective that failed
};

class MirroredWorker {
 public:
  MirroredWorker(NodeContext& ctx, const data::Dataset& train, const MirroredHooks& hooks)
      : ctx_(ctx), cfg_(ctx.config), train_(train), hooks_(hooks), me_(ctx.transport.rank()) {}

  Result<MirroredOutcome> run();

 private:
  Status setup();
  // Membership.
  Result<Membership> awaitMembership(int64_t after, bool& stopped);
  Status joinFirst(bool& stopped);
  Status enterGeneration(const Membership& m);
  Status rendezvous(const Membership& m);
  Status reconnectMember(int peer, int64_t generation);
  Status syncState(bool rolled_back, int64_t pre_rollback_step, const Membership& m);
  Status recover(const Status& why, SteadyClock::time_point failed_at, bool& stopped, const std::string& reason);
  Status switchGeneration(int64_t generation, bool& stopped);
  // Steps.
  void nextSlice(int position, int members);
  uint32_t myFlags();
  Status step(StepOutcome& out);
  Status backupStep(StepOutcome& out);
  Status forwardGradient(const Decision& decision, Tag tag);
  Status computeGradient(int position, int members);
  Status applyGradient(float scale);
  void completeStep(int64_t global_samples, int64_t my_samples, SteadyClock::time_point started);
  Status checkPending(bool block_on_all, Deadline deadline);
  void cancelPending();
  // Side duties.
  bool lowest() const { return comm_.members.front() == me_; }
  void maybeSnapshot(bool force);
  void finishSnapshot();
  void writeCheckpoint(const char* reason);
  Status restoreCheckpoint();
  void resetToInitialState();
  // Time.
  bool timeUp() const;
  Deadline collectiveDeadline() const {
    return deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(cfg_.collective_timeout_s)));
  }
  int64_t mySamplesAtStep(int64_t step) const;
  void resetSampleHistory();

  NodeContext& ctx_;
  const TrainingConfig& cfg_;
  const data::Dataset& train_;
  const MirroredHooks& hooks_;
  TransferSplitter header_splitter_;     // step-header exchanges
  TransferSplitter allreduce_splitter_;  // gradient all-reduces
  const int me_;
  size_t bpw_ = 0;
  int64_t start_ns_ = 0;

  std::optional<model::Mlp> model_;
  std::optional<optim::Sgd> sgd_;
  Progress progress_;
  bool has_state_ = false;
  std::vector<uint32_t> order_;
  int64_t order_epoch_ = -1;
  std::vector<float> slice_images_;
  std::vector<uint8_t> slice_labels_;

  Membership membership_;
  Communicator comm_;
  std::unique_ptr<GradientReducer> reducer_;  // the gradient all-reduce: UCX or NCCL
  bool in_generation_ = false;

  // This node's samples, cumulative, after each step since cum_base_step_ (for rollback accounting).
  int64_t my_samples_ = 0;
  int64_t cum_base_step_ = 0;
  std::vector<int64_t> my_cum_;

  // Recovery in progress: the first failed collective, reported at the first completed step after it.
  std::optional<SteadyClock::time_point> recovery_started_;

  bool notice_published_ = false;
  bool left_on_notice_ = false;

  // Snapshots and checkpoints (lowest member).
  RequestPtr snapshot_request_;
  std::vector<std::byte> snapshot_buffer_;
  SteadyClock::time_point next_snapshot_{};
  int64_t last_snapshot_step_ = -1;
  SteadyClock::time_point next_checkpoint_{};
  std::optional<CheckpointDir> checkpoint_dir_;

  // Backup workers: requests that may complete after their step (late readies, forwards, decisions).
  struct Pending {
    RequestPtr request;
    std::shared_ptr<const void> buffer;  // what the request reads or writes, alive until it completes
    const StepHeader* ready = nullptr;   // a late member's header, merged when it arrives
    int peer = -1;
    bool forward = false;                // a reduced gradient forwarded to a late member
  };
  std::list<Pending> pending_;
  uint32_t late_flags_ = 0;            // merged from late readies
  int64_t late_generation_ = 0;
  std::vector<int> late_noticed_;
};

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
  std::vector<size_t> layers;
  for (int l : cfg_.layers) {
    if (l <= 0) return Status::invalidArgument("model.layers: sizes must be positive, got " + std::to_string(l));
    layers.push_back(static_cast<size_t>(l));
  }
  auto model = model::Mlp::create(layers, bpw_);
  if (!model.isOk()) return model.status().withContext("mirrored: model");
  model_.emplace(std::move(model).value());
  if (train_.dims != model_->inputDims())
    return Status::invalidArgument("mirrored: training set has " + std::to_string(train_.dims) +
                                   " dims per sample but model.layers starts with " +
                                   std::to_string(model_->inputDims()));
  optim::SgdOptions o{static_cast<float>(cfg_.learning_rate), static_cast<float>(cfg_.momentum),
                      static_cast<float>(cfg_.weight_decay)};
  auto sgd = optim::Sgd::create(o, model_->numParameters());
  if (!sgd.isOk()) return sgd.status().withContext("mirrored: optimizer");
  sgd_.emplace(std::move(sgd).value());
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

// ---------------------------------------------------------------------------------------------- membership

Result<Membership> MirroredWorker::awaitMembership(int64_t after, bool& stopped) {
  for (;;) {
    if (ctx_.control.stopRequested() || timeUp()) {
      stopped = true;
      return Status::cancelled("stopped while waiting for a membership");
    }
    auto m = ctx_.control.waitMembershipAfter(after, deadlineIn(kMembershipPoll));
    if (m.isOk()) return m;
    if (m.status().code() != StatusCode::kTimeout)
      return m.status().withContext("mirrored: waiting for membership after generation " + std::to_string(after));
  }
}

// A first incarnation enters the newest generation that lists it (generation 0, all workers, until the
// controller published one). A replacement must not enter a generation meant for its predecessor: it takes
// the newest one only if that lists it among the joined ranks, else the next generation that lists it.
Status MirroredWorker::joinFirst(bool& stopped) {
  const auto join_started = SteadyClock::now();
  const bool replacement = ctx_.control.incarnation() > 0;
  auto published = ctx_.control.store().contains(ctx_.control.key("membership/0"));
  if (!published.isOk()) return published.status().withContext("mirrored: reading the membership");
  Membership m;
  if (*published || replacement) {
    CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(-1, stopped));
    if (replacement && !contains(m.joined, me_)) {
      CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(m.generation, stopped));
    }
  } else {
    m.generation = 0;
    for (int r = 0; r < ctx_.workers; ++r) m.workers.push_back(r);
  }
  has_state_ = !replacement;  // a replacement gets its state from a checkpoint or a broadcast
  bool member_lost = false;
  for (;;) {
    while (!contains(m.workers, me_)) {
      CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(m.generation, stopped));
    }
    Status s = enterGeneration(m);
    if (s.isOk()) break;
    if (!isPeerFailure(s)) return s;
    LOG(WARNING) << "mirrored rank " << me_ << ": joining generation " << m.generation << " failed: " << s.toString();
    member_lost = true;
    CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(m.generation, stopped));
  }
  // Waiting for the others at the start is idle (peer); a replacement's rendezvous is recovery, and so is a
  // first join that a member lost during the start held up (its wait for the new generation): that member
  // recovers too, at its first step.
  const bool recovering = replacement || member_lost;
  ctx_.accounting.add(recovering ? TimeCategory::kIdleRecovery : TimeCategory::kIdlePeer, secondsSince(join_started));
  if (recovering) recovery_started_ = join_started;
  return Status::ok();
}

Status MirroredWorker::enterGeneration(const Membership& m) {
  if (!contains(m.workers, me_))
    return Status::notFound("mirrored: rank " + std::to_string(me_) + " is not a member of generation " +
                            std::to_string(m.generation) + " (workers " + ranksToString(m.workers) + ")");
  cancelPending();
  const std::vector<int> old_members = in_generation_ ? comm_.members : std::vector<int>{};
  for (int p : m.workers) {
    if (p == me_) continue;
    const bool fresh = contains(m.joined, p) || (in_generation_ && !contains(old_members, p));
    if (fresh || !ctx_.transport.peerStatus(p).isOk()) {
      Status s = reconnectMember(p, m.generation);
      if (!s.isOk()) return s.withContext("mirrored: reconnecting to rank " + std::to_string(p));
    }
  }
  CHAOSBED_RETURN_IF_ERROR(rendezvous(m));
  CHAOSBED_ASSIGN_OR_RETURN(comm_, makeCommunicator(&ctx_.transport, m.workers, static_cast<uint32_t>(m.generation)));
  CHAOSBED_RETURN_IF_ERROR(reducer_->enter(comm_, m.generation, collectiveDeadline()));
  membership_ = m;
  in_generation_ = true;

  bool rolled_back = false;
  int64_t pre_rollback_step = -1;
  if (m.rollback) {
    pre_rollback_step = has_state_ ? progress_.step : -1;
    CHAOSBED_RETURN_IF_ERROR(restoreCheckpoint());
    rolled_back = true;
  }
  return syncState(rolled_back, pre_rollback_step, m);
}

// A member lost since the generation was published may have no successor yet, or none ever (elastic then drops
// it in a newer generation): wait for one in short slices, and leave as soon as the generation is superseded
// or the run stops, instead of holding this member for collective_timeout_s.
Status MirroredWorker::reconnectMember(int peer, int64_t generation) {
  const Deadline deadline = collectiveDeadline();
  for (;;) {
    Status s = ctx_.transport.reconnect(peer, std::min(deadline, deadlineIn(kMembershipPoll)));
    if (s.isOk() || !isPeerFailure(s) || SteadyClock::now() >= deadline) return s;
    if (ctx_.control.latestGeneration() > generation || ctx_.control.stopRequested())
      return Status::aborted("mirrored: generation " + std::to_string(generation) + " was superseded or stopped before rank " +
                                 std::to_string(peer) + " was reachable",
                             peer);
  }
}

// No member may send in a generation before every member has reconnected to the new incarnations in it (a
// message to a peer that still holds the old incarnation's endpoint as failed would fail, stickily, on the
// sender). So each member, once reconnected, marks "<run>/mirrored/entered/<generation>/<rank>" in the
// store and waits for the marks of all members. Timeout (a member never came) or Aborted (a newer
// generation superseded this one while waiting) send the caller on to the next generation.
Status MirroredWorker::rendezvous(const Membership& m) {
  Store& store = ctx_.control.store();
  const std::string base = ctx_.control.key("mirrored/entered/" + std::to_string(m.generation) + "/");
  CHAOSBED_RETURN_IF_ERROR(store.set(base + std::to_string(me_), std::to_string(ctx_.control.incarnation()))
                               .withContext("mirrored: entering generation " + std::to_string(m.generation)));
  const Deadline deadline = collectiveDeadline();
  for (int p : m.workers) {
    for (;;) {
      auto v = store.get(base + std::to_string(p), std::min(deadline, deadlineIn(kMembershipPoll)));
      if (v.isOk()) break;
      if (v.status().code() != StatusCode::kTimeout) return v.status().withContext("mirrored: rendezvous");
      if (ctx_.control.latestGeneration() > m.generation || ctx_.control.stopRequested())
        return Status::aborted("mirrored: generation " + std::to_string(m.generation) +
                               " was superseded or stopped before rank " + std::to_string(p) + " entered it", p);
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: rank " + std::to_string(p) + " did not enter generation " +
                               std::to_string(m.generation) + " within collective_timeout_s");
    }
  }
  return Status::ok();
}

// All members agree on the state to continue from: the newest step any member holds (after a failure some
// members may have finished a step that others did not); members behind it, and joiners, receive it.
Status MirroredWorker::syncState(bool rolled_back, int64_t pre_rollback_step, const Membership& m) {
  const int n = comm_.size();
  SyncInfo mine{progress_.step, pre_rollback_step, has_state_ ? 1 : 0, me_};
  std::vector<SyncInfo> all(static_cast<size_t>(n));
  CHAOSBED_RETURN_IF_ERROR(
      allgather(comm_, podBytes(mine), std::as_writable_bytes(std::span<SyncInfo>(all)), collectiveDeadline())
          .withContext("mirrored: state sync of generation " + std::to_string(m.generation)));
  int source = -1;
  int64_t newest = -1;
  int64_t predecessor_step = -1;
  bool uniform = true;
  for (const SyncInfo& s : all) {
    if (s.has_state && s.step > newest) {
      newest = s.step;
      source = s.rank;  // members are in rank order: the lowest rank with the newest step
    }
    if (s.rank != me_) predecessor_step = std::max(predecessor_step, s.pre_rollback_step);
  }
  for (const SyncInfo& s : all) uniform = uniform && s.has_state && s.step == newest;
  if (source < 0) {  // nobody holds a state (every member is new): all start from the seed
    resetToInitialState();
  } else if (!uniform) {
    const Deadline deadline = collectiveDeadline();
    auto params = model_->parameters();
    auto velocity = sgd_->velocity();
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, std::as_writable_bytes(params), source, deadline)
                                 .withContext("mirrored: broadcasting parameters"));
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, std::as_writable_bytes(velocity), source, deadline)
                                 .withContext("mirrored: broadcasting optimizer state"));
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, podWritableBytes(progress_), source, deadline)
                                 .withContext("mirrored: broadcasting progress"));
    has_state_ = true;
  }
  if (rolled_back) {
    // This node's samples since the step everyone resumes from are lost to the rollback.
    const int64_t lost = pre_rollback_step >= 0 ? my_samples_ - mySamplesAtStep(progress_.step) : 0;
    // A replacement also accounts its predecessor's share (one slice per step since the checkpoint): the
    // predecessor reported those samples before it died and nobody else subtracts them.
    const int64_t predecessor_lost =
        (ctx_.control.incarnation() > 0 && pre_rollback_step < 0 && predecessor_step > progress_.step)
            ? (predecessor_step - progress_.step) * static_cast<int64_t>(bpw_)
            : 0;
    if (lost + predecessor_lost > 0) ctx_.accounting.rollback(lost + predecessor_lost);
    (void)ctx_.control.event("rollback", {{"step", progress_.step},
                                          {"from_step", pre_rollback_step},
                                          {"samples_lost", lost + predecessor_lost},
                                          {"generation", m.generation}});
  }
  resetSampleHistory();
  return Status::ok();
}

Status MirroredWorker::recover(const Status& why, SteadyClock::time_point failed_at, bool& stopped,
                               const std::string& reason) {
  LOG(WARNING) << "mirrored rank " << me_ << ": " << reason << " at step " << progress_.step << " in generation "
               << membership_.generation << ": " << why.toString();
  (void)ctx_.control.event("failure_detected", {{"lost_rank", why.peer()},
                                                {"step", progress_.step},
                                                {"generation", membership_.generation},
                                                {"reason", reason},
                                                {"error", why.toString()}});
  if (!recovery_started_) recovery_started_ = failed_at;
  cancelPending();
  int64_t after = membership_.generation;
  Status result;
  for (;;) {
    auto m = awaitMembership(after, stopped);
    if (!m.isOk()) {
      result = stopped ? Status::ok() : m.status();
      break;
    }
    Status s = enterGeneration(*m);
    if (s.isOk() || !isPeerFailure(s)) {
      result = s;
      break;
    }
    LOG(WARNING) << "mirrored rank " << me_ << ": entering generation " << m->generation << " failed: " << s.toString();
    after = m->generation;
  }
  // Everything from the start of the failed collective until training resumes waited on recovery.
  ctx_.accounting.add(TimeCategory::kIdleRecovery, secondsSince(failed_at));
  return result;
}

// Every member saw (through the step headers) the same newer generation: enter it at this step boundary.
Status MirroredWorker::switchGeneration(int64_t generation, bool& stopped) {
  const auto started = SteadyClock::now();
  auto m = ctx_.control.membership(generation, collectiveDeadline());
  Status s = m.isOk() ? enterGeneration(*m) : m.status();
  if (s.isOk()) {
    ctx_.accounting.add(TimeCategory::kIdleRecovery, secondsSince(started));
    (void)ctx_.control.event("membership_changed", {{"generation", generation},
                                                    {"workers", m->workers},
                                                    {"joined", m->joined},
                                                    {"step", progress_.step},
                                                    {"seconds", secondsSince(started)}});
    return s;
  }
  if (!isPeerFailure(s)) return s;
  return recover(s, started, stopped, "entering generation " + std::to_string(generation) + " failed");
}

// --------------------------------------------------------------------------------------------------- steps

// Copies this member's slice of the next global batch (position of members).
void MirroredWorker::nextSlice(int position, int members) {
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
    std::memcpy(slice_images_.data() + i * dims, train_.images.data() + size_t{s} * dims, dims * sizeof(float));
    slice_labels_[i] = train_.labels[s];
  }
}

uint32_t MirroredWorker::myFlags() {
  uint32_t flags = 0;
  if (ctx_.control.stopRequested() || timeUp()) flags |= kFlagStop;
  if (ctx_.noticeReceived()) {
    flags |= kFlagNotice;
    if (!notice_published_) {
      notice_published_ = true;
      (void)ctx_.control.noticeReceived();
    }
  }
  return flags;
}

Status MirroredWorker::computeGradient(int position, int members) {
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
  nextSlice(position, members);
  auto loss = model_->computeGradients(slice_images_, slice_labels_);
  if (!loss.isOk()) return loss.status().withContext("mirrored: computing gradients");
  if (hooks_.after_gradient) hooks_.after_gradient(progress_.step, membership_.generation);
  return Status::ok();
}

Status MirroredWorker::applyGradient(float scale) {
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
  return sgd_->apply(model_->parameters(), model_->gradients(), scale);
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
  ctx_.accounting.add(TimeCategory::kIdlePeer, idle + header_split.idle);
  ctx_.accounting.add(TimeCategory::kTransfer, header_split.transfer);

  out.failed_at = SteadyClock::now();
  s = reducer_->allreduce(comm_, model_->gradients(), collectiveDeadline());
  const auto reduce_split = allreduce_splitter_.split(secondsSince(out.failed_at));
  ctx_.accounting.add(TimeCategory::kTransfer, reduce_split.transfer);
  ctx_.accounting.add(TimeCategory::kIdlePeer, reduce_split.idle);
  if (!s.isOk()) return s.withContext("mirrored: gradient all-reduce of step " + std::to_string(progress_.step));
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
  if (recovery_started_) {
    const double seconds = secondsSince(*recovery_started_);
    ctx_.accounting.recovery(seconds);
    (void)ctx_.control.event("recovered", {{"seconds", seconds},
                                           {"generation", membership_.generation},
                                           {"step", progress_.step}});
    recovery_started_.reset();
  }
}

// ------------------------------------------------------------------------------------------ backup workers

// Completes what has arrived among the requests that outlive their step, merging late members' headers.
// With block_on_all, waits for all of them (bounded by the deadline). A failed request is a peer failure.
Status MirroredWorker::checkPending(bool block_on_all, Deadline deadline) {
  for (;;) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->request->isComplete()) {
        ++it;
        continue;
      }
      if (Status s = it->request->status(); !s.isOk()) {
        const int peer = it->peer;
        pending_.erase(it);
        return s.code() == StatusCode::kPeerLost ? s : Status::peerLost(peer, s.toString());
      }
      if (it->ready) {
        late_flags_ |= it->ready->flags;
        late_generation_ = std::max(late_generation_, it->ready->generation);
        if (it->ready->flags & kFlagNotice) late_noticed_.push_back(it->ready->rank);
      }
      it = pending_.erase(it);
    }
    if (!block_on_all || pending_.empty()) return Status::ok();
    if (SteadyClock::now() >= deadline) return Status::timeout("mirrored: backup worker messages still in flight");
    ctx_.transport.progress(deadline);
  }
}

void MirroredWorker::cancelPending() {
  for (Pending& p : pending_)
    if (!p.request->isComplete()) p.request->cancel();
  pending_.clear();
  late_flags_ = 0;
  late_generation_ = 0;
  late_noticed_.clear();
}

Status MirroredWorker::backupStep(StepOutcome& out) {
  const int n = comm_.size();
  const int backups = std::min(ctx_.strategy.backup_workers, n - 1);
  const int needed = n - backups;  // gradients applied per step, the coordinator's included
  const int coordinator = comm_.members.front();
  const int64_t g = membership_.generation;
  const int64_t stepno = progress_.step;
  const auto started = SteadyClock::now();
  const Tag ready_tag = strategyTag(StrategyMessage::kMirroredReady, g, stepno);
  const Tag decision_tag = strategyTag(StrategyMessage::kMirroredDecision, g, stepno);
  const Tag gradient_tag = strategyTag(StrategyMessage::kMirroredGradient, g, stepno);
  auto decision = std::make_shared<Decision>();
  RequestPtr decision_request;
  bool skip = false;  // behind, and already left out of this step: apply the forwarded gradient only
  if (me_ != coordinator) {
    decision_request = ctx_.transport.irecv(coordinator, decision_tag, podWritableBytes(*decision));
    skip = decision_request->isComplete() && decision_request->status().isOk() &&
           !((decision->included >> comm_.myIndex()) & 1);
  }
  if (skip) {
    nextSlice(comm_.myIndex(), n);  // keeps the data position; the slice is dropped with the step
  } else {
    CHAOSBED_RETURN_IF_ERROR(computeGradient(comm_.myIndex(), n));
  }
  auto header = std::make_shared<StepHeader>(
      StepHeader{realtimeNs(), ctx_.control.latestGeneration(), stepno, myFlags(), me_});
  out.failed_at = SteadyClock::now();

  if (me_ == coordinator) {
    // Collect readies until `needed` members (this one included) are in; the late ones stay pending and are
    // merged (their stop / notice / generation) when they arrive.
    std::vector<std::shared_ptr<StepHeader>> readies(static_cast<size_t>(n));
    std::vector<RequestPtr> requests(static_cast<size_t>(n));
    for (int i = 1; i < n; ++i) {
      readies[size_t(i)] = std::make_shared<StepHeader>();
      requests[size_t(i)] = ctx_.transport.irecv(comm_.rankAt(i), ready_tag, podWritableBytes(*readies[size_t(i)]));
    }
    decision->included = 1;  // position 0: the coordinator
    int in = 1;
    const Deadline deadline = collectiveDeadline();
    for (;;) {
      for (int i = 1; i < n && in < needed; ++i) {
        const auto& r = requests[size_t(i)];
        if (!r->isComplete() || ((decision->included >> i) & 1)) continue;
        if (Status s = r->status(); !s.isOk()) return s.withContext("mirrored: ready of step " + std::to_string(stepno));
        decision->included |= uint64_t{1} << i;
        ++in;
      }
      if (in >= needed) break;
      for (int i = 1; i < n; ++i)
        if (Status s = ctx_.transport.peerStatus(comm_.rankAt(i)); !s.isOk())
          return (s.code() == StatusCode::kPeerLost ? s : Status::peerLost(comm_.rankAt(i), s.toString()))
              .withContext("mirrored: waiting for readies of step " + std::to_string(stepno));
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: waiting for " + std::to_string(needed) + " readies of step " +
                               std::to_string(stepno));
      ctx_.transport.progress(deadline);
    }
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(out.failed_at));
    CHAOSBED_RETURN_IF_ERROR(checkPending(false, deadline));
    decision->generation = std::max(header->generation, late_generation_);
    decision->flags = header->flags | late_flags_;
    std::vector<int> noticed = late_noticed_;
    late_flags_ = 0;
    late_noticed_.clear();
    if (header->flags & kFlagNotice) noticed.push_back(me_);
    for (int i = 1; i < n; ++i) {
      if ((decision->included >> i) & 1) {
        const StepHeader& h = *readies[size_t(i)];
        decision->flags |= h.flags;
        decision->generation = std::max(decision->generation, h.generation);
        if (h.flags & kFlagNotice) noticed.push_back(h.rank);
      } else {
        pending_.push_back(Pending{std::move(requests[size_t(i)]), readies[size_t(i)], readies[size_t(i)].get(),
                                   comm_.rankAt(i), false});
      }
    }
    for (int r : noticed)
      if (int i = comm_.indexOf(r); i >= 0) decision->noticed |= uint64_t{1} << i;
    for (int i = 1; i < n; ++i)
      pending_.push_back(Pending{ctx_.transport.isend(comm_.rankAt(i), decision_tag, podBytes(*decision)), decision,
                                 nullptr, comm_.rankAt(i), false});
  } else {
    pending_.push_back(Pending{ctx_.transport.isend(coordinator, ready_tag, podBytes(*header)), header, nullptr,
                               coordinator, false});
    Status s = wait(ctx_.transport, decision_request, collectiveDeadline());
    if (!s.isOk()) return s.withContext("mirrored: decision of step " + std::to_string(stepno));
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(out.failed_at));
  }
  out.generation = decision->generation;
  out.stop = (decision->flags & kFlagStop) != 0;
  for (int i = 0; i < n; ++i)
    if ((decision->noticed >> i) & 1) out.noticed.push_back(comm_.rankAt(i));

  const bool included = (decision->included >> comm_.myIndex()) & 1;
  out.failed_at = SteadyClock::now();
  if (included) {
    std::vector<int> members;
    for (int i = 0; i < n; ++i)
      if ((decision->included >> i) & 1) members.push_back(comm_.rankAt(i));
    // A sub-communicator per step: the generation's epoch, operation numbers from a range of their own (the
    // generation's communicator uses small ones), so its tags never meet another step's.
    Communicator sub{&ctx_.transport, members, comm_.epoch, kBackupOpBase | (static_cast<uint64_t>(stepno) % kBackupOpBase)};
    {
      Accounting::Timer t(ctx_.accounting, TimeCategory::kTransfer);
      Status s = allreduce(sub, model_->gradients(), collectiveDeadline());
      if (!s.isOk()) return s.withContext("mirrored: backup all-reduce of step " + std::to_string(stepno));
    }
    if (me_ == coordinator) CHAOSBED_RETURN_IF_ERROR(forwardGradient(*decision, gradient_tag));
  } else {
    Accounting::Timer t(ctx_.accounting, TimeCategory::kTransfer);
    Status s = recv(ctx_.transport, coordinator, gradient_tag, asWritableBytes(model_->gradients()),
                    collectiveDeadline());
    if (!s.isOk()) return s.withContext("mirrored: reduced gradient of step " + std::to_string(stepno));
  }
  CHAOSBED_RETURN_IF_ERROR(checkPending(false, collectiveDeadline()));
  CHAOSBED_RETURN_IF_ERROR(applyGradient(1.0f / static_cast<float>(needed)));
  // Only the samples whose gradient entered the model count.
  completeStep(static_cast<int64_t>(bpw_) * needed, included ? static_cast<int64_t>(bpw_) : 0, started);
  return Status::ok();
}

// The coordinator sends the reduced gradient to the members left out of this step. A bounded number of
// gradients is in flight to one member: a member further behind holds the group back (idle, peer).
Status MirroredWorker::forwardGradient(const Decision& decision, Tag tag) {
  std::shared_ptr<std::vector<float>> copy;
  const int max_lag = std::max<int>(
      kMinForwardLag, static_cast<int>(kForwardBudgetBytes / (model_->numParameters() * sizeof(float))));
  for (int i = 1; i < comm_.size(); ++i) {
    if ((decision.included >> i) & 1) continue;
    const int peer = comm_.rankAt(i);
    const Deadline deadline = collectiveDeadline();
    const auto waited = SteadyClock::now();
    for (;;) {
      CHAOSBED_RETURN_IF_ERROR(checkPending(false, deadline));
      int in_flight = 0;
      for (const Pending& p : pending_) in_flight += (p.forward && p.peer == peer) ? 1 : 0;
      if (in_flight < max_lag) break;
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: rank " + std::to_string(peer) + " is " + std::to_string(in_flight) +
                               " steps behind");
      ctx_.transport.progress(deadline);
    }
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(waited));
    if (!copy) {
      auto grads = model_->gradients();
      copy = std::make_shared<std::vector<float>>(grads.begin(), grads.end());
    }
    pending_.push_back(Pending{ctx_.transport.isend(peer, tag, asBytes(std::span<const float>(*copy))), copy, nullptr,
                               peer, true});
  }
  return Status::ok();
}

// ------------------------------------------------------------------------------- snapshots and checkpoints

void MirroredWorker::maybeSnapshot(bool force) {
  const int evaluator = ctx_.evaluatorRank();
  if (evaluator >= ctx_.transport.size() || evaluator == me_) return;
  const auto now = SteadyClock::now();
  if (!force && now < next_snapshot_) return;
  if (progress_.step == last_snapshot_step_) return;
  if (snapshot_request_ && !snapshot_request_->isComplete()) return;  // never wait for the evaluator
  const auto params = model_->parameters();
  snapshot_buffer_.resize(snapshotMessageBytes(params.size()));
  SnapshotHeader h{progress_.step, realtimeNs(), static_cast<int64_t>(params.size())};
  std::memcpy(snapshot_buffer_.data(), &h, sizeof(h));
  std::memcpy(snapshot_buffer_.data() + sizeof(h), params.data(), params.size_bytes());
  snapshot_request_ = ctx_.transport.isend(evaluator, kSnapshotTag, snapshot_buffer_);
  last_snapshot_step_ = progress_.step;
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
  if (snapshot_request_) (void)wait(ctx_.transport, snapshot_request_, deadline);
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
  // Writing to disk moves data; the other members wait for it at the next step (idle, peer).
  ctx_.accounting.add(TimeCategory::kTransfer, secondsSince(started));
  ctx_.accounting.checkpoint(s.isOk());
  if (s.isOk()) {
    (void)ctx_.control.event("checkpoint", {{"step", progress_.step}, {"reason", reason}});
  } else {
    LOG(WARNING) << "mirrored rank " << me_ << ": checkpoint of step " << progress_.step << " failed: " << s.toString();
    (void)ctx_.control.event("checkpoint_failed", {{"step", progress_.step}, {"error", s.toString()}});
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
      st.optimizer[0].size() != model_->numParameters())
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
  progress_.cursor = cursor == st.metadata.end() ? 0 : std::stoll(cursor->second);
  has_state_ = true;
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------- run

Result<MirroredOutcome> MirroredWorker::run() {
  CHAOSBED_RETURN_IF_ERROR(setup());
  bool stopped = false;
  Status joined = joinFirst(stopped);
  if (!joined.isOk() && !stopped) return joined;
  const bool backup = ctx_.strategy.backup_workers > 0;
  while (!stopped) {
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
        (void)ctx_.control.event("left_on_notice", {{"step", progress_.step}, {"generation", membership_.generation}});
        break;
      }
      const auto departed = SteadyClock::now();
      Communicator staying{&ctx_.transport, stayers, comm_.epoch, op};
      Status b = barrier(staying, collectiveDeadline());
      if (!b.isOk() && !isPeerFailure(b)) return b;
      CHAOSBED_RETURN_IF_ERROR(recover(Status::aborted("preemption notice", out.noticed.front()), departed, stopped,
                                       "members left on notice " + ranksToString(out.noticed)));
      continue;
    }
    if (lowest() && SteadyClock::now() >= next_checkpoint_) writeCheckpoint("interval");
    if (out.stop || (ctx_.config.max_steps > 0 && progress_.step >= ctx_.config.max_steps)) break;
    if (out.generation > membership_.generation) CHAOSBED_RETURN_IF_ERROR(switchGeneration(out.generation, stopped));
  }
  if (!left_on_notice_) finishSnapshot();
  cancelPending();
  MirroredOutcome outcome;
  auto params = model_->parameters();
  auto velocity = sgd_->velocity();
  outcome.parameters.assign(params.begin(), params.end());
  outcome.velocity.assign(velocity.begin(), velocity.end());
  outcome.step = progress_.step;
  outcome.generation = membership_.generation;
  outcome.left_on_notice = left_on_notice_;
  return outcome;
}

}  // namespace

Result<MirroredOutcome> runMirrored(NodeContext& ctx, const data::Dataset& train, const MirroredHooks& hooks) {
  MirroredWorker worker(ctx, train, hooks);
  return worker.run();
}

Status runMirroredWorker(NodeContext& ctx) {
  if (ctx.data) return runMirrored(ctx, ctx.data->train).status();
  CHAOSBED_ASSIGN_OR_RETURN(data::DatasetSplits data, loadTrainingData(ctx.config));
  return runMirrored(ctx, data.train).status();
}

}  // namespace chaosbed
