#include "chaos/controller.h"

#include <poll.h>
#include <glog/logging.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/runtime/events.h"

namespace chaosbed::chaos {

ActuatorSet::ActuatorSet(Cluster& cluster, const Options& options)
    : signal_(std::make_unique<SignalActuator>(cluster)),
      pause_(std::make_unique<PauseActuator>(cluster, options.pause_mode)),
      cpu_(std::make_unique<CpuQuotaActuator>(cluster)),
      shaper_(std::make_unique<ShaperLinkActuator>(options.link_control)),
      transport_errors_(std::make_unique<TransportErrorActuator>(options.link_control)) {
  if (options.hosts != nullptr) host_link_ = std::make_unique<HostLinkActuator>(cluster, *options.hosts, *shaper_);
}

std::map<FaultKind, Actuator*> ActuatorSet::map() const {
  std::map<FaultKind, Actuator*> m;
  for (const FaultKindTraits& kind : faultKinds()) {
    switch (kind.actuator) {
      case ActuatorKind::kSignal: m[kind.kind] = signal_.get(); break;
      case ActuatorKind::kFreeze: m[kind.kind] = pause_.get(); break;
      case ActuatorKind::kCpuQuota: m[kind.kind] = cpu_.get(); break;
      case ActuatorKind::kLink: m[kind.kind] = host_link_ ? static_cast<Actuator*>(host_link_.get()) : shaper_.get(); break;
      case ActuatorKind::kTransportErrors: m[kind.kind] = transport_errors_.get(); break;
    }
  }
  return m;
}

Controller::Controller(Plan plan, Cluster& cluster, std::map<FaultKind, Actuator*> actuators, ControllerOptions options)
    : plan_(std::move(plan)),
      cluster_(cluster),
      actuators_(std::move(actuators)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &realClock()) {}

Controller::~Controller() {
  if (Status s = stop(); !s.isOk()) LOG(WARNING) << "chaos: " << s.toString();
}

Status Controller::checkAvailable() const {
  std::string problems;
  std::set<std::string> seen;
  for (const Action& a : plan_.actions) {
    if (a.type != ActionType::kApply) continue;
    const Fault& f = plan_.fault(a.fault_id);
    auto it = actuators_.find(f.kind);
    Status s = it == actuators_.end() || it->second == nullptr
                   ? Status::unavailable(std::string("no actuator for ") + faultKindName(f.kind) + " faults")
                   : it->second->checkAvailable(f, a.node);
    if (!s.isOk() && seen.insert(s.message()).second) problems += "\n  fault '" + f.name + "': " + s.message();
  }
  if (problems.empty()) return Status::ok();
  return Status::unavailable("chaos: refusing to start: some planned faults cannot be injected here:" + problems);
}

void Controller::log(nlohmann::json event) {
  if (!options_.events) return;
  if (!options_.strategy.empty()) event["strategy"] = options_.strategy;
  options_.events->record(event);
}

Status Controller::persistLocked() {
  if (options_.state_dir.empty()) return Status::ok();
  state_.entries.clear();
  for (const Key& k : apply_order_) {
    auto it = applied_.find(k);
    if (it != applied_.end() && !it->second.heal.empty()) state_.entries.push_back(it->second);
  }
  return writeState(options_.state_dir, state_);
}

// Where an entry was removed: a file not rewritten still lists a fault already undone, and a heal that
// undoes it again changes nothing; worth a line in the log, not a failure.
void Controller::persistOrWarnLocked() {
  if (Status s = persistLocked(); !s.isOk()) LOG(WARNING) << "chaos: state file not rewritten: " << s.toString();
}

Status Controller::start() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (started_) return Status::internal("chaos controller started twice");
  }
  CHAOSBED_RETURN_IF_ERROR(checkAvailable());
  if (!options_.state_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.state_dir, ec);
    if (ec) return Status::ioError(options_.state_dir + ": cannot create the chaos state directory: " + ec.message());
    Result<int> healed = cleanupStale(options_.state_dir, options_.events);
    if (!healed.isOk()) return healed.status().withContext("chaos: healing what the previous run left");
    state_ = ChaosState{};
    state_.controller_pid = ::getpid();
    state_.events_path = options_.events ? options_.events->path() : "";
    CHAOSBED_RETURN_IF_ERROR(writeState(options_.state_dir, state_));
    CHAOSBED_RETURN_IF_ERROR(renewLease(options_.state_dir, realClock().monotonicNs()));
    if (!options_.agent_binary.empty()) {
      CHAOSBED_ASSIGN_OR_RETURN(agent_pid_, spawnAgent(options_.agent_binary, options_.state_dir,
                                                       options_.lease_timeout_s, &agent_fd_));
      state_.agent_pid = agent_pid_;
      CHAOSBED_RETURN_IF_ERROR(writeState(options_.state_dir, state_));
    }
    lease_thread_ = std::thread([this] { leaseLoop(); });
  }
  if (options_.events) {
    for (const Action& a : plan_.actions) {
      const Fault& f = plan_.fault(a.fault_id);
      events::ChaosAction ev{.type = "chaos.planned", .fault_id = f.id, .name = f.name,
                             .kind = faultKindName(f.kind), .node = a.node, .action = actionTypeName(a.type)};
      if (a.trigger) {
        ev.trigger = describeTrigger(*a.trigger);
        ev.offset_s = a.at_s;
      } else {
        ev.planned_s = a.at_s;
      }
      log(events::toJson(ev));
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  start_ns_ = clock_->monotonicNs();
  for (const Action& a : plan_.actions) {
    if (a.trigger) {
      const std::string key = describeTrigger(*a.trigger);
      triggered_[key].push_back(a);
      triggers_[key] = *a.trigger;
    } else {
      queue_.emplace(std::make_pair(start_ns_ + static_cast<int64_t>(std::llround(a.at_s * 1e9)), seq_++), a);
    }
  }
  clock_sub_ = clock_->subscribe([this] {
    std::lock_guard<std::mutex> g(mu_);
    cv_.notify_all();
  });
  started_ = true;
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

void Controller::adoptAgentHealLocked() {
  if (options_.state_dir.empty()) return;
  // An agent that heals marks the state finished, writes kHealedFile and removes the lease: any of the three
  // says so (a renewal racing with the heal can restore the lease file, never the other two).
  const std::string path = options_.state_dir + "/" + kHealedFile;
  Result<std::optional<ChaosState>> healed = readStateFile(path);
  Result<std::optional<ChaosState>> state = readState(options_.state_dir);
  Result<int64_t> lease = readLease(options_.state_dir);
  const bool lapsed = (healed.isOk() && *healed) || (state.isOk() && *state && (*state)->finished) ||
                      (!lease.isOk() && lease.status().code() == StatusCode::kNotFound);
  if (!lapsed) return;
  std::vector<StateEntry> entries;
  if (healed.isOk() && *healed) entries = (*healed)->entries;
  int adopted = 0;
  for (const StateEntry& e : entries) {
    const Key key{e.fault_id, e.node};
    if (!applied_.erase(key)) continue;  // reverted meanwhile
    std::erase(apply_order_, key);
    if (active_keys_.erase(key)) --active_[plan_.fault(e.fault_id).kind];
    ++adopted;
    log(events::toJson(events::ChaosAction{.type = "chaos.reverted", .fault_id = e.fault_id, .name = e.name,
                                           .kind = e.kind, .node = e.node, .action = "revert",
                                           .by = "agent: lease lapsed", .mono_ns = clock_->monotonicNs(),
                                           .wall_ns = clock_->wallNs()}));
  }
  LOG(WARNING) << "chaos: the lease lapsed (this process stalled) and the agent healed " << adopted
               << " fault(s); they count as reverted, and a new agent guards what follows";
  log(events::toJson(
      events::ChaosLeaseLapsed{.healed = adopted, .mono_ns = clock_->monotonicNs(), .wall_ns = clock_->wallNs()}));
  persistOrWarnLocked();  // unfinished again, listing what is still applied
  (void)renewLease(options_.state_dir, realClock().monotonicNs());  // retried each interval; a lapse heals
  ::unlink(path.c_str());
}

void Controller::leaseLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!lease_stop_) {
    lease_cv_.wait_for(l, std::chrono::duration<double>(options_.lease_interval_s));
    if (lease_stop_) break;
    adoptAgentHealLocked();  // before a new agent starts: it must find an unfinished state to guard
    l.unlock();
    (void)renewLease(options_.state_dir, realClock().monotonicNs());  // retried each interval; a lapse heals
    keepAgent();
    l.lock();
  }
}

void Controller::keepAgent() {
  const pid_t pid = agent_pid_.load();
  if (pid <= 0 || ::waitpid(pid, nullptr, WNOHANG) != pid) return;  // none, or still running
  // The agent died (killed, or it healed after a lapsed lease and exited): start another guardian.
  if (agent_fd_ >= 0) ::close(agent_fd_);
  agent_fd_ = -1;
  int fd = -1;
  auto spawned = spawnAgent(options_.agent_binary, options_.state_dir, options_.lease_timeout_s, &fd);
  std::lock_guard<std::mutex> l(mu_);
  events::ChaosAgentReplaced ev{.old_pid = pid, .mono_ns = clock_->monotonicNs(), .wall_ns = clock_->wallNs()};
  if (!spawned.isOk()) {
    agent_pid_ = 0;
    ev.error = spawned.status().toString();
    log(events::toJson(ev));
    return;
  }
  agent_pid_ = *spawned;
  agent_fd_ = fd;
  state_.agent_pid = *spawned;
  ev.pid = *spawned;
  // The event first: whoever sees the new agent in the state file (a heal, a test) and then ends this
  // controller must find the restart recorded.
  log(events::toJson(ev));
  persistOrWarnLocked();
}

void Controller::notify(const std::string& node, int64_t step, int64_t epoch, bool for_any) {
  std::lock_guard<std::mutex> l(mu_);
  if (!started_ || stopping_) return;
  const int64_t now = clock_->monotonicNs();
  for (auto it = triggers_.begin(); it != triggers_.end();) {
    const ProgressTrigger& t = it->second;
    const int64_t reached = t.unit == ProgressTrigger::Unit::kStep ? step : epoch;
    if ((t.node.empty() ? for_any : t.node == node) && reached >= t.value) {
      for (const Action& a : triggered_[it->first])
        queue_.emplace(std::make_pair(now + static_cast<int64_t>(std::llround(a.at_s * 1e9)), seq_++), a);
      triggered_.erase(it->first);
      it = triggers_.erase(it);
      cv_.notify_all();
    } else {
      ++it;
    }
  }
}

void Controller::run() {
  // Injection delay is scheduling delay: on a busy machine the controller must win the CPU when an action is
  // due. Raise this thread's priority when allowed (root); without it the run goes on at normal priority.
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), -10);
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(l);
      continue;
    }
    auto it = queue_.begin();
    const int64_t due = it->first.first;
    if (clock_->monotonicNs() < due) {
      clock_->waitUntil(cv_, l, due);
      continue;
    }
    Action a = it->second;
    queue_.erase(it);
    executing_ = true;
    l.unlock();
    execute(a, due);
    l.lock();
    executing_ = false;
    cv_.notify_all();
  }
}

void Controller::logAction(const char* type, const Action& a, int64_t planned_ns, int64_t done_ns, const Status& s) {
  if (!options_.events) return;
  const Fault& f = plan_.fault(a.fault_id);
  events::ChaosAction ev{.type = type, .fault_id = f.id, .name = f.name, .kind = faultKindName(f.kind),
                         .node = a.node, .action = actionTypeName(a.type)};
  ev.planned_s = static_cast<double>(planned_ns - start_ns_) / 1e9;
  ev.planned_mono_ns = planned_ns;
  ev.delay_ms = static_cast<double>(done_ns - planned_ns) / 1e6;
  if (a.trigger) ev.trigger = describeTrigger(*a.trigger);
  if (a.type == ActionType::kApply) {
    nlohmann::json p = nlohmann::json::object();
    if (f.kind == FaultKind::kSlow) p["cpu_fraction"] = f.params.cpu_fraction;
    if (f.kind == FaultKind::kPreempt) p["grace_s"] = f.params.grace_s;
    if (f.kind == FaultKind::kTransportError) {
      p["error"] = f.params.error;
      p["nth"] = f.params.nth;
      p["count"] = f.params.count;
      p["peers"] = f.peers;
    }
    if (f.kind == FaultKind::kLink) {
      p["bandwidth_mbps"] = f.params.bandwidth_mbps;
      p["latency_ms"] = f.params.latency_ms;
      p["partition"] = f.params.partition;
      p["peers"] = linkPeersOf(f, a.node);
    }
    p["via"] = actuators_.at(f.kind)->via(f);  // who carried it out: "kernel", "shaper", "host-agent", ...
    if (f.duration_s) p["duration_s"] = *f.duration_s;
    ev.params = p;
  }
  if (!s.isOk()) ev.error = s.toString();
  // Timestamps of the action itself, not of the write: the injected clock's monotonic time.
  ev.mono_ns = done_ns;
  ev.wall_ns = clock_->wallNs();
  log(events::toJson(ev));
}

void Controller::execute(const Action& a, int64_t planned_ns) {
  const Fault& f = plan_.fault(a.fault_id);
  Actuator* act = actuators_.at(f.kind);
  const Key key{f.id, a.node};
  switch (a.type) {
    case ActionType::kApply: {
      std::vector<HealRecord> records;
      if (traitsOf(f.kind).reverted_at_stop) {
        Result<std::vector<HealRecord>> r = act->prepare(f, a.node);
        if (!r.isOk()) {
          const bool gone = r.status().code() == StatusCode::kNotFound;
          logAction(gone ? "chaos.skipped" : "chaos.failed", a, planned_ns, clock_->monotonicNs(), r.status());
          if (!gone) {
            std::lock_guard<std::mutex> l(mu_);
            ++failed_count_;
          }
          return;
        }
        records = std::move(r).value();
        std::lock_guard<std::mutex> l(mu_);
        adoptAgentHealLocked();  // a stalled controller learns first what the agent healed
        applied_[key] = StateEntry{f.id, f.name, faultKindName(f.kind), a.node, records};
        apply_order_.push_back(key);
        if (Status s = persistLocked(); !s.isOk()) {
          // Without the record on disk a crash could leak this fault: do not inject it.
          applied_.erase(key);
          apply_order_.pop_back();
          ++failed_count_;
          logAction("chaos.failed", a, planned_ns, clock_->monotonicNs(), s);
          return;
        }
      }
      Status s = act->apply(f, a.node);
      const int64_t done = clock_->monotonicNs();
      {
        std::lock_guard<std::mutex> l(mu_);
        if (s.isOk() || s.code() != StatusCode::kNotFound) delays_.push_back(done - planned_ns);
        if (s.isOk()) {
          ++applied_count_;
          if (traitsOf(f.kind).reverted_at_stop || f.kind == FaultKind::kPreempt) {
            if (active_keys_.insert(key).second) ++active_[f.kind];
          }
        } else if (s.code() == StatusCode::kNotFound) {
          applied_.erase(key);  // the node is not running: nothing was done
          std::erase(apply_order_, key);
          persistOrWarnLocked();
        } else {
          ++failed_count_;  // stays in applied_: revert (or stop) undoes a half-done apply
        }
      }
      logAction(s.isOk() ? "chaos.applied" : s.code() == StatusCode::kNotFound ? "chaos.skipped" : "chaos.failed", a,
                planned_ns, done, s);
      return;
    }
    case ActionType::kEscalate: {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (active_keys_.erase(key)) --active_[f.kind];
      }
      Status s = act->escalate(f, a.node);
      logAction(s.isOk() ? "chaos.escalated" : s.code() == StatusCode::kNotFound ? "chaos.skipped" : "chaos.failed", a,
                planned_ns, clock_->monotonicNs(), s);
      return;
    }
    case ActionType::kRevert: {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!applied_.count(key)) return;  // skipped or never applied: nothing to revert
      }
      Status s = act->revert(f, a.node);
      const int64_t done = clock_->monotonicNs();
      if (s.isOk()) {
        std::lock_guard<std::mutex> l(mu_);
        applied_.erase(key);
        std::erase(apply_order_, key);
        if (active_keys_.erase(key)) --active_[f.kind];
        persistOrWarnLocked();
      }
      logAction(s.isOk() ? "chaos.reverted" : "chaos.failed", a, planned_ns, done, s);
      return;
    }
    case ActionType::kReplace: {
      Status s = cluster_.replace(a.node);
      logAction(s.isOk() ? "chaos.replaced" : "chaos.failed", a, planned_ns, clock_->monotonicNs(), s);
      return;
    }
  }
}

Status Controller::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!started_ || stopped_) return Status::ok();
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  clock_->unsubscribe(clock_sub_);
  Status first_error;
  // Revert what is still applied, newest first.
  std::vector<Key> order;
  {
    std::lock_guard<std::mutex> l(mu_);
    order.assign(apply_order_.rbegin(), apply_order_.rend());
  }
  for (const Key& k : order) {
    const Fault& f = plan_.fault(k.fault);
    Action a{0.0, ActionType::kRevert, k.fault, k.node, std::nullopt};
    const int64_t now = clock_->monotonicNs();
    Status s = actuators_.at(f.kind)->revert(f, k.node);
    std::lock_guard<std::mutex> l(mu_);
    if (s.isOk()) {
      applied_.erase(k);
      std::erase(apply_order_, k);
    } else {
      ++leaks_;
      if (first_error.isOk()) first_error = s;
    }
    if (active_keys_.erase(k)) --active_[f.kind];
    if (options_.events) {
      events::ChaosAction ev{.type = s.isOk() ? "chaos.reverted" : "chaos.failed", .fault_id = f.id,
                             .name = f.name, .kind = faultKindName(f.kind), .node = k.node, .action = "revert",
                             .by = "stop", .mono_ns = now, .wall_ns = clock_->wallNs()};
      if (!s.isOk()) ev.error = s.toString();
      log(events::toJson(ev));
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [kind, n] : active_) n = 0;
    active_keys_.clear();
    stopped_ = true;
    lease_stop_ = true;
    lease_cv_.notify_all();
    if (!options_.state_dir.empty()) {
      state_.finished = apply_order_.empty();  // leaks stay listed: the agent (or the next start) heals them
      Status s = persistLocked();
      if (!s.isOk() && first_error.isOk()) first_error = s;
    }
  }
  if (lease_thread_.joinable()) lease_thread_.join();
  if (agent_fd_ >= 0) {
    ::close(agent_fd_);  // EOF tells the agent we are done (it heals if the state is not finished)
    agent_fd_ = -1;
  }
  if (agent_pid_ > 0) {
    // The agent exits at once on EOF; bound the wait anyway, then make sure it is gone.
    for (int i = 0; i < 1000; ++i) {
      const pid_t r = ::waitpid(agent_pid_, nullptr, WNOHANG);
      if (r == agent_pid_ || (r < 0 && errno == ECHILD)) {
        agent_pid_ = -agent_pid_;
        break;
      }
      struct pollfd none {};
      ::poll(&none, 0, 10);
    }
    if (agent_pid_ > 0) {
      ::kill(agent_pid_, SIGKILL);
      (void)::waitpid(agent_pid_, nullptr, 0);
    }
    agent_pid_ = 0;
  }
  if (!options_.state_dir.empty()) ::unlink((options_.state_dir + "/" + kLeaseFile).c_str());
  return first_error;
}

bool Controller::waitProcessed(double run_s, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  const int64_t target = start_ns_ + static_cast<int64_t>(std::llround(run_s * 1e9));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto done = [&] {
    if (!started_) return false;
    if (stopping_) return true;
    return !executing_ && (queue_.empty() || queue_.begin()->first.first > target) && clock_->monotonicNs() >= target;
  };
  while (!done()) {
    // Nobody notifies when time merely passes: wake up by the target time as well.
    auto wake = deadline;
    const int64_t left_ns = target - clock_->monotonicNs();
    if (left_ns > 0) wake = std::min(wake, std::chrono::steady_clock::now() + std::chrono::nanoseconds(left_ns));
    if (cv_.wait_until(l, wake) == std::cv_status::timeout && std::chrono::steady_clock::now() >= deadline)
      return done();
  }
  return true;
}

int Controller::activeFaults(FaultKind kind) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = active_.find(kind);
  return it == active_.end() ? 0 : it->second;
}

int64_t Controller::leakCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return leaks_;
}

int64_t Controller::appliedCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return applied_count_;
}

int64_t Controller::failedCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return failed_count_;
}

std::vector<int64_t> Controller::injectionDelaysNs() const {
  std::lock_guard<std::mutex> l(mu_);
  return delays_;
}

Result<std::unique_ptr<StopSignalWatcher>> StopSignalWatcher::start(std::function<void(int)> on_signal) {
  std::unique_ptr<StopSignalWatcher> w(new StopSignalWatcher());
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &set, &w->old_mask_) != 0) return Status::internal("pthread_sigmask failed");
  w->signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  w->wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (w->signal_fd_ < 0 || w->wake_fd_ < 0) {
    const int e = errno;
    pthread_sigmask(SIG_SETMASK, &w->old_mask_, nullptr);
    return Status::fromErrno("signalfd/eventfd", e);
  }
  StopSignalWatcher* raw = w.get();
  w->thread_ = std::thread([raw, on_signal = std::move(on_signal)] {
    while (true) {
      pollfd p[2] = {{raw->signal_fd_, POLLIN, 0}, {raw->wake_fd_, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      signalfd_siginfo info{};
      if (::read(raw->signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        raw->received_ = static_cast<int>(info.ssi_signo);
        on_signal(static_cast<int>(info.ssi_signo));
      }
    }
  });
  return w;
}

StopSignalWatcher::~StopSignalWatcher() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(signal_fd_);
  ::close(wake_fd_);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace chaosbed::chaos
