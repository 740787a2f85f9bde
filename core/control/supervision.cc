#include "core/control/supervision.h"

#include <algorithm>

namespace chaosbed::control {
namespace {

// A process that dies within this of its start is "young"; a node that keeps dying young backs off
// exponentially (as a Kubernetes CrashLoopBackOff does), so a node that cannot start does not spin.
constexpr double kYoungS = 3.0;

double backoffS(int young_deaths) {
  return young_deaths == 0 ? 0.0 : std::min(8.0, 0.25 * double(1 << std::min(young_deaths, 6)));
}

}  // namespace

Supervision::Supervision(SupervisionPolicy policy) : policy_(policy) {}

Action Supervision::publish(std::vector<int> workers, bool rollback) {
  Membership m;
  m.generation = ++generation_;
  m.workers = std::move(workers);
  m.rollback = rollback;
  std::sort(joining_.begin(), joining_.end());
  for (int r : joining_)
    if (std::binary_search(m.workers.begin(), m.workers.end(), r)) m.joined.push_back(r);
  joining_.clear();
  for (int r : m.workers) {
    auto it = incarnations_.find(r);
    m.incarnations.push_back(it == incarnations_.end() ? 0 : it->second);
  }
  members_ = m.workers;
  return Action::publish(std::move(m));
}

std::vector<Action> Supervision::start() {
  std::vector<int> all;
  for (int i = 0; i < policy_.workers; ++i) all.push_back(i);
  return {publish(all, false)};
}

std::vector<Action> Supervision::onExit(const NodeExit& e, double t, int64_t worker_steps) {
  std::vector<Action> out;
  if (e.requested || stopped_at_) return out;
  // A worker that ends with status 0 on its own has finished (max_steps, time limit): nothing to heal.
  if (!e.by_chaos && e.clean && e.node.isWorker()) return out;
  if (e.node.role != Role::kEvaluator) {
    ++failures_;
    episodes_.push_back({t, worker_steps, e.node.isWorker(), e.node.name() + " exited", false});
  }
  if (e.node.isWorker()) reported_.reset();  // the exit explains what the members saw; its generation answers them
  Outage& o = down_[e.node];
  o.since_s = t;
  o.by_chaos = e.by_chaos;
  o.awaiting_incarnation.reset();
  int& young = young_deaths_[e.node];
  young = e.lifetime_s < kYoungS ? young + 1 : 0;
  if (!e.by_chaos) o.restart_at_s = t + policy_.restart_after_crash_s + backoffS(young);

  if (e.node.isWorker() && policy_.synchronous && policy_.elastic) {
    std::vector<int> survivors;
    for (int r : members_)
      if (r != e.node.index) survivors.push_back(r);
    if (survivors.size() != members_.size() && !survivors.empty()) out.push_back(publish(survivors, false));
  } else if (e.node.isServer() && policy_.job_restart) {
    // TensorFlow's behaviour: the whole job restarts from its checkpoints.
    for (int i = 0; i < policy_.workers; ++i)
      out.push_back(Action::restart({Role::kWorker, i}, true));
    out.push_back(Action::restart({Role::kEvaluator, 0}, true));
    if (!e.by_chaos) o.restart_at_s = t;
  }
  return out;
}

void Supervision::onRestarted(const NodeId& node, int incarnation) {
  Outage& o = down_[node];
  o.restart_at_s.reset();
  o.awaiting_incarnation = incarnation;
}

std::vector<NodeId> Supervision::restartsDue(double t) const {
  std::vector<NodeId> due;
  for (const auto& [node, o] : down_)
    if (o.restart_at_s && t >= *o.restart_at_s) due.push_back(node);
  return due;
}

std::optional<int> Supervision::awaitedIncarnation(const NodeId& node) const {
  auto it = down_.find(node);
  return it == down_.end() ? std::nullopt : it->second.awaiting_incarnation;
}

std::vector<Action> Supervision::onReady(const std::vector<NodeId>& ready) {
  std::vector<int> ready_workers;
  for (const NodeId& n : ready) {
    auto it = down_.find(n);
    if (it == down_.end() || !it->second.awaiting_incarnation) continue;
    if (n.isWorker()) {
      ready_workers.push_back(n.index);
      if (policy_.synchronous) joining_.push_back(n.index);
      incarnations_[n.index] = *it->second.awaiting_incarnation;
    }
    down_.erase(it);
  }
  if (!policy_.synchronous || ready_workers.empty()) return {};
  if (policy_.elastic) {
    std::vector<int> workers = members_;
    workers.insert(workers.end(), ready_workers.begin(), ready_workers.end());
    std::sort(workers.begin(), workers.end());
    workers.erase(std::unique(workers.begin(), workers.end()), workers.end());
    return {publish(workers, false)};
  }
  // restart: everyone waits until every lost worker is back, then rolls back together.
  for (const auto& [node, o] : down_)
    if (node.isWorker()) return {};
  std::vector<int> all;
  for (int i = 0; i < policy_.workers; ++i) all.push_back(i);
  return {publish(all, true)};
}

std::vector<Action> Supervision::onProgress(int64_t worker_steps, double t) {
  std::vector<Action> out;
  if (policy_.synchronous) return out;  // synchronous training recovers when a worker says so
  if (stopped_at_) t = std::min(t, *stopped_at_);  // the steps that closed it were taken before the stop
  std::erase_if(episodes_, [&](const Episode& e) {
    if (!e.worker || worker_steps <= e.steps_at_failure) return false;
    out.push_back(Action::recovery(std::max(0.0, t - e.since_s), e.cause));
    return true;
  });
  return out;
}

std::vector<Action> Supervision::onRecoveredEvent(double t) {
  std::vector<Action> out;
  std::erase_if(episodes_, [&](const Episode& e) {
    if (t < e.since_s) return false;
    out.push_back(Action::recovery(t - e.since_s, e.cause));
    return true;
  });
  return out;
}

void Supervision::onCollectiveFailure(const NodeId& reporter, int64_t generation, double t, const std::string& what) {
  if (!policy_.synchronous || stopped_at_ || !reporter.isWorker() || generation != generation_) return;  // stale
  if (!reported_) reported_ = ReportedFailure{generation, t, reporter.name() + ": " + what};
}

std::vector<Action> Supervision::onTick(double t) {
  if (!reported_ || stopped_at_) return {};
  if (reported_->generation != generation_) {  // answered meanwhile (an exit's or a replacement's generation)
    reported_.reset();
    return {};
  }
  for (const auto& [node, o] : down_)
    if (node.isWorker()) {  // a worker is down: its exit or replacement publishes the next generation
      reported_.reset();
      return {};
    }
  if (t - reported_->since_s < kExitGraceS) return {};
  const ReportedFailure r = *reported_;
  reported_.reset();
  if (std::none_of(episodes_.begin(), episodes_.end(), [](const Episode& e) { return e.collective; })) {
    ++failures_;
    episodes_.push_back({r.since_s, 0, true, "collective failure (" + r.what + ")", true});
  }
  if (policy_.elastic) return {publish(members_, false)};
  std::vector<int> all;
  for (int i = 0; i < policy_.workers; ++i) all.push_back(i);
  return {publish(all, true)};
}

void Supervision::onStop(double t) {
  if (!stopped_at_) stopped_at_ = t;
}

std::optional<std::string> Supervision::workersEnded(const std::set<int>& running_workers) const {
  if (stopped_at_ || !running_workers.empty()) return std::nullopt;
  for (const auto& [node, o] : down_)
    if (node.isWorker()) return std::nullopt;  // a crash, or chaos that will replace it
  return "workers_ended";
}

}  // namespace chaosbed::control
