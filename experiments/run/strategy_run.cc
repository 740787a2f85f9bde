#include "experiments/run/strategy_run.h"

#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "chaos/actuators/link.h"
#include "chaos/cluster.h"
#include "chaos/controller.h"
#include "core/control/failure_detector.h"
#include "core/control/keys.h"
#include "core/control/supervision.h"
#include "core/isolation/cgroup.h"
#include "core/launcher/launcher.h"
#include "core/runtime/control.h"
#include "core/runtime/link_command.h"
#include "core/strategies/strategy.h"
#include "experiments/run/node_config.h"
#include "experiments/run/results.h"
#include "transports/thread_annotations.h"

namespace chaosbed::run {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr auto kTick = 50ms;                 // supervisor loop period
constexpr double kDrainS = 20.0;             // after stop: how long nodes get to finish their step

std::string nodeName(const std::string& role, int index) { return role + "-" + std::to_string(index); }

// A number from an event written by a node; NaN (a diverged loss is written as null) and absence read as
// `otherwise`.
double number(const nlohmann::json& j, const char* key, double otherwise) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : otherwise;
}

class Supervisor;

// Tells the supervisor what chaos does before it does it: which nodes chaos kills or preempts (their
// replacement is then chaos's to decide), and how many faults of each kind it injected.
class ObservedActuator final : public chaos::Actuator {
 public:
  ObservedActuator(chaos::Actuator* inner, Supervisor* supervisor) : inner_(inner), supervisor_(supervisor) {}
  const char* name() const override { return inner_->name(); }
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
    return launcher_->pid(node);
  }
  NodeCgroup* cgroup(const std::string& node) override { return known(node) ? launcher_->cgroup(node) : nullptr; }
  double cpuQuota(const std::string&) override { return spec_.cluster.cpu_per_node; }
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
    if (ctx_.metrics) ctx_.metrics->faultInjected(spec_.metadata.name, strategy_.label, chaos::faultKindName(f.kind));
    MutexLock lock(exits_mu_);
    fault_starts_.push_back({f.name, chaos::faultKindName(f.kind), node, now(), std::nullopt});
    if (chaos::endsNode(f.kind)) chaos_killed_.insert(node);
    if (f.kind == chaos::FaultKind::kVanish) vanished_.insert(node);
  }

 private:
  bool known(const std::string& node) const { return node_set_.count(node) > 0; }
  double now() const { return start_ns_ == 0 ? 0.0 : double(realtimeNs() - start_ns_) * 1e-9; }

  // OK once the node applied the command; InvalidArgument when it answered "rejected: <why>" (malformed,
  // or its shaper refused it: core/runtime/link_command.h); Unavailable when no answer came (a dead node).
  Status sendLinkCommand(const std::string& node, const LinkCommand& cmd) {
    if (!known(node)) return Status::notFound(node + " is not part of strategy " + strategy_.label);
    auto n = ctx_.store->add(keys_.linkCount(node), 1);
    if (!n.isOk()) return n.status();
    const std::string index = std::to_string(*n - 1);
    CHAOSBED_RETURN_IF_ERROR(ctx_.store->set(keys_.linkCommand(node, *n - 1), encodeLinkCommand(cmd)));
    // The node applies commands in order and acknowledges each; a dead node never does.
    auto ack = ctx_.store->get(keys_.linkAck(node, *n - 1), deadlineIn(2s));
    if (!ack.isOk()) return Status::unavailable(node + " did not acknowledge link command " + index);
    return decodeLinkAck(*ack).withContext(node + ": link command " + index);
  }

  Status prepare();
  Status launchAll();
  Status waitReady(const std::vector<std::string>& names, Deadline deadline);
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
  void requestStop(const std::string& reason);
  NodeStats collectStats(const std::string& role, int count) const;
  // Sets result_.accounting_residual from the final report of every worker and server process.
  void accountingResidual();
  NodeStats nodeStats(const std::string& name) const;  // summed over the node's incarnations
  void exportMetrics(const chaos::Controller* chaos_controller);
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

  std::unique_ptr<Launcher> launcher_;
  int64_t start_ns_ = 0;

  mutable Mutex bad_stats_mu_;
  mutable std::set<std::string> bad_stats_ CHAOSBED_GUARDED_BY(bad_stats_mu_);  // stats keys already logged as malformed

  // The launcher's thread posts exits and chaos's thread marks its kills under exits_mu_; it is never held
  // while calling the launcher (whose restart() waits for that thread).
  Mutex exits_mu_;
  std::deque<ExitInfo> exits_ CHAOSBED_GUARDED_BY(exits_mu_);
  std::set<std::string> chaos_killed_ CHAOSBED_GUARDED_BY(exits_mu_);
  std::vector<FaultStart> fault_starts_ CHAOSBED_GUARDED_BY(exits_mu_);  // every apply, for fault episodes
  std::set<std::string> vanished_ CHAOSBED_GUARDED_BY(exits_mu_);           // frozen by a vanish, not yet lost
  std::set<std::string> replace_when_lost_ CHAOSBED_GUARDED_BY(exits_mu_);  // replacements due, awaiting that

  // The decisions, which this class carries out: the supervisor's thread and chaos's (restarting a node it
  // killed) both use them.
  Mutex mu_;
  std::unique_ptr<control::Supervision> supervision_ CHAOSBED_GUARDED_BY(mu_);

  // The supervisor's thread only.
  control::FailureDetector detector_{spec_.cluster.failure_detection.timeout_s};
  std::optional<SteadyClock::time_point> last_liveness_check_;
  int streak_ = 0;            // consecutive evaluations at or above the target
  double streak_start_s_ = 0;
  int64_t events_read_ = 0;
  bool stop_sent_ = false;
  std::vector<std::pair<double, int64_t>> step_samples_;  // (time, workers' steps) every 500 ms
  StrategyResult result_;
};

Status ObservedActuator::apply(const chaos::Fault& f, const std::string& n) {
  supervisor_->chaosApplying(f, n);
  return inner_->apply(f, n);
}

Status Supervisor::prepare() {
  workers_ = spec_.cluster.workers;
  servers_ = mirrored_ ? 0 : (strategy_.shards > 0 ? strategy_.shards : spec_.cluster.servers);
  all_nodes_ = chaos::makeNodes({{"worker", spec_.cluster.workers}, {"ps", spec_.cluster.servers}, {"evaluator", 1}});
  for (int i = 0; i < workers_; ++i) names_.push_back(nodeName("worker", i));
  for (int i = 0; i < servers_; ++i) names_.push_back(nodeName("ps", i));
  names_.push_back(nodeName("evaluator", 0));
  node_set_.insert(names_.begin(), names_.end());
  control::SupervisionPolicy policy;
  policy.workers = workers_;
  policy.synchronous = mirrored_;
  policy.elastic = strategy_.on_failure == spec::OnFailure::kElastic;
  policy.job_restart = strategy_.on_server_failure == spec::OnServerFailure::kJobRestart;
  policy.restart_after_crash_s = 0;  // a node that dies on its own comes back at once (plus its backoff)
  {
    MutexLock lock(mu_);  // no other thread yet: for the analysis
    supervision_ = std::make_unique<control::Supervision>(policy);
  }

  std::error_code ec;
  fs::create_directories(dir_ + "/checkpoints", ec);
  if (ec) return Status::ioError("cannot create " + dir_ + ": " + ec.message());
  nlohmann::json config = {{"store", ctx_.store_address},
                           {"secret_file", ctx_.secret_file},
                           {"prefix", prefix_},
                           {"workers", workers_},
                           {"servers", servers_},
                           {"training", trainingConfig(spec_, strategy_).toJson()},
                           {"strategy", strategyOptions(spec_, strategy_).toJson()},
                           {"checkpoint_dir", dir_ + "/checkpoints"},
                           {"connect_timeout_s", 60.0}};
  CHAOSBED_RETURN_IF_ERROR(writeTextAtomically(dir_ + "/node-config.json", config.dump(2), 0600));

  LauncherOptions lo;
  lo.log_dir = dir_ + "/logs";
  lo.cgroup_group = (ctx_.claim ? ctx_.claim->owner() : ctx_.run_id) + "-" + strategy_.label;
  lo.on_exit = [this](const ExitInfo& info) { onExit(info); };
  lo.stop_grace = 3000ms;
  CHAOSBED_ASSIGN_OR_RETURN(launcher_, Launcher::create(lo));
  return Status::ok();
}

Status Supervisor::launchAll() {
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id) return Status::internal("not a node name: " + name);
    NodeSpec n;
    n.name = name;
    n.role = control::roleName(id->role);
    n.index = id->index;
    n.args = {n.role, "--node_config=" + dir_ + "/node-config.json"};
    n.env = {{"OPENBLAS_NUM_THREADS", "1"}};
    n.cpus = spec_.cluster.cpu_per_node;
    auto pid = launcher_->start(n);
    if (!pid.isOk()) return pid.status().withContext("starting " + name);
  }
  return Status::ok();
}

Status Supervisor::waitReady(const std::vector<std::string>& names, Deadline deadline) {
  for (const std::string& name : names) {
    for (;;) {
      if (ctx_.interrupted && ctx_.interrupted->load()) return Status::cancelled("interrupted");
      int inc = launcher_->incarnation(name) - 1;  // the control plane counts predecessors
      if (ctx_.store->get(keys_.ready(name, inc), deadlineIn(100ms)).isOk()) break;
      if (!launcher_->running(name)) {
        return Status::unavailable(name + " exited during start-up; see " + launcher_->logPath(name));
      }
      if (SteadyClock::now() > deadline) return Status::timeout(name + " did not become ready; see " + launcher_->logPath(name));
    }
  }
  return Status::ok();
}

void Supervisor::onExit(const ExitInfo& info) {
  MutexLock lock(exits_mu_);
  exits_.push_back(info);
}

Status Supervisor::restartLocked(const std::string& node) {
  auto pid = launcher_->restart(node, deadlineIn(5s));
  if (!pid.isOk()) return pid.status();
  const int incarnation = launcher_->incarnation(node) - 1;  // the control plane counts predecessors
  if (auto id = control::NodeId::parse(node)) supervision_->onRestarted(*id, incarnation);
  {
    MutexLock exits_lock(exits_mu_);
    chaos_killed_.erase(node);
  }
  if (ctx_.events) (void)ctx_.events->append({{"type", "node.restarted"}, {"strategy", strategy_.label},
                                              {"node", node}, {"incarnation", incarnation}, {"t", now()}});
  return Status::ok();
}

void Supervisor::execute(const std::vector<control::Action>& actions) {
  for (const control::Action& a : actions) {
    switch (a.kind) {
      case control::Action::Kind::kRestart: {
        const std::string name = a.node.name();
        if (a.only_if_running && !launcher_->running(name)) break;
        if (Status s = restartLocked(name); !s.isOk()) LOG(ERROR) << "restarting " << name << ": " << s.toString();
        break;
      }
      case control::Action::Kind::kPublishMembership: {
        const Membership& m = a.membership;
        if (Status s = ctx_.store->set(keys_.membership(m.generation), m.toJson().dump()); !s.isOk())
          LOG(ERROR) << "publishing membership: " << s.toString();
        if (ctx_.events) (void)ctx_.events->append({{"type", "membership"}, {"strategy", strategy_.label},
                                                    {"membership", m.toJson()}, {"t", now()}});
        break;
      }
      case control::Action::Kind::kRecovery:
        recordRecovery(a.seconds, a.cause);
        if (ctx_.events)
          (void)ctx_.events->append({{"type", "recovery"}, {"strategy", strategy_.label}, {"seconds", a.seconds},
                                     {"cause", a.cause}, {"t", now()}});
        break;
    }
  }
}

void Supervisor::handleExits() {
  std::deque<ExitInfo> exits;
  std::set<std::string> chaos_killed;
  {
    MutexLock lock(exits_mu_);
    exits.swap(exits_);
    chaos_killed = chaos_killed_;
  }
  for (const ExitInfo& e : exits) {
    auto id = control::NodeId::parse(e.name);
    if (!id) continue;  // not a node of ours (the launcher only starts names from names_)
    detector_.forget(*id);
    bool replace_now = false;
    if (!e.requested) {
      MutexLock lock(exits_mu_);
      markDetected(e.name, now(), /*declared=*/false);
      vanished_.erase(e.name);
      replace_now = replace_when_lost_.erase(e.name) > 0;
    }
    control::NodeExit exit;
    exit.node = *id;
    exit.requested = e.requested;
    exit.by_chaos = chaos_killed.count(e.name) > 0;
    exit.clean = !e.signaled && e.code == 0;
    exit.lifetime_s = std::chrono::duration<double>(e.lifetime).count();
    const int64_t steps = totalWorkerSteps();
    MutexLock lock(mu_);
    const double t = now();
    auto actions = supervision_->onExit(exit, t, steps);
    if (!supervision_->isDown(*id) || e.requested) continue;  // not a failure (finished, stopped on purpose)
    LOG(INFO) << strategy_.label << ": " << e.name << " " << e.describe() << " at " << t << " s";
    if (ctx_.events) (void)ctx_.events->append({{"type", "node.exited"}, {"strategy", strategy_.label}, {"node", e.name},
                                                {"how", e.describe()}, {"by_chaos", exit.by_chaos}, {"t", t}});
    execute(actions);
    if (replace_now)
      if (Status s = restartLocked(e.name); !s.isOk()) LOG(ERROR) << "replacing " << e.name << ": " << s.toString();
  }
}

void Supervisor::markDetected(const std::string& node, double t, bool declared) {
  for (FaultStart& f : fault_starts_) {
    if (f.node != node || f.detected_t || f.t > t) continue;
    // An exit is the detection of the faults that end a node; a declaration also of a pause that outlasted
    // the timeout.
    const auto kind = chaos::parseFaultKind(f.kind);
    if (kind && (chaos::endsNode(*kind) || (declared && *kind == chaos::FaultKind::kPause))) f.detected_t = t;
  }
}

void Supervisor::checkLiveness() {
  const auto& fd = spec_.cluster.failure_detection;
  const auto now_steady = SteadyClock::now();
  if (stop_sent_ || (last_liveness_check_ && now_steady - *last_liveness_check_ < std::chrono::duration<double>(fd.heartbeat_s)))
    return;
  last_liveness_check_ = now_steady;
  const double t = now();
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id || id->role == control::Role::kEvaluator) continue;  // it trains nothing and reports no wall time
    if (!launcher_->running(name)) {
      detector_.forget(*id);
      continue;
    }
    // The heartbeat: the node's own report, refreshed every 250 ms while it lives, its wall time growing.
    auto v = ctx_.store->get(keys_.stats(name, launcher_->incarnation(name) - 1), deadlineIn(200ms));
    auto stats = v.isOk() ? NodeStats::decode(*v) : Result<NodeStats>(v.status());
    if (!stats.isOk() || stats->final_report || stats->wall_seconds <= 0) {
      detector_.forget(*id);  // starting (not armed yet) or finishing (not silent, done)
      continue;
    }
    detector_.observe(*id, stats->wall_seconds, t);
  }
  for (const control::FailureDetector::Lost& lost : detector_.expired(t)) declareLost(lost);
}

void Supervisor::declareLost(const control::FailureDetector::Lost& lost) {
  const std::string name = lost.node.name();
  const double t = now();
  LOG(INFO) << strategy_.label << ": " << name << " declared lost at " << t << " s (silent since " << lost.silent_since_s
            << " s; failure_detection.timeout_s " << detector_.timeout_s() << ")";
  if (ctx_.events) (void)ctx_.events->append({{"type", "node.lost"}, {"strategy", strategy_.label}, {"node", name},
                                              {"silent_since_s", lost.silent_since_s}, {"timeout_s", detector_.timeout_s()},
                                              {"t", t}});
  {
    MutexLock lock(exits_mu_);
    markDetected(name, t, /*declared=*/true);
  }
  // Fence it, as a cluster manager does before it replaces a node: its exit is then the failure the
  // strategy recovers from. A frozen v1 task dies only once thawed.
  if (Status s = launcher_->signal(name, SIGKILL); !s.isOk()) LOG(WARNING) << "fencing " << name << ": " << s.toString();
  if (NodeCgroup* cg = launcher_->cgroup(name)) {
    Result<bool> frozen = cg->isFrozen();
    if (frozen.isOk() && *frozen)
      if (Status s = cg->thaw(); !s.isOk()) LOG(WARNING) << "thawing " << name << " after fencing it: " << s.toString();
  }
}

void Supervisor::checkReplacements() {
  MutexLock lock(mu_);
  for (const control::NodeId& node : supervision_->restartsDue(now()))
    if (!launcher_->running(node.name()))
      if (Status s = restartLocked(node.name()); !s.isOk()) LOG(ERROR) << "restarting " << node.name() << ": " << s.toString();
  std::vector<control::NodeId> ready;
  for (const std::string& name : names_) {
    auto id = control::NodeId::parse(name);
    auto inc = id ? supervision_->awaitedIncarnation(*id) : std::nullopt;
    if (!inc) continue;
    auto has = ctx_.store->contains(keys_.ready(name, *inc));
    if (has.isOk() && *has) ready.push_back(*id);
  }
  if (!ready.empty()) execute(supervision_->onReady(ready));
}

void Supervisor::requestStop(const std::string& reason) {
  if (stop_sent_) return;
  stop_sent_ = true;
  result_.stop_reason = reason;
  result_.wall_seconds = now();
  {
    MutexLock lock(mu_);
    supervision_->onStop(result_.wall_seconds);
  }
  (void)ctx_.store->set(keys_.stop(), reason);
  if (ctx_.events) (void)ctx_.events->append({{"type", "run.stop"}, {"strategy", strategy_.label}, {"reason", reason},
                                              {"t", result_.wall_seconds}});
}

void Supervisor::readEvents() {
  // Each event is one atomic append (core/runtime/control.h): the list has no holes, so reading from the
  // last index on never waits for a record that a killed writer left half-made.
  for (;;) {
    auto batch = ctx_.store->readList(keys_.events(), events_read_, 256);
    if (!batch.isOk() || batch->empty()) return;
    for (const std::string& text : *batch) {
      ++events_read_;
      handleEvent(text);
    }
  }
}

void Supervisor::handleEvent(const std::string& text) {
  nlohmann::json e = nlohmann::json::parse(text, nullptr, false);
  if (!e.is_object()) {
    LOG(WARNING) << strategy_.label << ": ignoring a malformed event (" << text.size() << " bytes)";
    return;
  }
  e["strategy"] = strategy_.label;
  if (ctx_.events) (void)ctx_.events->append(e);
  const std::string type = e.value("type", "");
  if (type == "eval" && e.value("node", "") == nodeName("evaluator", 0)) {
    EvalPoint p;
    p.time_s = number(e, "snapshot_t", 0.0);
    p.step = int64_t(number(e, "step", 0));
    p.accuracy = number(e, "accuracy", 0.0);
    p.loss = number(e, "loss", std::nan(""));
    p.samples = collectStats("worker", workers_).samples;
    p.alive = aliveCount();
    result_.timeline.push_back(p);
    result_.final_accuracy = p.accuracy;
    result_.final_loss = p.loss;
    if (ctx_.metrics) ctx_.metrics->setAccuracy(spec_.metadata.name, strategy_.label, p.accuracy, p.loss);
    if (p.accuracy < spec_.training.target_accuracy) {
      streak_ = 0;
    } else {
      if (streak_++ == 0) streak_start_s_ = p.time_s;
      if (!result_.tta_seconds) {
        result_.tta_seconds = p.time_s;
        if (ctx_.metrics) ctx_.metrics->setTimeToAccuracy(spec_.metadata.name, strategy_.label, p.time_s);
      }
      if (streak_ >= spec_.training.sustained_evals && !result_.tta_sustained_seconds) {
        result_.tta_sustained_seconds = streak_start_s_;
        requestStop("target");
      }
    }
  } else if (type == "recovered") {
    MutexLock lock(mu_);
    execute(supervision_->onRecoveredEvent(number(e, "t", now())));
  } else if (type == "failure_detected") {
    // A member waits for a newer generation; Supervision decides whether an exit explains it (onTick).
    auto node = control::NodeId::parse(e.value("node", ""));
    const double generation = number(e, "generation", -1);
    if (node && generation >= 0) {
      std::string what = e.value("reason", "") + ": " + e.value("error", "");
      if (what.size() > 200) what = what.substr(0, 200) + "...";
      MutexLock lock(mu_);
      supervision_->onCollectiveFailure(*node, int64_t(generation), now(), what);
    }
  } else if (type == "error") {
    LOG(WARNING) << strategy_.label << ": " << e.dump();
  }
}

NodeStats Supervisor::nodeStats(const std::string& name) const {
  NodeStats total;
  for (int inc = 0; inc < launcher_->incarnation(name); ++inc) {
    const std::string k = keys_.stats(name, inc);
    auto has = ctx_.store->contains(k);
    if (!has.isOk() || !*has) continue;
    auto v = ctx_.store->get(k, deadlineIn(1s));
    if (!v.isOk()) continue;
    auto stats = NodeStats::decode(*v);
    if (stats.isOk()) {
      total.merge(*stats);
      continue;
    }
    // Ignored (a report never counts in part); logged once per key, not at every poll.
    MutexLock lock(bad_stats_mu_);
    if (bad_stats_.insert(k).second) LOG(WARNING) << k << ": ignoring malformed stats: " << stats.status().message();
  }
  return total;
}

void Supervisor::accountingResidual() {
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id || control::roleName(id->role) == std::string("evaluator")) continue;
    for (int inc = 0; inc < launcher_->incarnation(name); ++inc) {
      auto v = ctx_.store->get(keys_.stats(name, inc), deadlineIn(1s));
      if (!v.isOk()) continue;
      auto stats = NodeStats::decode(*v);
      if (!stats.isOk() || !stats->final_report || stats->wall_seconds <= 0) continue;
      VLOG(1) << strategy_.label << ": " << name << "#" << inc << ": wall " << stats->wall_seconds << " s, booked "
              << stats->toJson()["seconds"].dump();
      if (const double r = stats->residualFraction(); r >= result_.accounting_residual) {
        result_.accounting_residual = r;
        result_.accounting_residual_node = name + "#" + std::to_string(inc);
      }
    }
  }
  if (result_.accounting_residual > 0.01)
    LOG(WARNING) << strategy_.label << ": " << result_.accounting_residual_node << " booked its wall time with a residual of "
                 << 100 * result_.accounting_residual << "% (wall - the sum of its categories)";
}

NodeStats Supervisor::collectStats(const std::string& role, int count) const {
  NodeStats total;
  for (int i = 0; i < count; ++i) total.merge(nodeStats(nodeName(role, i)));
  return total;
}

void Supervisor::exportMetrics(const chaos::Controller* chaos_controller) {
  if (!ctx_.metrics) return;
  const std::string& exp = spec_.metadata.name;
  std::map<std::string, int> alive;
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id) continue;
    const std::string role = control::roleName(id->role);
    alive[role] += launcher_->running(name) ? 1 : 0;
    if (role != "evaluator") ctx_.metrics->updateNode({exp, strategy_.label, role, name}, nodeStats(name));
  }
  for (const auto& [role, n] : alive) ctx_.metrics->setNodesAlive(exp, strategy_.label, role, n);
  ctx_.metrics->setRunning(exp, strategy_.label, !stop_sent_, now());
  if (chaos_controller) {
    for (auto kind : chaos::kAllFaultKinds)
      ctx_.metrics->setFaultsActive(exp, strategy_.label, chaos::faultKindName(kind), chaos_controller->activeFaults(kind));
    ctx_.metrics->setFaultLeaks(exp, strategy_.label, chaos_controller->leakCount());
  }
}

int64_t Supervisor::totalWorkerSteps() const { return collectStats("worker", workers_).steps; }

int Supervisor::aliveCount() const {
  int n = 0;
  for (const auto& name : names_) n += launcher_->running(name) ? 1 : 0;
  return n;
}

Result<StrategyResult> Supervisor::run() {
  result_.label = strategy_.label;
  result_.kind = spec::name(strategy_.kind);
  result_.recipe = strategy_.recipe;
  result_.tta_resolution_s = spec_.training.eval_interval_s;  // snapshots are taken (or ticked) that often
  CHAOSBED_RETURN_IF_ERROR(prepare());
  CHAOSBED_RETURN_IF_ERROR(launchAll());
  CHAOSBED_RETURN_IF_ERROR(waitReady(names_, deadlineIn(120s)));

  // Chaos: the run's plan, executed against this strategy's nodes from the start of training.
  std::unique_ptr<chaos::ActuatorSet> actuators;
  std::vector<std::unique_ptr<ObservedActuator>> observers;
  std::unique_ptr<chaos::Controller> chaos_controller;
  if (ctx_.plan && !ctx_.plan->actions.empty()) {
    chaos::ActuatorSet::Options ao;
    ao.pause_mode = spec_.chaos.parsed.pause_mode;
    ao.link_control = this;
    actuators = std::make_unique<chaos::ActuatorSet>(*this, ao);
    auto map = actuators->map();
    for (auto& [kind, actuator] : map) {
      observers.push_back(std::make_unique<ObservedActuator>(actuator, this));
      actuator = observers.back().get();
    }
    chaos::ControllerOptions co;
    co.events = ctx_.events;
    co.strategy = strategy_.label;
    co.state_dir = ctx_.claim ? ctx_.claim->stateDir(strategy_.label) : dir_ + "/chaos-state";
    co.agent_binary = "/proc/self/exe";
    chaos_controller = std::make_unique<chaos::Controller>(*ctx_.plan, *this, map, co);
    CHAOSBED_RETURN_IF_ERROR(chaos_controller->checkAvailable());
  }

  {
    MutexLock lock(mu_);
    execute(supervision_->start());
  }
  // Every series exists, at zero, before the first step: Prometheus's rate() takes a counter's first scraped
  // value as its start, so a counter first seen after most of a short run would show no progress at all.
  exportMetrics(chaos_controller.get());
  if (ctx_.metrics && ctx_.await_scrape) awaitScrape(*ctx_.metrics, "before " + strategy_.label + " starts");
  start_ns_ = realtimeNs();
  CHAOSBED_RETURN_IF_ERROR(ctx_.store->set(keys_.start(), std::to_string(start_ns_)));
  if (ctx_.events) (void)ctx_.events->append({{"type", "run.start"}, {"strategy", strategy_.label}, {"start_ns", start_ns_}});
  if (chaos_controller) CHAOSBED_RETURN_IF_ERROR(chaos_controller->start());

  const double time_limit = spec_.training.time_limit_s;
  auto last_progress = SteadyClock::now();
  int64_t last_steps = 0;
  double last_progress_t = 0;
  double last_advance_t = 0;  // when the workers' step count last grew
  std::optional<SteadyClock::time_point> stopped_at;
  for (;;) {
    handleExits();
    checkReplacements();
    readEvents();
    checkLiveness();
    {
      MutexLock lock(mu_);
      execute(supervision_->onTick(now()));
    }
    const double t = now();
    if (ctx_.interrupted && ctx_.interrupted->load()) requestStop("interrupted");
    if (t >= time_limit) requestStop("time_limit");
    std::set<int> running_workers;
    for (int i = 0; i < workers_; ++i)
      if (launcher_->running(nodeName("worker", i))) running_workers.insert(i);
    const bool any_worker = !running_workers.empty();
    if (SteadyClock::now() - last_progress >= 500ms) {
      const NodeStats w = collectStats("worker", workers_);
      step_samples_.emplace_back(t, w.steps);
      // Progress triggers: each node's own steps and epoch (a PS server's steps are its applied rounds).
      if (chaos_controller)
        for (const std::string& name : names_) {
          const NodeStats n = nodeStats(name);
          chaos_controller->notify(name, n.steps, n.epoch, /*for_any=*/name.rfind("worker-", 0) == 0);
        }
      // Asynchronous training goes on without a lost worker: it has recovered at its next step. Synchronous
      // training recovers when a worker says so (the "recovered" event after its first step past the fault).
      if (w.steps > last_steps) {
        MutexLock lock(mu_);
        execute(supervision_->onProgress(w.steps, t));
        last_advance_t = t;
      } else if (!stop_sent_) {
        result_.longest_stall_seconds = std::max(result_.longest_stall_seconds, t - last_advance_t);
      }
      if (ctx_.on_progress) {
        Progress p;
        p.label = strategy_.label;
        p.elapsed_s = t;
        if (!result_.timeline.empty()) p.accuracy = result_.timeline.back().accuracy;
        p.steps_per_s = t > last_progress_t ? double(w.steps - last_steps) / (t - last_progress_t) : 0;
        p.alive = aliveCount();
        p.nodes = int(names_.size());
        p.faults = chaos_controller ? int(chaos_controller->appliedCount()) : 0;
        ctx_.on_progress(p);
      }
      exportMetrics(chaos_controller.get());
      last_steps = w.steps;
      last_progress_t = t;
      last_progress = SteadyClock::now();
    }
    if (!any_worker && !stop_sent_) {
      std::optional<std::string> ended;
      {
        MutexLock lock(mu_);
        ended = supervision_->workersEnded(running_workers);
      }
      if (ended) requestStop(*ended);
    }
    if (stop_sent_) {
      if (!stopped_at) {
        stopped_at = SteadyClock::now();
        // Measuring is over: heal every fault now, so that a frozen node can finish its step and exit
        // instead of holding the drain for kDrainS.
        if (chaos_controller)
          if (Status s = chaos_controller->stop(); !s.isOk()) LOG(WARNING) << "chaos: " << s.toString();
      }
      if (!any_worker || SteadyClock::now() - *stopped_at > std::chrono::duration<double>(kDrainS)) break;
    }
    std::this_thread::sleep_for(kTick);
  }
  if (chaos_controller) {
    if (Status s = chaos_controller->stop(); !s.isOk()) LOG(WARNING) << "chaos: " << s.toString();  // no-op if stopped
    result_.faults_applied = int(chaos_controller->appliedCount());
    result_.chaos_leaks = chaos_controller->leakCount();
  }
  // Let the evaluator finish the snapshots it holds, then end every node.
  (void)launcher_->waitExit(nodeName("evaluator", 0), deadlineIn(10s));
  (void)launcher_->stopAll(3000ms);
  readEvents();
  result_.workers = collectStats("worker", workers_);
  result_.servers = collectStats("ps", servers_);
  accountingResidual();
  {
    MutexLock lock(exits_mu_);
    result_.fault_episodes = faultEpisodes(fault_starts_, step_samples_);
  }
  for (const FaultEpisode& e : result_.fault_episodes)
    if (ctx_.events) {
      nlohmann::json ev = e.toJson();
      ev["type"] = "fault.episode";
      ev["strategy"] = strategy_.label;
      (void)ctx_.events->append(ev);
    }
  if (result_.wall_seconds <= 0) result_.wall_seconds = now();
  // A run that ends within a progress period of an async worker's loss: the survivors' steps since count.
  {
    MutexLock lock(mu_);
    execute(supervision_->onProgress(result_.workers.steps, result_.wall_seconds));
    result_.failures = supervision_->failures();
  }
  exportMetrics(chaos_controller.get());  // fault gauges too: every fault has been reverted by now
  return result_;
}

}  // namespace

bool awaitScrape(MetricsExporter& metrics, const std::string& what) {
  // A scraper whose interval is known comes within about one interval; one not seen yet gets the limit.
  auto limit = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(kAwaitScrapeLimit));
  if (auto interval = metrics.scrapeInterval())
    limit = std::min(limit, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(2 * *interval + 1)));
  LOG(INFO) << "metrics: waiting for a scrape of " << metrics.address() << " " << what;
  if (metrics.awaitScrape(deadlineIn(limit))) return true;
  LOG(WARNING) << "metrics: no scrape of " << metrics.address() << " within "
               << std::chrono::duration<double>(limit).count() << " s " << what << " (metrics.await_scrape)";
  return false;
}

Result<StrategyResult> runStrategy(const RunContext& ctx, const spec::StrategySpec& strategy) {
  Supervisor supervisor(ctx, strategy);
  return supervisor.run();
}

}  // namespace chaosbed::run
