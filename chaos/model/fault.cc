#include "chaos/model/fault.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include <nlohmann/json.hpp>

namespace chaosbed::chaos {

const std::vector<FaultKindTraits>& faultKinds() {
  // kind, name, ends_node, takes_node_down, lasting, reverted_at_stop, between_groups, params, actuator
  using enum ActuatorKind;
  static const std::vector<FaultKindTraits> kinds = {
      {FaultKind::kKill, "kill", true, true, false, false, false, {}, kSignal},
      {FaultKind::kPreempt, "preempt", true, true, false, false, false, {"grace_s"}, kSignal},
      {FaultKind::kPause, "pause", false, true, true, true, false, {}, kFreeze},
      {FaultKind::kSlow, "slow", false, false, true, true, false, {"cpu_fraction", "slowdown"}, kCpuQuota},
      {FaultKind::kLink, "link", false, false, true, true, true, {"bandwidth_mbps", "latency_ms", "partition", "via"}, kLink},
      // A vanished node is frozen until it is declared lost.
      {FaultKind::kVanish, "vanish", true, true, false, true, false, {}, kFreeze},
      {FaultKind::kTransportError, "transport_error", false, false, true, true, true, {"error", "nth", "count"},
       kTransportErrors},
  };
  return kinds;
}

const FaultKindTraits& traitsOf(FaultKind kind) { return faultKinds().at(static_cast<size_t>(kind)); }

const char* faultKindName(FaultKind kind) { return traitsOf(kind).name; }

const char* viaName(FaultParams::Via via) {
  switch (via) {
    case FaultParams::Via::kAuto: return "auto";
    case FaultParams::Via::kKernel: return "kernel";
    case FaultParams::Via::kShaper: return "shaper";
  }
  return "?";
}

std::optional<FaultKind> parseFaultKind(const std::string& name) {
  for (const FaultKindTraits& t : faultKinds())
    if (name == t.name) return t.kind;
  return std::nullopt;
}

const char* actionTypeName(ActionType type) {
  switch (type) {
    case ActionType::kApply: return "apply";
    case ActionType::kEscalate: return "escalate";
    case ActionType::kRevert: return "revert";
    case ActionType::kReplace: return "replace";
  }
  return "unknown";
}

std::string describeTrigger(const ProgressTrigger& t) {
  return (t.node.empty() ? std::string("any") : t.node) +
         (t.unit == ProgressTrigger::Unit::kStep ? " step " : " epoch ") + std::to_string(t.value);
}

void sortActions(std::vector<Action>& actions) {
  auto key = [](const Action& a) {
    const bool triggered = a.trigger.has_value();
    std::string tkey = triggered ? describeTrigger(*a.trigger) : std::string();
    return std::make_tuple(triggered, tkey, a.at_s, a.fault_id, static_cast<int>(a.type), a.node);
  };
  std::stable_sort(actions.begin(), actions.end(), [&](const Action& x, const Action& y) { return key(x) < key(y); });
}

namespace {

std::string fixed(double v, int decimals = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

double micro(double v) { return std::round(v * 1e6) / 1e6; }

std::string paramsText(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kSlow: return "cpu_fraction=" + fixed(f.params.cpu_fraction, 4);
    case FaultKind::kPreempt: return "grace_s=" + fixed(f.params.grace_s, 3);
    case FaultKind::kLink:
      if (f.params.partition) return std::string("partition via=") + viaName(f.params.via);
      return "bandwidth_mbps=" + fixed(f.params.bandwidth_mbps, 3) + " latency_ms=" + fixed(f.params.latency_ms, 3) +
             " via=" + viaName(f.params.via);
    case FaultKind::kTransportError:
      return "error=" + f.params.error + " nth=" + std::to_string(f.params.nth) + " count=" + std::to_string(f.params.count);
    default: return "";
  }
}

nlohmann::json paramsJson(const Fault& f) {
  nlohmann::json p = nlohmann::json::object();
  switch (f.kind) {
    case FaultKind::kSlow: p["cpu_fraction"] = micro(f.params.cpu_fraction); break;
    case FaultKind::kPreempt: p["grace_s"] = micro(f.params.grace_s); break;
    case FaultKind::kLink:
      p["bandwidth_mbps"] = micro(f.params.bandwidth_mbps);
      p["latency_ms"] = micro(f.params.latency_ms);
      p["partition"] = f.params.partition;
      p["via"] = viaName(f.params.via);
      break;
    case FaultKind::kTransportError:
      p["error"] = f.params.error;
      p["nth"] = f.params.nth;
      p["count"] = f.params.count;
      break;
    default: break;
  }
  return p;
}

}  // namespace

std::string formatPlanTable(const Plan& plan) {
  std::string out = "# chaos plan: seed " + std::to_string(plan.seed) + ", horizon " + fixed(plan.horizon_s, 3) +
                    " s, " + std::to_string(plan.faults.size()) + " faults, " + std::to_string(plan.actions.size()) +
                    " actions\n";
  char line[512];
  for (const FaultRate& r : plan.rates) {
    std::snprintf(line, sizeof line,
                  "# fault '%s' (%s): %.3f expected per run, one per %.1f s of the run (%.4g per %s of cloud time x "
                  "time_scale %.4g, %d node(s))\n",
                  r.fault.c_str(), r.schedule.c_str(), r.expected_per_run, r.mtbf_s, r.rate_per_hour,
                  r.schedule == "poisson" ? "node-hour" : "hour", r.time_scale, r.targets);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-22s %-9s %5s %-18s %-8s %-12s %s\n", "time_s", "action", "fault", "name", "kind",
                "node", "params");
  out += line;
  for (const Action& a : plan.actions) {
    const Fault& f = plan.fault(a.fault_id);
    std::string when = fixed(a.at_s);
    if (a.trigger) when = std::string("@").append(describeTrigger(*a.trigger)).append("+").append(fixed(a.at_s, 3));
    std::string params = a.type == ActionType::kApply ? paramsText(f) : "";
    if (a.type == ActionType::kApply && f.kind == FaultKind::kLink) {
      const bool in_a = std::find(f.targets.begin(), f.targets.end(), a.node) != f.targets.end();
      params += " peers=";
      const auto& peers = in_a ? f.peers : f.targets;
      for (size_t i = 0; i < peers.size(); ++i) params += (i ? "," : "") + peers[i];
    }
    std::snprintf(line, sizeof line, "%-22s %-9s %5llu %-18s %-8s %-12s %s\n", when.c_str(), actionTypeName(a.type),
                  static_cast<unsigned long long>(a.fault_id), f.name.c_str(), faultKindName(f.kind), a.node.c_str(),
                  params.c_str());
    out += line;
  }
  return out;
}

std::string formatPlanJsonLines(const Plan& plan) {
  std::string out;
  for (const Action& a : plan.actions) {
    const Fault& f = plan.fault(a.fault_id);
    nlohmann::json j;
    j["at_s"] = micro(a.at_s);
    if (a.trigger) j["trigger"] = describeTrigger(*a.trigger);
    j["action"] = actionTypeName(a.type);
    j["fault_id"] = a.fault_id;
    j["name"] = f.name;
    j["kind"] = faultKindName(f.kind);
    j["node"] = a.node;
    if (a.type == ActionType::kApply) {
      j["params"] = paramsJson(f);
      if (f.duration_s) j["duration_s"] = micro(*f.duration_s);
      if (f.kind == FaultKind::kLink) {
        const bool in_a = std::find(f.targets.begin(), f.targets.end(), a.node) != f.targets.end();
        j["peers"] = in_a ? f.peers : f.targets;
      }
    }
    out += j.dump() + "\n";
  }
  return out;
}

}  // namespace chaosbed::chaos
