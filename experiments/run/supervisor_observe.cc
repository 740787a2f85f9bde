#include <glog/logging.h>
#include <signal.h>

#include "core/isolation/cgroup.h"
#include "core/launcher/launcher.h"
#include "experiments/run/supervisor.h"

namespace chaosbed::run::detail {

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
  // The heartbeat: each running node's own report, refreshed every 250 ms while it lives, its wall time
  // growing. All of them in one request, never waiting for a key (a replacement may not have reported yet).
  std::vector<control::NodeId> ids;
  std::vector<std::string> keys;
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id || id->role == control::Role::kEvaluator) continue;  // it trains nothing and reports no wall time
    if (!launcher_->running(name)) {
      detector_.forget(*id);
      continue;
    }
    ids.push_back(*id);
    keys.push_back(keys_.stats(name, launcher_->incarnation(name) - 1));
  }
  auto values = ctx_.store->peek(keys);
  if (!values.isOk()) return;  // no news is not silence: the store is the controller's own
  for (size_t i = 0; i < ids.size(); ++i) {
    auto stats = (*values)[i] ? NodeStats::decode(*(*values)[i]) : Result<NodeStats>(Status::notFound("no report"));
    if (!stats.isOk() || stats->final_report || stats->wall_seconds <= 0) {
      detector_.forget(ids[i]);  // starting (not armed yet) or finishing (not silent, done)
      continue;
    }
    detector_.observe(ids[i], stats->wall_seconds, t);
  }
  for (const control::FailureDetector::Lost& lost : detector_.expired(t)) declareLost(lost);
}

void Supervisor::declareLost(const control::FailureDetector::Lost& lost) {
  const std::string name = lost.node.name();
  const double t = now();
  LOG(INFO) << strategy_.label << ": " << name << " declared lost at " << t << " s (silent since " << lost.silent_since_s
            << " s; failure_detection.timeout_s " << detector_.timeout_s() << ")";
  record(events::toJson(events::NodeLost{
      .node = name, .silent_since_s = lost.silent_since_s, .timeout_s = detector_.timeout_s(), .t = t}));
  {
    MutexLock lock(exits_mu_);
    markDetected(name, t, /*declared=*/true);
    fenced_.insert(name);
  }
  // Fence it, as a cluster manager does before it replaces a node: its exit is then the failure the
  // strategy recovers from (the runner thaws a frozen one, which dies only once thawed).
  if (Status s = launcher_->signal(name, SIGKILL); !s.isOk()) LOG(WARNING) << "fencing " << name << ": " << s.toString();
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
  // A node's event is untrusted: only a well-formed event of a known type (core/runtime/events.h) is
  // acted on and recorded, written back in its one format.
  Result<events::NodeEvent> decoded = events::decodeNodeEvent(text);
  if (!decoded.isOk()) {
    ++result_.control_plane.malformed_events;
    LOG_FIRST_N(WARNING, 10) << strategy_.label << ": ignoring a malformed event (" << text.size()
                             << " bytes): " << decoded.status().toString();
    return;
  }
  const events::NodeEvent& e = *decoded;
  // Every event in the list is a node's, stamped with its run time at the append.
  ++result_.control_plane.events;
  if (e.t >= 0 && polling_events_) result_.control_plane.event_latency_s.push_back(std::max(0.0, now() - e.t));
  record(events::toJson(e));
  if (const auto* eval = std::get_if<events::Eval>(&e.what)) {
    if (e.node == nodeName("evaluator", 0)) onEvaluation(*eval);
  } else if (const auto* loss = std::get_if<events::TotalLoss>(&e.what)) {
    // Every worker of elastic mirrored was lost: what they had trained beyond the state the next generation
    // resumed from (a checkpoint's samples, or none) is not in the final model. No surviving member books
    // it, so the controller does, from the workers' reports so far.
    const NodeStats w = collectStats("worker", workers_);
    total_loss_samples_ += std::max<int64_t>(0, w.samples - w.samples_lost - total_loss_samples_ - loss->samples);
  } else if (std::holds_alternative<events::MirroredRecovered>(e.what) ||
             std::holds_alternative<events::PsWorkerRecovered>(e.what)) {
    MutexLock lock(mu_);
    execute(supervision_->onRecoveredEvent(e.t));
  } else if (const auto* failure = std::get_if<events::MirroredFailureDetected>(&e.what)) {
    // A member waits for a newer generation; Supervision decides whether an exit explains it (onTick).
    if (auto node = control::NodeId::parse(e.node)) {
      std::string what = failure->reason + ": " + failure->error;
      if (what.size() > 200) what = what.substr(0, 200) + "...";
      MutexLock lock(mu_);
      supervision_->onCollectiveFailure(*node, failure->generation, now(), what);
    }
  } else if (const auto* error = std::get_if<events::Error>(&e.what)) {
    LOG(WARNING) << strategy_.label << ": " << e.node << ": " << error->message;
  }
}

void Supervisor::onEvaluation(const events::Eval& eval) {
  EvalPoint p;
  p.time_s = eval.snapshot_t;
  p.step = eval.step;
  p.accuracy = eval.accuracy;
  p.loss = eval.loss;
  const Observation at = observationAt(observations_, {now(), collectStats("worker", workers_).samples, aliveCount()},
                                       p.time_s);
  p.samples = at.samples;
  p.alive = at.alive;
  p.refined = eval.refined;
  result_.timeline.push_back(p);
  const bool completes = tta_.add({p.time_s, p.step}, p.accuracy, p.refined);
  if (tta_.first() && !result_.tta_seconds) {
    result_.tta_seconds = tta_.first()->time_s;
    if (ctx_.metrics) ctx_.metrics->setTimeToAccuracy(spec_.metadata.name, strategy_.label, *result_.tta_seconds);
  }
  if (completes) {
    result_.tta_sustained_seconds = tta_.sustained()->time_s;
    result_.tta_steps = tta_.sustained()->steps;
    result_.tta_resolution_s = tta_.resolution()->seconds;
    result_.tta_resolution_steps = tta_.resolution()->steps;
    requestStop("target");
  }
  if (p.refined) return;  // an earlier snapshot: the latest accuracy is the paced one that follows
  result_.final_accuracy = p.accuracy;
  result_.final_loss = p.loss;
  if (ctx_.metrics) ctx_.metrics->setAccuracy(spec_.metadata.name, strategy_.label, p.accuracy, p.loss);
}

Supervisor::StatsByNode Supervisor::statsOf(const std::vector<std::string>& names) const {
  StatsByNode out;
  // Every report not final yet, read in one request (one per node was most of the controller's time at 256
  // nodes); final reports are cached, since nothing comes after them.
  std::vector<std::string> keys, owners;
  {
    MutexLock lock(stats_cache_mu_);
    for (const std::string& name : names) {
      NodeStats& total = out[name];
      for (int inc = 0; inc < launcher_->incarnation(name); ++inc) {
        std::string k = keys_.stats(name, inc);
        if (auto it = stats_final_.find(k); it != stats_final_.end()) {
          total.merge(it->second);
          continue;
        }
        keys.push_back(std::move(k));
        owners.push_back(name);
      }
    }
  }
  if (keys.empty()) return out;
  auto values = ctx_.store->peek(keys);
  if (!values.isOk()) {
    LOG_EVERY_N(WARNING, 20) << strategy_.label << ": reading the nodes' stats: " << values.status().toString();
    return out;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*values)[i]) continue;  // not reported yet
    auto stats = NodeStats::decode(*(*values)[i]);
    if (stats.isOk()) {
      out[owners[i]].merge(*stats);
      if (stats->final_report) {
        MutexLock lock(stats_cache_mu_);
        stats_final_.emplace(keys[i], *stats);
      }
      continue;
    }
    // Ignored (a report never counts in part); logged once per key, not at every poll.
    MutexLock lock(bad_stats_mu_);
    if (bad_stats_.insert(keys[i]).second)
      LOG(WARNING) << keys[i] << ": ignoring malformed stats: " << stats.status().message();
  }
  return out;
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
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(nodeName(role, i));
  return roleTotal(statsOf(names), role, count);
}

Supervisor::StatsByNode Supervisor::allNodeStats() const {
  return statsOf(names_);
}

NodeStats Supervisor::roleTotal(const StatsByNode& stats, const std::string& role, int count) {
  NodeStats total;
  for (int i = 0; i < count; ++i)
    if (auto it = stats.find(nodeName(role, i)); it != stats.end()) total.merge(it->second);
  return total;
}

void Supervisor::exportMetrics(const chaos::Controller* chaos_controller, const StatsByNode& stats) {
  if (!ctx_.metrics) return;
  const std::string& exp = spec_.metadata.name;
  std::map<std::string, int> alive;
  for (const std::string& name : names_) {
    const auto id = control::NodeId::parse(name);
    if (!id) continue;
    const std::string role = control::roleName(id->role);
    alive[role] += launcher_->running(name) ? 1 : 0;
    if (auto it = stats.find(name); role != "evaluator" && it != stats.end())
      ctx_.metrics->updateNode({exp, strategy_.label, role, name}, it->second);
  }
  for (const auto& [role, n] : alive) ctx_.metrics->setNodesAlive(exp, strategy_.label, role, n);
  ctx_.metrics->setRunning(exp, strategy_.label, !stop_sent_, now());
  if (chaos_controller) {
    for (const chaos::FaultKindTraits& kind : chaos::faultKinds())
      ctx_.metrics->setFaultsActive(exp, strategy_.label, kind.name, chaos_controller->activeFaults(kind.kind));
    ctx_.metrics->setFaultLeaks(exp, strategy_.label, chaos_controller->leakCount());
  }
}

int64_t Supervisor::totalWorkerSteps() const { return collectStats("worker", workers_).steps; }

int Supervisor::aliveCount() const {
  int n = 0;
  for (const auto& name : names_) n += launcher_->running(name) ? 1 : 0;
  return n;
}

}  // namespace chaosbed::run::detail
