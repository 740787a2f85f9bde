#include "experiments/run/strategy_run.h"

#include <glog/logging.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "core/launcher/launcher.h"
#include "core/model/emulation.h"
#include "experiments/run/node_config.h"
#include "experiments/run/results.h"
#include "experiments/run/supervisor.h"

namespace chaosbed::run::detail {

namespace fs = std::filesystem;

namespace {

// This process's user + system CPU seconds (every thread), and its peak resident set.
struct ProcessUsage {
  double cpu_seconds = 0;
  int64_t peak_rss_bytes = 0;
};

ProcessUsage processUsage() {
  rusage u{};
  if (::getrusage(RUSAGE_SELF, &u) != 0) return {};
  auto seconds = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) * 1e-6; };
  return {seconds(u.ru_utime) + seconds(u.ru_stime), int64_t(u.ru_maxrss) * 1024};
}

}  // namespace

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
  TrainingConfig training = trainingConfig(spec_, strategy_);
  if (!ctx_.data_path.empty()) training.data_path = ctx_.data_path;
  nlohmann::json config = {{"store", ctx_.store_address},
                           {"secret_file", ctx_.secret_file},
                           {"prefix", prefix_},
                           {"workers", workers_},
                           {"servers", servers_},
                           {"training", training.toJson()},
                           {"strategy", strategyOptions(spec_, strategy_).toJson()},
                           {"checkpoint_dir", dir_ + "/checkpoints"},
                           {"connect_timeout_s", 60.0},
                           {"simulate", spec_.cluster.simulate}};
  if (ctx_.agents != nullptr) {
    // Each node binds where its host's agent reaches the store from (on one machine, loopback: nothing to
    // say).
    std::map<std::string, std::string> devices;
    for (const std::string& name : names_) {
      const chaos::HostAgents::Host& host = ctx_.agents->host(hostOf(name));
      result_.host_addresses[name] = host.address;
      if (!host.address.empty() && !net::isLoopbackHost(host.address)) devices[name] = host.device;
    }
    config["host_addresses"] = result_.host_addresses;
    config["net_devices"] = devices;
  }
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(dir_ + "/node-config.json", config.dump(2), 0600));

  const std::string cgroup_group = (ctx_.claim ? ctx_.claim->owner() : ctx_.run_id) + "-" + strategy_.label;
  if (ctx_.agents != nullptr) {
    // Each host's agent starts, faults and stops the nodes placed on it.
    chaos::HostAgents::SessionOptions so;
    so.log_dir = dir_ + "/logs";
    so.cgroup_group = cgroup_group;
    so.pause_mode = spec_.chaos.parsed.pause_mode;
    so.host_of = [this](const std::string& node) { return hostOf(node); };
    so.on_exit = [this](const ExitInfo& info) { onExit(info); };
    CHAOSBED_ASSIGN_OR_RETURN(auto nodes, ctx_.agents->session(std::move(so)));
    agent_nodes_ = nodes.get();
    launcher_ = std::move(nodes);
    return Status::ok();
  }
  LauncherOptions lo;
  lo.log_dir = dir_ + "/logs";
  lo.cgroup_group = cgroup_group;
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

void Supervisor::record(nlohmann::json event) {
  if (!ctx_.events) return;
  event["strategy"] = strategy_.label;
  ctx_.events->record(std::move(event));
}

Status Supervisor::restartLocked(const std::string& node) {
  auto pid = launcher_->restart(node, deadlineIn(5s));
  if (!pid.isOk() && launcher_->hostLost(node) && !host_lost_)
    host_lost_ = node + " cannot be restarted: " + pid.status().message();
  if (!pid.isOk()) return pid.status();
  const int incarnation = launcher_->incarnation(node) - 1;  // the control plane counts predecessors
  if (auto id = control::NodeId::parse(node)) supervision_->onRestarted(*id, incarnation);
  record(events::toJson(events::NodeRestarted{.node = node, .incarnation = incarnation, .t = now()}));
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
        record(events::toJson(events::MembershipPublished{.membership = m, .t = now()}));
        break;
      }
      case control::Action::Kind::kRecovery:
        recordRecovery(a.seconds, a.cause);
        record(events::toJson(events::RecoveryBooked{.seconds = a.seconds, .cause = a.cause, .t = now()}));
        break;
    }
  }
}

void Supervisor::handleExits() {
  std::deque<ExitInfo> exits;
  {
    MutexLock lock(exits_mu_);
    exits.swap(exits_);
    for (const ExitInfo& e : exits) handling_.insert(e.name);
  }
  // The workers' steps when these exits were taken up: one read of every worker's stats for all of them (a
  // read per exit made a wave of 16 exits at 256 nodes hold the loop for half a second).
  std::optional<int64_t> steps_now;
  for (const ExitInfo& e : exits) {
    auto id = control::NodeId::parse(e.name);
    if (!id) {  // not a node of ours (the launcher only starts names from names_)
      MutexLock lock(exits_mu_);
      handling_.erase(handling_.find(e.name));
      continue;
    }
    detector_.forget(*id);
    // When the launcher reaped it, in run time: this loop may take the exit up a while later (it was seen
    // 256 ms late once, behind a busy supervisor), and recovery and detection count from the exit itself.
    const double exited_at =
        std::max(0.0, now() - std::chrono::duration<double>(SteadyClock::now() - e.at).count());
    control::NodeExit exit;
    exit.node = *id;
    exit.requested = e.requested;
    exit.clean = !e.signaled && e.code == 0;
    exit.lifetime_s = std::chrono::duration<double>(e.lifetime).count();
    bool fenced = false;
    {
      MutexLock lock(exits_mu_);
      // A fault that ends a node hit this very process (not a predecessor or a successor).
      exit.by_chaos = chaos_killed_.erase({e.name, e.incarnation}) > 0;
      if (!e.requested) {
        fenced = fenced_.erase(e.name) > 0;
        markDetected(e.name, exited_at, /*declared=*/false);
        vanished_.erase(e.name);
      }
    }
    if (!steps_now) steps_now = totalWorkerSteps();
    const int64_t steps = *steps_now;
    MutexLock lock(mu_);
    const double t = exited_at;
    auto actions = supervision_->onExit(exit, t, steps);
    if (supervision_->isDown(*id) && !e.requested) {  // a failure (not finished, not stopped on purpose)
      LOG(INFO) << strategy_.label << ": " << e.name << " " << e.describe() << " at " << t << " s";
      if (!exit.by_chaos && !exit.clean && !fenced) {
        LOG(WARNING) << strategy_.label << ": " << e.name << " crashed (" << e.describe() << ") at " << t
                     << " s: no fault of the plan did this; its log is " << e.name << ".log";
        // "#n" as the control plane counts incarnations (predecessors), as accounting_residual_node does.
        result_.crashes.push_back({e.name + "#" + std::to_string(e.incarnation - 1), e.describe(), t});
      }
      record(events::toJson(events::NodeExited{.node = e.name, .how = e.describe(), .by_chaos = exit.by_chaos, .t = t}));
      execute(actions);
    }
    // Taken up: a replacement that waited for it (a vanished node's, or one asked for while this exit was
    // pending: Supervisor::replace) starts now, after it.
    bool replace_now = false;
    {
      MutexLock exits_lock(exits_mu_);
      handling_.erase(handling_.find(e.name));
      // A node stopped on purpose is not replaced, and the request is spent.
      replace_now = replace_when_lost_.erase(e.name) > 0 && !e.requested;
    }
    if (replace_now)
      if (Status s = restartLocked(e.name); !s.isOk()) LOG(ERROR) << "replacing " << e.name << ": " << s.toString();
  }
}

void Supervisor::checkReplacements() {
  MutexLock lock(mu_);
  for (const control::NodeId& node : supervision_->restartsDue(now()))
    if (!launcher_->running(node.name()))
      if (Status s = restartLocked(node.name()); !s.isOk()) LOG(ERROR) << "restarting " << node.name() << ": " << s.toString();
  // Every awaited incarnation's ready key in one request (a request per node held the loop for over half a
  // second while 16 replacements were awaited at 256 nodes).
  std::vector<control::NodeId> awaited;
  std::vector<std::string> keys;
  for (const std::string& name : names_) {
    auto id = control::NodeId::parse(name);
    auto inc = id ? supervision_->awaitedIncarnation(*id) : std::nullopt;
    if (!inc) continue;
    awaited.push_back(*id);
    keys.push_back(keys_.ready(name, *inc));
  }
  if (keys.empty()) return;
  auto values = ctx_.store->peek(keys);
  if (!values.isOk()) return;
  std::vector<control::NodeId> ready;
  for (size_t i = 0; i < awaited.size() && i < values->size(); ++i)
    if ((*values)[i].has_value()) ready.push_back(awaited[i]);
  if (!ready.empty()) execute(supervision_->onReady(ready));
}

void Supervisor::requestStop(const std::string& reason) {
  if (stop_sent_) return;
  stop_sent_ = true;
  stopping_ = true;
  result_.stop_reason = reason;
  result_.wall_seconds = now();
  {
    MutexLock lock(mu_);
    supervision_->onStop(result_.wall_seconds);
  }
  (void)ctx_.store->set(keys_.stop(), reason);  // nodes that do not hear it are stopped by the launcher
  record(events::toJson(events::RunStopped{.reason = reason, .t = result_.wall_seconds}));
}

Status Supervisor::describeStrategy() {
  result_.label = strategy_.label;
  result_.kind = spec::name(strategy_.kind);
  result_.recipe = strategy_.recipe;
  if (spec_.workload.emulate.enabled()) {
    auto plan = model::planEmulation(spec_.workload.emulate, 0);  // the ratio does not depend on the padding
    if (!plan.isOk()) return plan.status().withContext("workload.emulate");
    result_.target_comm_compute_ratio =
        plan->targetRatio(strategy_.kind == spec::StrategyKind::kMirrored, spec_.cluster.workers);
  }
  return Status::ok();
}

Result<Supervisor::ArmedChaos> Supervisor::armChaos() {
  ArmedChaos armed;
  if (!ctx_.plan || ctx_.plan->actions.empty()) return armed;
  chaos::ActuatorSet::Options ao;
  ao.pause_mode = spec_.chaos.parsed.pause_mode;
  ao.link_control = this;
  ao.hosts = ctx_.hosts;
  armed.actuators = std::make_unique<chaos::ActuatorSet>(*this, ao);
  auto map = armed.actuators->map();
  if (agent_nodes_ != nullptr)  // process faults are the agents' of the nodes' hosts; link faults stay here
    for (chaos::FaultKind k : {chaos::FaultKind::kKill, chaos::FaultKind::kPreempt, chaos::FaultKind::kPause,
                               chaos::FaultKind::kVanish, chaos::FaultKind::kSlow})
      map[k] = agent_nodes_->actuator();
  for (auto& [kind, actuator] : map) {
    armed.observers.push_back(std::make_unique<ObservedActuator>(actuator, this));
    actuator = armed.observers.back().get();
  }
  chaos::ControllerOptions co;
  co.events = ctx_.events;
  co.strategy = strategy_.label;
  co.state_dir = ctx_.claim ? ctx_.claim->stateDir(strategy_.label) : dir_ + "/chaos-state";
  co.agent_binary = "/proc/self/exe";
  armed.controller = std::make_unique<chaos::Controller>(*ctx_.plan, *this, map, co);
  CHAOSBED_RETURN_IF_ERROR(armed.controller->checkAvailable());
  return armed;
}

Status Supervisor::startTraining(chaos::Controller* controller) {
  {
    MutexLock lock(mu_);
    execute(supervision_->start());
  }
  // Every series exists, at zero, before the first step: Prometheus's rate() takes a counter's first scraped
  // value as its start, so a counter first seen after most of a short run would show no progress at all.
  exportMetrics(controller, allNodeStats());
  if (ctx_.metrics && ctx_.await_scrape) awaitScrape(*ctx_.metrics, "before " + strategy_.label + " starts");
  start_ns_ = realtimeNs();
  controller_cpu_at_start_ = processUsage().cpu_seconds;
  CHAOSBED_RETURN_IF_ERROR(ctx_.store->set(keys_.start(), std::to_string(start_ns_)));
  record(events::toJson(events::RunStarted{.start_ns = start_ns_}));
  if (controller) CHAOSBED_RETURN_IF_ERROR(controller->start());
  return Status::ok();
}

void Supervisor::superviseTraining(chaos::Controller* controller) {
  last_progress_ = SteadyClock::now();
  polling_events_ = true;
  for (;;) {
    const auto pass_start = SteadyClock::now();
    handleExits();
    checkReplacements();
    readEvents();
    checkLiveness();
    {
      MutexLock lock(mu_);
      execute(supervision_->onTick(now()));
    }
    if (polling_events_)
      result_.control_plane.supervision_pass_s.push_back(
          std::chrono::duration<double>(SteadyClock::now() - pass_start).count());
    const double t = now();
    if (ctx_.interrupted && ctx_.interrupted->load()) requestStop("interrupted");
    if (t >= spec_.training.time_limit_s) requestStop("time_limit");
    if (std::optional<std::string> lost = [&] {
          MutexLock lock(mu_);
          return host_lost_;
        }();
        lost && !stop_sent_) {
      LOG(ERROR) << strategy_.label << ": " << *lost << "; stopping the run";
      requestStop("host_lost: " + *lost);
    }
    std::set<int> running_workers;
    for (int i = 0; i < workers_; ++i)
      if (launcher_->running(nodeName("worker", i))) running_workers.insert(i);
    if (SteadyClock::now() - last_progress_ >= 500ms) sampleProgress(controller, t);
    if (running_workers.empty() && !stop_sent_) {
      std::optional<std::string> ended;
      {
        MutexLock lock(mu_);
        ended = supervision_->workersEnded(running_workers);
      }
      if (ended) requestStop(*ended);
    }
    if (stop_sent_ && drained(controller, !running_workers.empty())) break;
    std::this_thread::sleep_for(kTick);
  }
  polling_events_ = false;  // events read from here on waited for the nodes to stop
}

void Supervisor::sampleProgress(chaos::Controller* controller, double t) {
  const StatsByNode stats = allNodeStats();
  const NodeStats w = roleTotal(stats, "worker", workers_);
  step_samples_.emplace_back(t, w.steps);
  observations_.push_back({t, w.samples, aliveCount()});
  // Progress triggers: each node's own steps and epoch (a PS server's steps are its applied rounds).
  const bool sample_nodes = t - last_node_sample_t_ >= kNodeSampleInterval;
  for (const auto& [name, n] : stats) {
    if (controller) controller->notify(name, n.steps, n.epoch, /*for_any=*/name.rfind("worker-", 0) == 0);
    if (sample_nodes) result_.node_samples.push_back({t, name, n.wall_seconds, n.seconds});
  }
  if (sample_nodes) last_node_sample_t_ = t;
  // Asynchronous training goes on without a lost worker: it has recovered at its next step. Synchronous
  // training recovers when a worker says so (the "recovered" event after its first step past the fault).
  if (w.steps > last_steps_) {
    MutexLock lock(mu_);
    execute(supervision_->onProgress(w.steps, t));
    last_advance_t_ = t;
  } else if (!stop_sent_) {
    result_.longest_stall_seconds = std::max(result_.longest_stall_seconds, t - last_advance_t_);
  }
  if (ctx_.on_progress) publishProgress(controller, t, w.steps);
  exportMetrics(controller, stats);
  last_steps_ = w.steps;
  last_progress_ = SteadyClock::now();
}

void Supervisor::publishProgress(const chaos::Controller* controller, double t, int64_t steps) {
  Progress p;
  p.label = strategy_.label;
  p.elapsed_s = t;
  p.time_limit_s = spec_.training.time_limit_s;
  if (!result_.timeline.empty()) {
    p.accuracy = result_.timeline.back().accuracy;
    p.accuracy_at_s = result_.timeline.back().time_s;
  }
  p.steps = steps;
  p.alive = aliveCount();
  p.nodes = int(names_.size());
  p.faults = controller ? int(controller->appliedCount()) : 0;
  if (controller)
    for (const chaos::FaultKindTraits& kind : chaos::faultKinds()) p.faults_active += controller->activeFaults(kind.kind);
  ctx_.on_progress(p);
}

bool Supervisor::drained(chaos::Controller* controller, bool any_worker) {
  if (!stopped_at_) {
    stopped_at_ = SteadyClock::now();
    const ProcessUsage usage = processUsage();
    result_.control_plane.cpu_seconds = usage.cpu_seconds - controller_cpu_at_start_;
    result_.control_plane.wall_seconds = now();
    result_.control_plane.peak_rss_bytes = usage.peak_rss_bytes;
    // Measuring is over: heal every fault now, so that a frozen node can finish its step and exit instead
    // of holding the drain for kDrainS.
    if (controller)
      if (Status s = controller->stop(); !s.isOk()) LOG(WARNING) << "chaos: " << s.toString();
  }
  return !any_worker || SteadyClock::now() - *stopped_at_ > std::chrono::duration<double>(kDrainS);
}

void Supervisor::finishRun(chaos::Controller* controller) {
  if (controller) {
    if (Status s = controller->stop(); !s.isOk()) LOG(WARNING) << "chaos: " << s.toString();  // no-op if stopped
    result_.faults_applied = int(controller->appliedCount());
    result_.chaos_leaks = controller->leakCount();
  }
  // Let the evaluator finish the snapshots it holds, then end every node.
  (void)launcher_->waitExit(nodeName("evaluator", 0), deadlineIn(10s));  // stopped next if it is not done
  if (Status s = launcher_->stopAll(3000ms); !s.isOk()) LOG(WARNING) << "stopping the nodes: " << s.toString();
  readEvents();
  // Every node has stopped: these are the final stats.
  const StatsByNode final_stats = allNodeStats();
  result_.workers = roleTotal(final_stats, "worker", workers_);
  result_.servers = roleTotal(final_stats, "ps", servers_);
  result_.workers.samples_lost += total_loss_samples_;
  result_.bottleneck = diagnoseBottleneck(result_.kind, final_stats);
  const double t_end = std::max(now(), last_node_sample_t_);
  for (const auto& [name, n] : final_stats) result_.node_samples.push_back({t_end, name, n.wall_seconds, n.seconds});
  accountingResidual();
  {
    MutexLock lock(exits_mu_);
    result_.fault_episodes = faultEpisodes(fault_starts_, step_samples_);
  }
  for (const FaultEpisode& e : result_.fault_episodes) {
    nlohmann::json ev = e.toJson();  // summary.json's fault_episodes entry, as an event
    ev["type"] = "fault.episode";
    record(std::move(ev));
  }
  if (result_.wall_seconds <= 0) result_.wall_seconds = now();
  if (!result_.tta_sustained_seconds) result_.tta_resolution_s = medianEvalGap(result_.timeline);
  // A run that ends within a progress period of an async worker's loss: the survivors' steps since count.
  {
    MutexLock lock(mu_);
    execute(supervision_->onProgress(result_.workers.steps, result_.wall_seconds));
    result_.failures = supervision_->failures();
  }
  exportMetrics(controller, final_stats);  // fault gauges too: every fault has been reverted by now
}

Result<StrategyResult> Supervisor::run() {
  CHAOSBED_RETURN_IF_ERROR(describeStrategy());
  CHAOSBED_RETURN_IF_ERROR(prepare());
  CHAOSBED_RETURN_IF_ERROR(launchAll());
  CHAOSBED_RETURN_IF_ERROR(waitReady(names_, deadlineIn(120s)));
  // Chaos: the run's plan, executed against this strategy's nodes from the start of training.
  CHAOSBED_ASSIGN_OR_RETURN(ArmedChaos armed, armChaos());
  CHAOSBED_RETURN_IF_ERROR(startTraining(armed.controller.get()));
  superviseTraining(armed.controller.get());
  finishRun(armed.controller.get());
  return result_;
}

}  // namespace chaosbed::run::detail

namespace chaosbed::run {

double medianEvalGap(const std::vector<EvalPoint>& timeline) {
  std::vector<double> times;
  for (const EvalPoint& p : timeline)
    if (!p.refined) times.push_back(p.time_s);
  std::sort(times.begin(), times.end());
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  if (gaps.empty()) return 0;
  std::nth_element(gaps.begin(), gaps.begin() + std::ptrdiff_t(gaps.size() / 2), gaps.end());
  return gaps[gaps.size() / 2];
}

Observation observationAt(const std::vector<Observation>& history, const Observation& latest, double t) {
  const auto after = std::upper_bound(history.begin(), history.end(), t,
                                      [](double at, const Observation& o) { return at < o.t; });
  // The readings on either side of t: the history's, or past its end the freshest one.
  const Observation* next = after != history.end() ? &*after : latest.t > t ? &latest : nullptr;
  if (next == nullptr) {
    const Observation& last = history.empty() || latest.t >= history.back().t ? latest : history.back();
    return {t, last.samples, last.alive};
  }
  const Observation before = after != history.begin() ? *(after - 1) : Observation{0, 0, next->alive};
  const double span = next->t - before.t;
  const double share = span > 0 ? (t - before.t) / span : 1.0;
  return {t, before.samples + int64_t(std::llround(share * double(next->samples - before.samples))), before.alive};
}

}  // namespace chaosbed::run

namespace chaosbed::run {

using detail::Supervisor;

bool awaitScrape(MetricsExporter& metrics, const std::string& what) {
  // A scraper whose interval is known comes within about one interval, but a scrape that outlasts its timeout
  // does not count (the scraper dropped it): allow a few. One not seen yet gets the limit.
  auto limit = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(kAwaitScrapeLimit));
  if (auto interval = metrics.scrapeInterval())
    limit = std::min(limit, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(4 * *interval + 1)));
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
