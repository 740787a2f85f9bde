#pragma once
// Internal to the mirrored strategy (core/strategies/mirrored*.cc): the worker class and the records its
// members exchange. mirrored.cc holds setup, the training loop, steps and checkpoints;
// mirrored_membership.cc entering generations and recovery; mirrored_backup.cc the backup-workers step.

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
#include "core/model/model.h"
#include "core/optim/sgd.h"
#include "core/strategies/gradient_reducer.h"
#include "core/strategies/tags.h"
#include "transports/collective.h"

namespace chaosbed::mirrored_detail {

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

inline bool isPeerFailure(const Status& s) {
  return s.code() == StatusCode::kPeerLost || s.code() == StatusCode::kAborted || s.code() == StatusCode::kTimeout;
}

inline double secondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

inline bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

template <class T>
std::span<const std::byte> podBytes(const T& v) { return std::as_bytes(std::span<const T>(&v, 1)); }
template <class T>
std::span<std::byte> podWritableBytes(T& v) { return std::as_writable_bytes(std::span<T>(&v, 1)); }

inline std::string ranksToString(const std::vector<int>& ranks) {
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
  // Tells the controller that generation `generation` failed here (event "failure_detected").
  void reportFailure(const Status& why, int64_t generation, const std::string& reason);
  // planned: members left on notice; their exits, not a failure report, make the next generation.
  Status recover(const Status& why, SteadyClock::time_point failed_at, bool& stopped, const std::string& reason,
                 bool planned = false);
  Status switchGeneration(int64_t generation, bool& stopped);
  // Steps.
  Status nextSlice(int position, int members);
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
  Deadline collectiveDeadline() const { return chaosbed::collectiveDeadline(cfg_); }
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

  std::unique_ptr<model::Model> model_;
  std::optional<optim::Sgd> sgd_;
  std::optional<EmulatedAccelerator> accelerator_;  // workload.emulate's compute time
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
  int64_t last_snapshot_tick_ = -1;  // eval_interval_steps: the last multiple of N gradients snapshotted
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
  // Buffers of sends cancelled mid-way: a live peer may still take them (transport.h, Request::cancel).
  std::vector<std::shared_ptr<const void>> cancelled_sends_;
  uint32_t late_flags_ = 0;            // merged from late readies
  int64_t late_generation_ = 0;
  std::vector<int> late_noticed_;
};

}  // namespace chaosbed::mirrored_detail
