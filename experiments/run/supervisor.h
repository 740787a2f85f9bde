#pragma once
// The supervisor of one strategy run (runStrategy, strategy_run.h): internal to experiments/run. It launches
// and supervises the strategy's nodes, carries out the chaos plan against them and collects the result.
// strategy_run.cc holds its life cycle (launch, exits, replacements, the run loop); supervisor_observe.cc
// what it reads from the nodes (events, stats, heartbeats, metrics).

#include "experiments/run/strategy_run.h"
#include "experiments/run/tta.h"

#include <atomic>
#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include "chaos/actuators/link.h"
#include "chaos/agent/host_agents.h"
#include "chaos/model/cluster.h"
#include "chaos/controller.h"
#include "core/control/failure_detector.h"
#include "core/control/keys.h"
#include "core/control/supervision.h"
#include "core/isolation/cgroup.h"
#include "core/launcher/launcher.h"
#include "core/runtime/control.h"
#include "core/runtime/link_command.h"
#include "core/runtime/events.h"
#include "core/strategies/strategy.h"
#include "experiments/run/node_config.h"
#include "experiments/run/results.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed::run::detail {

using namespace std::chrono_literals;

inline constexpr auto kTick = 50ms;                 // supervisor loop period
inline constexpr double kDrainS = 20.0;             // after stop: how long nodes get to finish their step
inline constexpr double kNodeSampleInterval = 1.0;  // s between rows of node_timeseries.csv (taken on a 500 ms tick)

inline std::string nodeName(const std::string& role, int index) { return role + "-" + std::to_string(index); }

class Supervisor;

// Tells the supervisor what chaos does before it does it: which nodes chaos kills or preempts (their
// replacement is then chaos's to decide), and how many faults of each kind it injected.
class ObservedActuator final : public chaos::Actuator {
 public:
  ObservedActuator(chaos::Actuator* inner, Supervisor* supervisor) : inner_(inner), supervisor_(supervisor) {}
  const char* name() const override { return inner_->name(); }
  const char* via(const chaos::Fault& f) override { return inner_->via(f); }
  Status checkAvailable(const chaos::Fault& f, const std::string& n) override { return inner_->checkAvailable(f, n); }
  Result<std::vector<chaos::HealRecord>> prepare(const chaos::Fault& f, const std::string& n) override {
    return inner_->prepare(f, n);
  }
  Status apply(const chaos::Fault& f, const std::string& n) override;
  Status escalate(const chaos::Fault& f, const std::string& n) override { return inner_->escalate(f, n); }
  Status revert(const chaos::Fault& f, const std::string& n) override { return inner_->revert(f, n); }

 private:
  chaos::Actuator* inner_;
  Supervisor* supervisor_;
};

class Supervisor final : public chaos::Cluster, public chaos::LinkControl {
 public:
  Supervisor(const RunContext& ctx, const spec::StrategySpec& strategy)
      : ctx_(ctx), spec_(*ctx.spec), strategy_(strategy),
        prefix_(ctx.run_id + "/" + strategy.label), dir_(ctx.out_dir + "/" + strategy.label),
        mirrored_(strategy.kind == spec::StrategyKind::kMirrored) {}
  // The launcher goes first: its destructor stops the nodes, and its thread reports their exits through
  // onExit into members (exits_) that would otherwise be destroyed before it (ThreadSanitizer found it).
  ~Supervisor() override { launcher_.reset(); }

  Result<StrategyResult> run();

  // chaos::Cluster
  std::vector<chaos::NodeInfo> nodes() const override { return all_nodes_; }
  Result<pid_t> processGroup(const std::string& node) override {
    if (!known(node)) return Status::notFound(node + " is not part of strategy " + strategy_.label);
    Result<pid_t> pid = launcher_->pid(node);
    // Not running (it left on a preemption notice, or died and awaits its replacement) is NotFound by the
    // Cluster contract: the controller logs a fault on it as skipped, not failed.
    if (!pid.isOk() && pid.status().code() == StatusCode::kUnavailable)
      return Status::notFound(node + " is not running");
    return pid;
  }
  NodeCgroup* cgroup(const std::string& node) override { return known(node) ? launcher_->cgroup(node) : nullptr; }
  double cpuQuota(const std::string&) override { return spec_.cluster.cpu_per_node; }
  int host(const std::string& node) override { return ctx_.hosts != nullptr && known(node) ? hostOf(node) : -1; }
  Status replace(const std::string& node) override {
    if (!known(node)) return Status::notFound(node + " is not part of strategy " + strategy_.label);
    {
      // A vanished node is replaced once its loss is detected (handleExits), never before: until then the
      // cluster does not know that it is gone. (The launcher is asked first: exits_mu_ is never held while
      // calling it.)
      const bool running = launcher_->running(node);
      MutexLock lock(exits_mu_);
      if (vanished_.count(node) && running) {
        replace_when_lost_.insert(node);
        LOG(INFO) << strategy_.label << ": " << node << " vanished; its replacement waits for the detection";
        return Status::ok();
      }
      // Its exit is not taken up yet (the supervisor's loop is behind, as under a CPU hog): the replacement
      // follows once it is, in that order, or the exit would be booked after the replacement started, as
      // a crash of the new incarnation (seen: a kill wave's exits counted as crashes beside a CPU hog).
      const auto pending = [&](const ExitInfo& e) { return e.name == node; };
      if (handling_.count(node) || std::any_of(exits_.begin(), exits_.end(), pending)) {
        replace_when_lost_.insert(node);
        return Status::ok();
      }
    }
    MutexLock lock(mu_);
    return restartLocked(node);
  }

  // chaos::LinkControl: a command the node's control watcher applies to its transport shaper.
  Status setLink(const std::string& node, const std::vector<std::string>& peers,
                 const chaos::FaultParams& params) override {
    LinkCommand cmd{.op = LinkCommand::Op::kSet, .peers = peers, .bandwidth_mbps = params.bandwidth_mbps,
                    .latency_ms = params.latency_ms, .partition = params.partition};
    return sendLinkCommand(node, cmd);
  }
  Status clearLink(const std::string& node, const std::vector<std::string>& peers) override {
    return sendLinkCommand(node, LinkCommand{.op = LinkCommand::Op::kClear, .peers = peers});
  }
  Status injectTransportError(const std::string& node, uint64_t fault_id, const std::vector<std::string>& peers,
                              const chaos::FaultParams& params) override {
    LinkCommand cmd;
    cmd.op = LinkCommand::Op::kError;
    cmd.peers = peers;
    cmd.fault = fault_id;
    cmd.incarnation = launcher_->incarnation(node) - 1;  // the control plane counts predecessors
    cmd.error = params.error;
    cmd.nth = params.nth;
    cmd.count = params.count;
    return sendLinkCommand(node, cmd);
  }
  Status clearTransportError(const std::string& node, uint64_t fault_id) override {
    LinkCommand cmd;
    cmd.op = LinkCommand::Op::kClearErrors;
    cmd.fault = fault_id;
    return sendLinkCommand(node, cmd);
  }

  void chaosApplying(const chaos::Fault& f, const std::string& node) {
    const int incarnation = launcher_->incarnation(node);  // the process this fault is about to hit
    if (ctx_.metrics) ctx_.metrics->faultInjected(spec_.metadata.name, strategy_.label, chaos::faultKindName(f.kind));
    MutexLock lock(exits_mu_);
    fault_starts_.push_back({f.name, chaos::faultKindName(f.kind), node, now(), std::nullopt});
    if (chaos::endsNode(f.kind)) chaos_killed_.insert({node, incarnation});
    if (f.kind == chaos::FaultKind::kVanish) vanished_.insert(node);
  }

 private:
  bool known(const std::string& node) const { return node_set_.count(node) > 0; }
  // The emulated host a node runs on (hosts: netns): where cluster.hosts.placement puts it, else round-robin
  // over the nodes it does not place, in launch order (names_).
  int hostOf(const std::string& node) const {
    const auto& placed = spec_.cluster.placement;
    if (auto it = placed.find(node); it != placed.end()) return it->second;
    size_t turn = 0;
    for (const std::string& n : names_) {
      if (n == node) break;
      if (!placed.count(n)) ++turn;
    }
    return int(turn % size_t(ctx_.agents->size()));
  }
  double now() const { return start_ns_ == 0 ? 0.0 : double(realtimeNs() - start_ns_) * 1e-9; }

  // OK once the node applied the command; InvalidArgument when it answered "rejected: <why>" (malformed,
  // or its shaper refused it: core/runtime/link_command.h); Unavailable when no answer came (a dead node).
  // A revert (clear, clear_errors) that no answer came for is moot, and OK, when the process it was sent to
  // is gone or the run is stopping: these faults live in the node's own transport and end with the process.
  // (At stop the nodes exit without reading further commands, and the launcher kills what remains.)
  Status sendLinkCommand(const std::string& node, const LinkCommand& cmd) {
    if (!known(node)) return Status::notFound(node + " is not part of strategy " + strategy_.label);
    const bool revert = cmd.op == LinkCommand::Op::kClear || cmd.op == LinkCommand::Op::kClearErrors;
    const int incarnation = launcher_->incarnation(node);
    auto n = ctx_.store->add(keys_.linkCount(node), 1);
    if (!n.isOk()) return n.status();
    const std::string index = std::to_string(*n - 1);
    CHAOSBED_RETURN_IF_ERROR(ctx_.store->set(keys_.linkCommand(node, *n - 1), encodeLinkCommand(cmd)));
    // The node applies commands in order and acknowledges each; a dead node never does.
    auto ack = ctx_.store->get(keys_.linkAck(node, *n - 1), deadlineIn(2s));
    if (!ack.isOk() && revert &&
        (stopping_.load() || !launcher_->running(node) || launcher_->incarnation(node) != incarnation)) {
      LOG(INFO) << strategy_.label << ": " << node << ": link command " << index
                << " (a revert) unanswered: moot, its process is gone or stopping";
      return Status::ok();
    }
    if (!ack.isOk()) return Status::unavailable(node + " did not acknowledge link command " + index);
    return decodeLinkAck(*ack).withContext(node + ": link command " + index);
  }

  // run(), in order: the result's description of the strategy; the nodes prepared, launched and ready; the
  // chaos armed; training started; the supervision loop until the nodes have drained; the final figures.
  Status describeStrategy();
  Status prepare();
  Status launchAll();
  Status waitReady(const std::vector<std::string>& names, Deadline deadline);
  // The run's chaos against this strategy's nodes: the actuators (process faults through the host agents when
  // the nodes live there), each observed by this supervisor, and the controller that runs the plan (null
  // when the plan has no action).
  struct ArmedChaos {
    std::unique_ptr<chaos::ActuatorSet> actuators;
    std::vector<std::unique_ptr<ObservedActuator>> observers;
    std::unique_ptr<chaos::Controller> controller;
  };
  Result<ArmedChaos> armChaos();
  Status startTraining(chaos::Controller* controller);
  // One pass every kTick: exits, replacements, events, liveness, supervision's tick, the stop conditions,
  // progress every 500 ms; ends once the nodes have drained after the stop.
  void superviseTraining(chaos::Controller* controller);
  // Every 500 ms: the progress triggers, node_timeseries rows, stalls, the live progress and the gauges.
  void sampleProgress(chaos::Controller* controller, double t);
  void publishProgress(const chaos::Controller* controller, double t, int64_t steps);
  // After the stop: closes the measurement once (the control plane's cost, every fault healed); true when no
  // worker runs any more or the drain time is up.
  bool drained(chaos::Controller* controller, bool any_worker);
  // The nodes stopped, the final stats, residual, fault episodes and gauges.
  void finishRun(chaos::Controller* controller);
  void onExit(const ExitInfo& info);
  void handleExits();
  // Every heartbeat interval: hands each running node's heartbeat to the failure detector and fences those
  // it declares lost.
  void checkLiveness();
  void declareLost(const control::FailureDetector::Lost& lost);
  // The loss of node was seen at t (its exit, or its declaration): the faults on it that caused it are detected.
  void markDetected(const std::string& node, double t, bool declared) CHAOSBED_REQUIRES(exits_mu_);
  Status restartLocked(const std::string& node) CHAOSBED_REQUIRES(mu_);
  void checkReplacements();
  void readEvents();
  void handleEvent(const std::string& text);
  // Records one event of this strategy in events.jsonl (the strategy's label added).
  void record(nlohmann::json event);
  void onEvaluation(const events::Eval& eval);
  void requestStop(const std::string& reason);
  NodeStats collectStats(const std::string& role, int count) const;
  // Sets result_.accounting_residual from the final report of every worker and server process.
  void accountingResidual();
  // Each named node's stats, summed over its incarnations, in one request to the store.
  using StatsByNode = std::map<std::string, NodeStats>;
  StatsByNode statsOf(const std::vector<std::string>& names) const;
  // Every node's stats, read once (a tick's triggers, samples, totals and gauges all come from one read).
  StatsByNode allNodeStats() const;
  static NodeStats roleTotal(const StatsByNode& stats, const std::string& role, int count);
  void exportMetrics(const chaos::Controller* chaos_controller, const StatsByNode& stats);
  int aliveCount() const;
  int64_t totalWorkerSteps() const;
  // Carries out Supervision's decisions, in order.
  void execute(const std::vector<control::Action>& actions) CHAOSBED_REQUIRES(mu_);
  void recordRecovery(double seconds, const std::string& cause) {
    result_.recovery_seconds.push_back(seconds);
    result_.recovery_causes.push_back(cause);
    ++result_.recoveries;
    if (ctx_.metrics) ctx_.metrics->recovery(spec_.metadata.name, strategy_.label, seconds);
  }

  const RunContext& ctx_;
  const spec::ExperimentSpec& spec_;
  const spec::StrategySpec& strategy_;
  const std::string prefix_;
  const control::ControlKeys keys_{prefix_};
  const std::string dir_;
  const bool mirrored_;
  int workers_ = 0, servers_ = 0;
  std::vector<chaos::NodeInfo> all_nodes_;  // of the plan (the chaos schedule is drawn once for the run)
  std::set<std::string> node_set_;          // the nodes this strategy runs
  std::vector<std::string> names_;

  std::unique_ptr<NodeRunner> launcher_;  // a Launcher here, or a session of the host agents
  chaos::AgentNodes* agent_nodes_ = nullptr;  // = launcher_ when the nodes live on the agents' hosts
  int64_t start_ns_ = 0;
  double controller_cpu_at_start_ = 0;  // the controller process's CPU seconds when training started
  bool polling_events_ = false;  // the main loop reads events every tick: their latency is the control plane's

  mutable Mutex bad_stats_mu_;
  mutable std::set<std::string> bad_stats_ CHAOSBED_GUARDED_BY(bad_stats_mu_);  // stats keys already logged as malformed
  // Final reports (nothing comes after them, so they are read once).
  mutable Mutex stats_cache_mu_;
  mutable std::map<std::string, NodeStats> stats_final_ CHAOSBED_GUARDED_BY(stats_cache_mu_);

  // The launcher's thread posts exits and chaos's thread marks its kills under exits_mu_; it is never held
  // while calling the launcher (whose restart() waits for that thread).
  Mutex exits_mu_;
  std::deque<ExitInfo> exits_ CHAOSBED_GUARDED_BY(exits_mu_);
  std::set<std::pair<std::string, int>> chaos_killed_ CHAOSBED_GUARDED_BY(exits_mu_);  // (node, incarnation)
  std::multiset<std::string> handling_ CHAOSBED_GUARDED_BY(exits_mu_);  // nodes whose exits handleExits has taken
  std::vector<FaultStart> fault_starts_ CHAOSBED_GUARDED_BY(exits_mu_);  // every apply, for fault episodes
  std::set<std::string> vanished_ CHAOSBED_GUARDED_BY(exits_mu_);           // frozen by a vanish, not yet lost
  std::set<std::string> fenced_ CHAOSBED_GUARDED_BY(exits_mu_);  // declared lost and SIGKILLed, not yet exited
  // Replacements due once the node's loss is detected (vanished) or its exit is taken up.
  std::set<std::string> replace_when_lost_ CHAOSBED_GUARDED_BY(exits_mu_);

  // The decisions, which this class carries out: the supervisor's thread and chaos's (restarting a node it
  // killed) both use them.
  Mutex mu_;
  std::unique_ptr<control::Supervision> supervision_ CHAOSBED_GUARDED_BY(mu_);
  // Why a node that must be restarted cannot be: its host is lost. The run then stops (host_lost) instead of
  // retrying every tick until its time limit.
  std::optional<std::string> host_lost_ CHAOSBED_GUARDED_BY(mu_);

  // The supervisor's thread only.
  control::FailureDetector detector_{spec_.cluster.failure_detection.timeout_s};
  std::optional<SteadyClock::time_point> last_liveness_check_;
  TtaTracker tta_{spec_.training.target_accuracy, spec_.training.sustained_evals};
  int64_t events_read_ = 0;
  int64_t total_loss_samples_ = 0;  // samples lost when every elastic member was lost at once
  bool stop_sent_ = false;
  std::atomic<bool> stopping_{false};  // stop_sent_, for the chaos controller's thread
  std::vector<std::pair<double, int64_t>> step_samples_;  // (time, workers' steps) every 500 ms
  std::vector<Observation> observations_;                 // (time, workers' samples, nodes alive) every 500 ms
  SteadyClock::time_point last_progress_;  // the last progress sample
  int64_t last_steps_ = 0;                 // the workers' steps then
  double last_advance_t_ = 0;              // when the workers' step count last grew
  double last_node_sample_t_ = -kNodeSampleInterval;
  std::optional<SteadyClock::time_point> stopped_at_;  // when the stop was first seen by the loop
  StrategyResult result_;
};

}  // namespace chaosbed::run::detail
