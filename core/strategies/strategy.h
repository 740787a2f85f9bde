#pragma once
// What every strategy role (mirrored worker, parameter-server worker and server, evaluator) gets from the
// node runtime, and how it reports back. A role is a function that trains until the controller says stop
// (ControlChannel::stopRequested), the time limit passes, or an unrecoverable error occurs:
//
//   Status runMirroredWorker(NodeContext& ctx);
//   Status runPsWorker(NodeContext& ctx);  Status runPsServer(NodeContext& ctx);
//   Status runEvaluator(NodeContext& ctx);
//
// Transport ranks: workers are 0..workers-1, servers workers..workers+servers-1, the evaluator is the last
// rank (workers + servers). Roles account every second of their wall time in ctx.accounting (compute,
// transfer, idle by reason: docs/design.md 4, "Metric definitions"), and tell the controller about recoveries, rollbacks
// and checkpoints through ctx.control.event(...).
//
// Failures: a lost peer surfaces as PeerLost from the transport (the UCX backend detects a killed process
// within 1 s); a paused peer only through deadlines, so roles wait on collectives for
// collective_timeout_s (idle, reason peer) before treating the peer as lost. Membership changes come from
// the controller (ControlChannel::latestGeneration / waitMembershipAfter).

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/dataset.h"
#include "core/metrics/accounting.h"
#include "core/model/emulation.h"
#include "core/model/model.h"
#include "core/runtime/control.h"
#include "core/strategies/strategy_kind.h"
#include "transports/transport.h"

namespace chaosbed {

// A strategy and its variant options, as listed in the spec.
struct StrategyOptions {
  StrategyKind kind = StrategyKind::kMirrored;
  std::string label;                       // unique name in results ("mirrored-elastic")
  bool elastic = false;                    // mirrored on_failure: restart (false) | elastic (true)
  int backup_workers = 0;                  // mirrored: drop the last b gradients of a step
  // On SIGTERM: mirrored agrees on a step, saves and leaves; a PS server saves its shard; a PS worker leaves.
  bool checkpoint_on_notice = false;
  bool job_restart = false;                // parameter_server on_server_failure: shard_restart | job_restart
  std::optional<int> max_staleness;        // parameter_server: nullopt = fully async, 0 = synchronous
  int shards = 1;                          // parameter_server: number of server shards
  bool nccl = false;                       // mirrored: gradient all-reduce over NCCL on the GPU (transport: nccl)

  nlohmann::json toJson() const;
  static StrategyOptions fromJson(const nlohmann::json& j);
};

// The training recipe shared by every node of a strategy run.
struct TrainingConfig {
  std::string model = "mlp";               // mlp | cnn | resnet (core/model/model.h)
  std::vector<int> layers{784, 256, 128, 10};  // mlp: every layer size; cnn, resnet: {input dims, classes}
  std::string dataset = "fashion-mnist";   // fashion-mnist | mnist | synthetic
  std::string data_path = "/usr/share/datasets/fashion-mnist";
  int64_t synthetic_samples = 8192;        // synthetic: training samples (the test set is a quarter of it)
  int batch_per_worker = 64;
  double learning_rate = 0.05;
  double momentum = 0.9;
  double weight_decay = 0.0;
  uint64_t seed = 1;  // as the spec's default (experiments/spec/spec.h)
  double target_accuracy = 0.85;
  double time_limit_s = 300;
  double eval_interval_s = 1.0;
  int64_t eval_interval_steps = 0;         // > 0: snapshot every N mini-batch gradients instead of by time
  double checkpoint_interval_s = 5.0;
  double collective_timeout_s = 60;        // a peer silent this long (paused) is treated as lost
  int64_t max_steps = 0;                   // 0 = no limit (tests use it)
  model::EmulationSpec emulate{};          // workload.emulate: disabled unless emulate.model is set

  nlohmann::json toJson() const;
  static TrainingConfig fromJson(const nlohmann::json& j);
};

// Which splits a node needs: a worker trains, the evaluator tests; neither holds the other's.
enum class Splits { kTrain, kTest, kBoth };
// Loads the splits of the dataset the config names (synthetic: dims and classes from the first and last
// layer); a split not asked for is left empty.
Result<data::DatasetSplits> loadTrainingData(const TrainingConfig& config, Splits which = Splits::kBoth);
// How long a collective or a request may wait for a silent peer (collective_timeout_s) before the peer counts
// as lost.
Deadline collectiveDeadline(const TrainingConfig& config);

// The model the config describes, for batches of up to max_batch samples, initialised from config.seed;
// padded to the emulated model's gradient when the config emulates one.
Result<std::unique_ptr<model::Model>> makeModel(const TrainingConfig& config, size_t max_batch);
// The plan of the config's emulation for a small model of `real_parameters`; nullopt without one.
Result<std::optional<model::EmulationPlan>> emulationPlan(const TrainingConfig& config, size_t real_parameters);

// Everything a role function needs. Owned by the node runtime; outlives the role call.
struct NodeContext {
  Transport& transport;
  ControlChannel& control;
  Accounting& accounting;
  const TrainingConfig& config;
  const StrategyOptions& strategy;
  int rank = 0;
  int workers = 1;
  int servers = 0;
  std::string checkpoint_dir;              // shared by the nodes of this strategy run
  const std::atomic<bool>* preempt_notice = nullptr;  // set by the SIGTERM handler
  const data::DatasetSplits* data = nullptr;          // loaded by the runtime for workers and the evaluator

  int evaluatorRank() const { return workers + servers; }
  int serverRank(int shard) const { return workers + shard; }
  bool noticeReceived() const { return preempt_notice && preempt_notice->load(std::memory_order_relaxed); }
  // What a role's set-up (its model, optimizer, data order, restored state) is: a replacement's recovery, a
  // first process's start-up compute. Set-up runs in a frame of this category, or it is unattributed.
  TimeCategory setUpCategory() const {
    return control.incarnation() > 0 ? TimeCategory::kIdleRecovery : TimeCategory::kCompute;
  }
};

// A worker's emulated accelerator (core/model/emulation.h): nothing without workload.emulate; otherwise
// afterCompute() stretches each step's compute to the emulated job's and reports the calibration once.
class EmulatedAccelerator {
 public:
  // InvalidArgument if the config's emulation is unusable. `allreduce`: the strategy's traffic pattern.
  static Result<EmulatedAccelerator> create(NodeContext& ctx, size_t real_parameters, bool allreduce);
  // Called at the end of a step's real compute, inside its compute timer: waits, off the CPU, for the rest
  // of the emulated compute time.
  void afterCompute(SteadyClock::time_point compute_started);

 private:
  EmulatedAccelerator(NodeContext* ctx, std::optional<model::EmulatedCompute> compute, double target_ratio)
      : ctx_(ctx), compute_(std::move(compute)), target_ratio_(target_ratio) {}
  NodeContext* ctx_;
  std::optional<model::EmulatedCompute> compute_;
  double target_ratio_;
  bool reported_ = false;
};

}  // namespace chaosbed
