#include "chaos/schedule/schedule.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <set>

#include "transports/base/random.h"

namespace chaosbed::chaos {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string joinNames(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

class Drawer {
 public:
  Drawer(const ChaosSpec& spec, const std::vector<NodeInfo>& nodes, uint64_t seed, double horizon)
      : spec_(spec), nodes_(nodes), horizon_(horizon) {
    plan_.seed = seed;
    plan_.horizon_s = horizon;
  }

  Status drawAll() {
    for (size_t i = 0; i < spec_.faults.size(); ++i) {
      Rng rng = streamFor(plan_.seed, i);
      Status s = drawOne(spec_.faults[i], rng);
      if (!s.isOk()) return Status::invalidArgument(spec_.faults[i].where + ": " + s.message());
    }
    sortActions(plan_.actions);
    return Status::ok();
  }

  Plan take() { return std::move(plan_); }

 private:
  Result<std::vector<std::string>> resolve(const GroupSelector& g, Rng& rng) {
    std::vector<std::string> out;
    if (!g.nodes.empty()) {
      for (const std::string& n : g.nodes) {
        if (std::none_of(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == n; }))
          return Status::invalidArgument("target: no node named '" + n + "' in the cluster (" + allNames() + ")");
        out.push_back(n);
      }
      return out;
    }
    std::vector<const NodeInfo*> pool;
    for (const NodeInfo& n : nodes_)
      if (n.role == g.role) pool.push_back(&n);
    if (pool.empty()) return Status::invalidArgument("target.role: no nodes of role '" + g.role + "' in the cluster (" + allNames() + ")");
    if (!g.indices.empty()) {
      for (int i : g.indices) {
        auto it = std::find_if(pool.begin(), pool.end(), [&](const NodeInfo* x) { return x->index == i; });
        if (it == pool.end())
          return Status::invalidArgument("target.index: " + g.role + " has no index " + std::to_string(i) + " (it has " +
                                         std::to_string(pool.size()) + " nodes, 0.." + std::to_string(pool.size() - 1) + ")");
        out.push_back((*it)->name);
      }
      return out;
    }
    int k = static_cast<int>(pool.size());
    if (g.count > 0) {
      if (g.count > k)
        return Status::invalidArgument("target.count: " + std::to_string(g.count) + " exceeds the " + std::to_string(k) +
                                       " nodes of role '" + g.role + "'");
      k = g.count;
    } else if (g.fraction > 0) {
      k = static_cast<int>(std::ceil(g.fraction * static_cast<double>(pool.size()) - 1e-9));
    }
    if (k == static_cast<int>(pool.size())) {
      for (const NodeInfo* n : pool) out.push_back(n->name);
      return out;
    }
    std::vector<int> picked = rng.choose(static_cast<int>(pool.size()), k);
    std::sort(picked.begin(), picked.end());
    for (int i : picked) out.push_back(pool[i]->name);
    return out;
  }

  static Status tooManyActions() {
    return Status::invalidArgument("plans more than " + std::to_string(kMaxPlannedActions) +
                                   " actions (rate x nodes x horizon): lower the rate, time_scale or training.time_limit_s");
  }

  std::string allNames() const {
    std::vector<std::string> v;
    for (const NodeInfo& n : nodes_) v.push_back(n.name);
    return "nodes: " + joinNames(v);
  }

  double graceOf(const FaultSpec& f) const {
    if (f.grace_given) return f.params.grace_s;
    return profileNoticeCloudSeconds(f.profile).value_or(0.0) / spec_.time_scale;
  }

  RestartPolicy restartOf(const FaultSpec& f) const {
    return {f.restart.kind, f.restart.cloud_s / spec_.time_scale};
  }

  double drawRestart(const RestartPolicy& r, Rng& rng) const {
    switch (r.kind) {
      case RestartPolicy::Kind::kNever: return kInf;
      case RestartPolicy::Kind::kFixed: return r.seconds;
      case RestartPolicy::Kind::kExponential: return rng.exponential(r.seconds);
    }
    return kInf;
  }

  double drawSlowdown(const SlowdownSpec& s, Rng& rng) const {
    switch (s.kind) {
      case SlowdownSpec::Kind::kNone: return 1.0;
      case SlowdownSpec::Kind::kLognormal: return rng.lognormal(std::log(s.a), s.b);
      case SlowdownSpec::Kind::kPareto: return rng.pareto(s.a, s.b);
      case SlowdownSpec::Kind::kBimodal: return rng.uniform() < s.a ? s.b : s.c;
    }
    return 1.0;
  }

  // Adds one occurrence and its actions; returns the time the targets are down until (kill/preempt:
  // replacement time or +inf; pause/slow/link: end of the duration or +inf), for the Poisson loop.
  double add(const FaultSpec& fs, FaultKind kind, std::vector<std::string> targets, std::vector<std::string> peers,
             double at, std::optional<double> duration, const FaultParams& params, Rng& rng, bool with_restart = true) {
    Fault f;
    f.id = plan_.faults.size();
    f.name = fs.name;
    f.kind = kind;
    f.targets = std::move(targets);
    f.peers = std::move(peers);
    f.at_s = at;
    if (fs.schedule.kind == ScheduleSpec::Kind::kTrigger) f.trigger = fs.schedule.trigger;
    f.duration_s = duration;
    f.params = params;
    if (kind == FaultKind::kPreempt) f.params.grace_s = graceOf(fs);
    double down_until = kInf;
    auto push = [&](double t, ActionType type, const std::string& node) {
      if (!f.trigger && t >= horizon_ && type != ActionType::kApply) return;
      plan_.actions.push_back({t, type, f.id, node, f.trigger});
    };
    // A link is shaped from both sides; a transport error happens in group A's transports only.
    const bool both_sides = kind == FaultKind::kLink;
    for (const std::string& n : f.targets) push(at, ActionType::kApply, n);
    if (both_sides)
      for (const std::string& n : f.peers) push(at, ActionType::kApply, n);
    if (endsNode(kind)) {
      const double dead_at = at + (kind == FaultKind::kPreempt ? f.params.grace_s : 0.0);
      if (kind == FaultKind::kPreempt)
        for (const std::string& n : f.targets) push(dead_at, ActionType::kEscalate, n);
      if (with_restart) {
        f.restart = restartOf(fs);
        down_until = dead_at;
        for (const std::string& n : f.targets) {
          const double d = drawRestart(f.restart, rng);
          if (std::isinf(d)) {
            down_until = kInf;
            continue;
          }
          f.restart_delay_s.push_back(d);
          down_until = std::max(down_until, dead_at + d);
          push(dead_at + d, ActionType::kReplace, n);
        }
        if (f.restart.kind == RestartPolicy::Kind::kNever) down_until = kInf;
      }
    } else if (duration) {
      down_until = at + *duration;
      for (const std::string& n : f.targets) push(at + *duration, ActionType::kRevert, n);
      if (both_sides)
        for (const std::string& n : f.peers) push(at + *duration, ActionType::kRevert, n);
    }
    plan_.faults.push_back(std::move(f));
    return down_until;
  }

  // One occurrence on `targets`; slow faults with a slowdown distribution become one fault per node.
  double addOccurrence(const FaultSpec& fs, FaultKind kind, const std::vector<std::string>& targets,
                       const std::vector<std::string>& peers, double at, std::optional<double> duration, Rng& rng) {
    if (kind == FaultKind::kSlow && fs.slowdown.kind != SlowdownSpec::Kind::kNone) {
      double until = at;
      for (const std::string& n : targets) {
        const double slowdown = drawSlowdown(fs.slowdown, rng);
        if (!(slowdown > 1.0)) continue;
        FaultParams p = fs.params;
        p.cpu_fraction = std::max(0.01, 1.0 / slowdown);
        until = std::max(until, add(fs, kind, {n}, {}, at, duration, p, rng));
      }
      return until;
    }
    return add(fs, kind, targets, peers, at, duration, fs.params, rng);
  }

  Status drawOne(const FaultSpec& fs, Rng& rng) {
    std::vector<std::vector<std::string>> groups;
    for (const GroupSelector& g : fs.groups) {
      CHAOSBED_ASSIGN_OR_RETURN(std::vector<std::string> r, resolve(g, rng));
      groups.push_back(std::move(r));
    }
    const ScheduleSpec& s = fs.schedule;
    const double scale = spec_.time_scale;
    std::vector<std::string> targets = groups.empty() ? std::vector<std::string>{} : groups[0];
    std::vector<std::string> peers = fs.between && groups.size() == 2 ? groups[1] : std::vector<std::string>{};
    if (fs.between) {
      for (const std::string& n : targets)
        if (std::find(peers.begin(), peers.end(), n) != peers.end())
          return Status::invalidArgument("target.between: node " + n + " is in both groups");
    }
    switch (s.kind) {
      case ScheduleSpec::Kind::kAt:
        for (double t : s.at_s)
          if (t < horizon_) addOccurrence(fs, *fs.kind, targets, peers, t, fs.duration_s, rng);
        return Status::ok();
      case ScheduleSpec::Kind::kTrigger: {
        if (!s.trigger.node.empty() &&
            std::none_of(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == s.trigger.node; }))
          return Status::invalidArgument("when.node: no node named '" + s.trigger.node + "' in the cluster (" + allNames() + ")");
        addOccurrence(fs, *fs.kind, targets, peers, s.after_s, fs.duration_s, rng);
        return Status::ok();
      }
      case ScheduleSpec::Kind::kPoisson: {
        // Per node, run seconds between arrivals: from the cloud-time rate, or from the arrivals the run expects.
        const double n = double(std::max<size_t>(1, targets.size()));
        const double mean_gap = s.expected_per_run > 0 ? horizon_ * n / s.expected_per_run
                                                       : 3600.0 / s.rate_per_node_hour / scale;
        plan_.rates.push_back({fs.name, "poisson", int(targets.size()), 3600.0 / mean_gap / scale, scale,
                               horizon_ * n / mean_gap, mean_gap / n});
        for (const std::string& node : targets) {
          double t = 0;
          while (true) {
            t += rng.exponential(mean_gap);
            if (t >= horizon_) break;
            const double until = addOccurrence(fs, *fs.kind, {node}, {}, t, fs.duration_s, rng);
            if (plan_.actions.size() > kMaxPlannedActions) return tooManyActions();
            if (std::isinf(until)) break;
            t = std::max(t, until);
          }
        }
        return Status::ok();
      }
      case ScheduleSpec::Kind::kWave: {
        const int n = static_cast<int>(targets.size());
        const int k = s.wave_count > 0 ? s.wave_count
                                       : static_cast<int>(std::ceil(s.wave_fraction * static_cast<double>(n) - 1e-9));
        if (k > n)
          return Status::invalidArgument("schedule.wave.count: " + std::to_string(k) + " exceeds the " +
                                         std::to_string(n) + " targeted nodes");
        auto wave = [&](double t) {
          std::vector<int> picked = rng.choose(n, k);
          std::sort(picked.begin(), picked.end());
          std::vector<std::string> hit;
          for (int i : picked) hit.push_back(targets[i]);
          addOccurrence(fs, *fs.kind, hit, {}, t, fs.duration_s, rng);
        };
        if (!s.at_s.empty()) {
          for (double t : s.at_s)
            if (t < horizon_) wave(t);
        } else {
          const double mean_gap = 3600.0 / s.rate_per_hour / scale;
          // Counted in node failures: each wave hits k nodes.
          const double expected = horizon_ / mean_gap * double(k);
          plan_.rates.push_back({fs.name, "wave", n, s.rate_per_hour, scale, expected, expected > 0 ? horizon_ / expected : 0});
          for (double t = rng.exponential(mean_gap); t < horizon_; t += rng.exponential(mean_gap)) {
            wave(t);
            if (plan_.actions.size() > kMaxPlannedActions) return tooManyActions();
          }
        }
        return Status::ok();
      }
      case ScheduleSpec::Kind::kTrace:
        return s.trace_format == TraceFormat::kEvents ? replayEvents(fs, targets, rng) : replayCapacity(fs, targets, rng);
    }
    return Status::ok();
  }

  Status replayEvents(const FaultSpec& fs, const std::vector<std::string>& targets, Rng& rng) {
    for (const TraceRow& row : fs.schedule.trace) {
      const std::string where = fs.schedule.trace_path + ":" + std::to_string(row.line) + ": ";
      if (std::none_of(nodes_.begin(), nodes_.end(), [&](const NodeInfo& x) { return x.name == row.node; }))
        return Status::invalidArgument(where + "no node named '" + row.node + "' in the cluster (" + allNames() + ")");
      if (!fs.groups.empty() && std::find(targets.begin(), targets.end(), row.node) == targets.end())
        return Status::invalidArgument(where + "node '" + row.node + "' is not among the fault's targets");
      if (row.kind == FaultKind::kSlow && fs.params.cpu_fraction >= 1.0 && fs.slowdown.kind == SlowdownSpec::Kind::kNone)
        return Status::invalidArgument(where + "a slow row needs params.cpu_fraction on the fault");
      if (row.kind == FaultKind::kPreempt && fs.profile.empty() && !fs.grace_given)
        return Status::invalidArgument(where + "a preempt row needs profile or params.grace_s on the fault");
      if (row.time_s >= horizon_) break;
      addOccurrence(fs, row.kind, {row.node}, {}, row.time_s, row.duration_s, rng);
    }
    return Status::ok();
  }

  Status replayCapacity(const FaultSpec& fs, const std::vector<std::string>& targets, Rng& rng) {
    const ScheduleSpec& s = fs.schedule;
    int fleet = s.fleet_size;
    for (const TraceRow& r : s.trace) fleet = std::max(fleet, s.fleet_size > 0 ? 0 : r.available);
    if (fleet <= 0) return Status::invalidArgument(s.trace_path + ": the fleet never has a live instance");
    double start = -1;
    if (s.trace_start_s) {
      start = *s.trace_start_s * s.trace_time_unit_s;
    } else {
      for (const TraceRow& r : s.trace)
        if (r.available >= fleet) {
          start = r.time_s;
          break;
        }
      if (start < 0)
        return Status::invalidArgument(s.trace_path + ": the fleet never reaches fleet_size " + std::to_string(fleet) +
                                       "; give schedule.trace.start_s");
    }
    const int n = static_cast<int>(targets.size());
    std::vector<std::string> live = targets;  // in node order
    struct Down {
      std::string node;
      uint64_t fault_id;
      double since;
    };
    std::deque<Down> down;
    for (size_t i = 0; i < s.trace.size(); ++i) {
      const TraceRow& r = s.trace[i];
      if (r.time_s < start) continue;
      // A step function lists the old and the new value at the same time: only the last one counts.
      if (i + 1 < s.trace.size() && s.trace[i + 1].time_s == r.time_s) continue;
      const double t = (r.time_s - start) / spec_.time_scale;
      if (t >= horizon_) break;
      const int want = std::min(n, static_cast<int>(std::lround(static_cast<double>(r.available) * n / fleet)));
      const int have = static_cast<int>(live.size());
      if (want < have) {
        std::vector<int> picked = rng.choose(have, have - want);
        std::sort(picked.begin(), picked.end());
        std::vector<std::string> hit;
        for (int i : picked) hit.push_back(live[i]);
        for (auto it = picked.rbegin(); it != picked.rend(); ++it) live.erase(live.begin() + *it);
        const uint64_t id = plan_.faults.size();
        add(fs, *fs.kind, hit, {}, t, std::nullopt, fs.params, rng, /*with_restart=*/false);
        const double dead_at = t + plan_.faults.back().params.grace_s * (*fs.kind == FaultKind::kPreempt);
        for (const std::string& h : hit) down.push_back({h, id, dead_at});
      } else if (want > have) {
        for (int i = 0; i < want - have && !down.empty(); ++i) {
          Down d = down.front();
          down.pop_front();
          plan_.actions.push_back({std::max(t, d.since), ActionType::kReplace, d.fault_id, d.node, std::nullopt});
          live.insert(std::lower_bound(live.begin(), live.end(), d.node,
                                       [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); }),
                      d.node);
        }
      }
    }
    return Status::ok();
  }

  size_t rank(const std::string& node) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].name == node) return i;
    return nodes_.size();
  }

  const ChaosSpec& spec_;
  const std::vector<NodeInfo>& nodes_;
  double horizon_;
  Plan plan_;
};

}  // namespace

Status checkBlastRadius(const Plan& plan, const std::vector<NodeInfo>& nodes) {
  std::map<std::string, std::string> role_of;
  std::map<std::string, int> role_size;
  for (const NodeInfo& n : nodes) {
    role_of[n.name] = n.role;
    ++role_size[n.role];
  }
  // Triggered faults: their time is unknown, so any that takes down a whole role at once is refused.
  for (const Fault& f : plan.faults) {
    if (!f.trigger || f.kind == FaultKind::kSlow || f.kind == FaultKind::kLink) continue;
    std::map<std::string, int> hit;
    for (const std::string& t : f.targets) ++hit[role_of[t]];
    for (const auto& [role, k] : hit)
      if (k == role_size[role])
        return Status::invalidArgument("fault '" + f.name + "' (" + faultKindName(f.kind) + " when " +
                                       describeTrigger(*f.trigger) + ") takes down every node of role '" + role +
                                       "' (" + std::to_string(k) + " of " + std::to_string(k) +
                                       "); set chaos.allow_full_outage: true to allow a full outage");
  }
  // Timed faults: per (fault, node) a down interval [from, to): kill from apply, preempt from escalate, pause
  // from apply; to the replacement (kill/preempt) or the revert (pause), else forever. Empty intervals do
  // not count. Sweep them; at equal times, nodes coming back count before nodes going down.
  std::map<std::pair<uint64_t, std::string>, std::pair<double, double>> intervals;
  for (const Action& a : plan.actions) {
    if (a.trigger) continue;
    const Fault& f = plan.fault(a.fault_id);
    const auto key = std::make_pair(a.fault_id, a.node);
    const FaultKindTraits& kind = traitsOf(f.kind);
    const bool notice = f.kind == FaultKind::kPreempt && a.type == ActionType::kApply;  // the kill is its escalate
    const bool down = kind.takes_node_down && !notice && (a.type == ActionType::kApply || a.type == ActionType::kEscalate);
    const bool up = a.type == ActionType::kReplace || (kind.takes_node_down && kind.lasting && a.type == ActionType::kRevert);
    if (down) intervals.try_emplace(key, a.at_s, kInf).first->second.first = a.at_s;
    if (up) intervals.try_emplace(key, -kInf, a.at_s).first->second.second = a.at_s;
  }
  struct Edge {
    double t;
    int delta;  // -1 up, +1 down
    std::string node;
    uint64_t fault;
  };
  std::vector<Edge> edges;
  for (const auto& [key, iv] : intervals) {
    if (!(iv.second > iv.first) || std::isinf(iv.first)) continue;
    edges.push_back({iv.first, +1, key.second, key.first});
    if (!std::isinf(iv.second)) edges.push_back({iv.second, -1, key.second, key.first});
  }
  std::stable_sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) {
    return x.t != y.t ? x.t < y.t : x.delta < y.delta;
  });
  std::map<std::string, std::set<uint64_t>> holding;  // per node: faults holding it down
  std::map<std::string, int> role_down;
  for (const Edge& e : edges) {
    std::set<uint64_t>& h = holding[e.node];
    const std::string& role = role_of[e.node];
    if (e.delta > 0) {
      if (h.empty()) ++role_down[role];
      h.insert(e.fault);
    } else {
      h.erase(e.fault);
      if (h.empty()) --role_down[role];
    }
    if (e.delta > 0 && role_down[role] == role_size[role]) {
      std::set<std::string> names;
      for (const auto& [node, faults] : holding)
        if (role_of[node] == role)
          for (uint64_t id : faults) names.insert(plan.fault(id).name);
      char t[32];
      std::snprintf(t, sizeof t, "%.3f", e.t);
      return Status::invalidArgument("at t=" + std::string(t) + " s every node of role '" + role + "' (" +
                                     std::to_string(role_size[role]) + " of " + std::to_string(role_size[role]) +
                                     ") would be down at once (faults: " +
                                     joinNames(std::vector<std::string>(names.begin(), names.end())) +
                                     "); set chaos.allow_full_outage: true to allow a full outage");
    }
  }
  return Status::ok();
}

Result<Plan> drawPlan(const ChaosSpec& spec, const std::vector<NodeInfo>& nodes, uint64_t seed, double horizon_s) {
  if (!(horizon_s > 0)) return Status::invalidArgument("chaos: the horizon (training.time_limit_s) must be > 0");
  Drawer d(spec, nodes, seed, horizon_s);
  CHAOSBED_RETURN_IF_ERROR(d.drawAll());
  Plan plan = d.take();
  if (!spec.allow_full_outage) {
    Status s = checkBlastRadius(plan, nodes);
    if (!s.isOk()) {
      // Name the spec location of the first fault the message mentions.
      for (const FaultSpec& f : spec.faults)
        if (s.message().find("'" + f.name + "'") != std::string::npos || s.message().find(f.name) != std::string::npos)
          return Status::invalidArgument(f.where + ": " + s.message());
      return s;
    }
  }
  return plan;
}

}  // namespace chaosbed::chaos
