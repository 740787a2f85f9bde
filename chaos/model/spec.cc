#include "chaos/model/spec.h"

#include <cmath>
#include <filesystem>
#include <set>

namespace chaosbed::chaos {
namespace {

using config::ConfigNode;
using config::Range;

std::string whereOf(const ConfigNode& n) {
  return n.file() + ":" + std::to_string(n.line()) + ":" + std::to_string(n.column()) + ": " + n.path();
}

// A number or a list of numbers (at_s: 20 or at_s: [20, 80]).
std::vector<double> timesAt(const ConfigNode& parent, const std::string& key) {
  ConfigNode n = parent.child(key);
  if (n.isSequence()) {
    std::vector<double> v = n.as<std::vector<double>>({}, Range::nonNegative());
    if (v.empty()) n.error("needs at least one time");
    return v;
  }
  return {parent.required<double>(key, Range::nonNegative())};
}

GroupSelector parseGroup(const ConfigNode& n) {
  GroupSelector g;
  g.where = whereOf(n);
  if (!n.isMap()) {
    n.error("expected a map such as {role: worker} or {nodes: [worker-2]}, got " + n.describe());
    return g;
  }
  n.checkKeys({"role", "index", "nodes", "count", "fraction"});
  g.role = n.optional<std::string>("role", "");
  if (n.has("nodes")) {
    g.nodes = n.child("nodes").isSequence() ? n.child("nodes").as<std::vector<std::string>>()
                                             : std::vector<std::string>{n.required<std::string>("nodes")};
    if (!g.role.empty()) n.errorAt("nodes", "give either role (with index/count/fraction) or nodes, not both");
    if (g.nodes.empty()) n.errorAt("nodes", "needs at least one node name");
    for (const char* k : {"index", "count", "fraction"})
      n.rejectKey(k, std::string(k) + " selects within a role; it does not apply to an explicit node list");
    return g;
  }
  if (g.role.empty()) {
    if (!n.has("role")) n.error("missing required field 'role' (or give 'nodes')");
    else n.errorAt("role", "must not be empty");
    return g;
  }
  int selectors = 0;
  if (n.has("index")) {
    ++selectors;
    ConfigNode idx = n.child("index");
    g.indices = idx.isSequence() ? idx.as<std::vector<int>>({}, Range::nonNegative())
                                 : std::vector<int>{n.required<int>("index", Range::nonNegative())};
    if (idx.isSequence() && g.indices.empty()) idx.error("needs at least one index");
  }
  if (n.has("count")) {
    ++selectors;
    g.count = n.required<int>("count", Range::positive());
  }
  if (n.has("fraction")) {
    ++selectors;
    g.fraction = n.required<double>("fraction", Range{0, 1, true, false});
  }
  if (selectors > 1) n.error("give at most one of index, count, fraction");
  return g;
}

void parseTarget(const ConfigNode& fault, FaultSpec* f) {
  ConfigNode t = fault.requiredChild("target");
  if (!t.present() || t.isNull()) {
    if (t.present()) t.error("required field has no value");
    return;
  }
  if (t.isMap() && t.has("between")) {
    t.checkKeys({"between"});
    ConfigNode b = t.child("between");
    std::vector<ConfigNode> items = b.items();
    if (!b.isSequence() || items.size() != 2) {
      b.error("expected a list of exactly two groups, e.g. [{role: worker}, {role: ps}]");
      return;
    }
    f->between = true;
    for (const ConfigNode& item : items) f->groups.push_back(parseGroup(item));
    return;
  }
  f->groups.push_back(parseGroup(t));
}

void parseSchedule(const ConfigNode& fault, FaultSpec* f) {
  ScheduleSpec& s = f->schedule;
  const bool has_at = fault.has("at_s"), has_sched = fault.has("schedule"), has_when = fault.has("when");
  if (has_at + has_sched + has_when != 1) {
    fault.error(has_at + has_sched + has_when == 0 ? "missing when to inject: give at_s, schedule or when"
                                                   : "give only one of at_s, schedule, when");
    if (!has_at && !has_sched && !has_when) return;
  }
  if (has_at) {
    s.kind = ScheduleSpec::Kind::kAt;
    s.at_s = timesAt(fault, "at_s");
    return;
  }
  if (has_when) {
    ConfigNode w = fault.child("when");
    s.kind = ScheduleSpec::Kind::kTrigger;
    if (!w.isMap()) {
      w.error("expected a map such as {node: worker-2, step: 300} or {epoch: 2}, got " + w.describe());
      return;
    }
    w.checkKeys({"node", "step", "epoch", "after_s"});
    s.trigger.node = w.optional<std::string>("node", "");
    if (w.has("step") == w.has("epoch")) w.error("give exactly one of step, epoch");
    if (w.has("epoch")) {
      s.trigger.unit = ProgressTrigger::Unit::kEpoch;
      s.trigger.value = w.required<int64_t>("epoch", Range::nonNegative());
    } else {
      s.trigger.unit = ProgressTrigger::Unit::kStep;
      s.trigger.value = w.optional<int64_t>("step", 0, Range::nonNegative());
    }
    s.after_s = w.optional<double>("after_s", 0.0, Range::nonNegative());
    return;
  }
  ConfigNode sch = fault.child("schedule");
  if (!sch.isMap() || sch.entries().size() != 1) {
    sch.error("expected exactly one of at_s, poisson, wave, trace, e.g. {poisson: {rate_per_node_hour: 0.6}}");
    return;
  }
  sch.checkKeys({"at_s", "poisson", "wave", "trace"});
  if (sch.has("at_s")) {
    s.kind = ScheduleSpec::Kind::kAt;
    s.at_s = timesAt(sch, "at_s");
  } else if (sch.has("poisson")) {
    s.kind = ScheduleSpec::Kind::kPoisson;
    ConfigNode p = sch.child("poisson");
    p.checkKeys({"rate_per_node_hour", "expected_per_run"});
    if (p.has("rate_per_node_hour") == p.has("expected_per_run"))
      p.error("needs exactly one of rate_per_node_hour (per node-hour of cloud time) and expected_per_run (arrivals "
              "over the run, all targets together)");
    if (p.has("rate_per_node_hour")) s.rate_per_node_hour = p.required<double>("rate_per_node_hour", Range::positive());
    if (p.has("expected_per_run")) s.expected_per_run = p.required<double>("expected_per_run", Range{0, 1e5, true, false});
  } else if (sch.has("wave")) {
    s.kind = ScheduleSpec::Kind::kWave;
    ConfigNode w = sch.child("wave");
    w.checkKeys({"fraction", "count", "rate_per_hour", "at_s"});
    if (w.has("fraction") == w.has("count")) w.error("give exactly one of fraction, count (nodes per wave)");
    if (w.has("fraction")) s.wave_fraction = w.required<double>("fraction", Range{0, 1, true, false});
    if (w.has("count")) s.wave_count = w.required<int>("count", Range::positive());
    if (w.has("rate_per_hour") == w.has("at_s")) w.error("give exactly one of rate_per_hour, at_s (when waves come)");
    if (w.has("rate_per_hour")) s.rate_per_hour = w.required<double>("rate_per_hour", Range::positive());
    if (w.has("at_s")) s.at_s = timesAt(w, "at_s");
  } else if (sch.has("trace")) {
    s.kind = ScheduleSpec::Kind::kTrace;
    ConfigNode t = sch.child("trace");
    t.checkKeys({"path", "format", "time_unit", "fleet_size", "start_s"});
    std::string path = t.required<std::string>("path");
    s.trace_format = t.oneOf("format", {"events", "capacity"}, "events") == "capacity" ? TraceFormat::kCapacity
                                                                                        : TraceFormat::kEvents;
    const std::string unit = t.oneOf("time_unit", {"s", "h"}, "s");
    s.trace_time_unit_s = unit == "h" ? 3600.0 : 1.0;
    if (s.trace_format == TraceFormat::kEvents) {
      for (const char* k : {"time_unit", "fleet_size", "start_s"})
        t.rejectKey(k, std::string(k) + " applies to capacity traces only");
    }
    s.fleet_size = t.optional<int>("fleet_size", 0, Range::positive());
    if (t.has("start_s")) s.trace_start_s = t.required<double>("start_s", Range::nonNegative());
    if (!path.empty()) {
      std::filesystem::path p(path);
      if (p.is_relative()) p = std::filesystem::path(t.file()).parent_path() / p;
      s.trace_path = p.lexically_normal().string();
      Result<std::vector<TraceRow>> rows = readTrace(s.trace_path, s.trace_format, s.trace_time_unit_s);
      if (rows.isOk()) s.trace = std::move(rows).value();
      else t.errorAt("path", rows.status().message());
    }
  }
}

void parseRestart(const ConfigNode& fault, FaultSpec* f) {
  ConfigNode r = fault.child("restart_after");
  if (r.isNull()) return;
  if (r.isScalar()) {
    r.asOneOf({"never"}, "never");
    return;
  }
  if (!r.isMap() || r.entries().size() != 1) {
    r.error("expected never, {fixed_s: s} or {exponential: {mean_s: s}}");
    return;
  }
  r.checkKeys({"fixed_s", "exponential"});  // `never` is the plain scalar
  if (r.has("fixed_s")) {
    f->restart.kind = RestartPolicy::Kind::kFixed;
    f->restart.cloud_s = r.required<double>("fixed_s", Range::nonNegative());
  } else if (r.has("exponential")) {
    ConfigNode e = r.child("exponential");
    e.checkKeys({"mean_s"});
    f->restart.kind = RestartPolicy::Kind::kExponential;
    f->restart.cloud_s = e.required<double>("mean_s", Range::positive());
  }
}

void parseSlowdown(const ConfigNode& sd, FaultSpec* f) {
  if (!sd.isMap() || sd.entries().size() != 1) {
    sd.error("expected one of {lognormal: {median, sigma}}, {pareto: {scale, shape}}, {bimodal: {p_slow, slow, fast}}");
    return;
  }
  sd.checkKeys({"lognormal", "pareto", "bimodal"});
  SlowdownSpec& s = f->slowdown;
  if (sd.has("lognormal")) {
    ConfigNode d = sd.child("lognormal");
    d.checkKeys({"median", "sigma"});
    s.kind = SlowdownSpec::Kind::kLognormal;
    s.a = d.required<double>("median", Range::positive());
    s.b = d.required<double>("sigma", Range::nonNegative());
  } else if (sd.has("pareto")) {
    ConfigNode d = sd.child("pareto");
    d.checkKeys({"scale", "shape"});
    s.kind = SlowdownSpec::Kind::kPareto;
    s.a = d.required<double>("scale", Range::positive());
    s.b = d.required<double>("shape", Range::positive());
  } else if (sd.has("bimodal")) {
    ConfigNode d = sd.child("bimodal");
    d.checkKeys({"p_slow", "slow", "fast"});
    s.kind = SlowdownSpec::Kind::kBimodal;
    s.a = d.required<double>("p_slow", Range::unit());
    s.b = d.required<double>("slow", Range::atLeast(1));
    s.c = d.optional<double>("fast", 1.0, Range::atLeast(1));
  }
}

// "kill, preempt and vanish": the kinds with a trait, for error messages.
std::string kindsWhere(bool FaultKindTraits::*trait) {
  std::vector<const char*> names;
  for (const FaultKindTraits& k : faultKinds())
    if (k.*trait) names.push_back(k.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return out;
}

void parseParams(const ConfigNode& fault, FaultSpec* f) {
  ConfigNode p = fault.child("params");
  if (!f->kind) {
    p.checkKeys({"cpu_fraction", "grace_s"});  // an events trace's rows: their kinds are read later
  } else if (const FaultKindTraits& kind = traitsOf(*f->kind); kind.params.empty()) {
    if (p.present() && !p.isNull() && !(p.isMap() && p.entries().empty()))
      fault.rejectKey("params", std::string("a ") + kind.name + " fault takes no params");
    return;
  } else {
    p.checkKeys(kind.params);
  }
  if (p.has("grace_s")) {
    f->params.grace_s = p.required<double>("grace_s", Range::nonNegative());
    f->grace_given = true;
  }
  if (p.has("cpu_fraction")) f->params.cpu_fraction = p.required<double>("cpu_fraction", Range{0, 1, true, false});
  if (f->kind == FaultKind::kSlow) {
    if (p.has("slowdown")) parseSlowdown(p.child("slowdown"), f);
    if (p.has("cpu_fraction") == p.has("slowdown"))
      (p.present() ? p : fault).error("a slow fault needs exactly one of params.cpu_fraction, params.slowdown");
  }
  if (f->kind == FaultKind::kTransportError) {
    f->params.error = p.requiredOneOf("error", {"fail_send", "fail_recv", "drop", "break_peer", "abort_collective"});
    f->params.nth = p.optional<int64_t>("nth", 1, Range::closed(1, 1e9));
    f->params.count = p.optional<int64_t>("count", 1, Range::closed(1, 1e9));
    if (f->params.error == "drop" && p.has("count"))
      p.errorAt("count", "a drop loses every send until the fault ends (duration_s); count does not apply");
    if ((f->params.error == "break_peer" || f->params.error == "abort_collective") && (p.has("nth") || p.has("count")))
      p.errorAt(p.has("nth") ? "nth" : "count", f->params.error + " fails at once; nth and count do not apply");
  }
  if (f->kind == FaultKind::kLink) {
    f->params.bandwidth_mbps = p.optional<double>("bandwidth_mbps", 0.0, Range::positive());
    f->params.latency_ms = p.optional<double>("latency_ms", 0.0, Range::nonNegative());
    f->params.partition = p.optional<bool>("partition", false);
    if (!p.has("bandwidth_mbps") && !p.has("latency_ms") && !p.has("partition"))
      (p.present() ? p : fault).error("a link fault needs params bandwidth_mbps, latency_ms or partition");
    if (f->params.partition && (p.has("bandwidth_mbps") || p.has("latency_ms")))
      p.errorAt("partition", "a partition drops everything; bandwidth_mbps and latency_ms do not apply");
    const std::string via = p.oneOf("via", {"auto", "kernel", "shaper"}, "auto");
    f->params.via = via == "kernel"   ? FaultParams::Via::kKernel
                    : via == "shaper" ? FaultParams::Via::kShaper
                                      : FaultParams::Via::kAuto;
    if (f->params.via == FaultParams::Via::kKernel && f->params.latency_ms > 0)
      p.errorAt("via", "added latency needs the in-process shaper (these kernels have no netem); use via: auto or "
                       "shaper");
  }
}

FaultSpec parseFault(const ConfigNode& fault) {
  FaultSpec f;
  f.where = whereOf(fault);
  if (!fault.isMap()) {
    fault.error("expected a map with name, action, target and a schedule, got " + fault.describe());
    return f;
  }
  fault.checkKeys({"name", "action", "profile", "target", "at_s", "schedule", "when", "duration_s", "params",
                   "restart_after"});
  f.name = fault.required<std::string>("name");
  if (fault.has("name") && f.name.empty()) fault.errorAt("name", "must not be empty");
  parseSchedule(fault, &f);
  const bool event_trace =
      f.schedule.kind == ScheduleSpec::Kind::kTrace && f.schedule.trace_format == TraceFormat::kEvents;
  if (fault.has("action") || !event_trace) {
    static const std::vector<std::string_view> kActions = [] {
      std::vector<std::string_view> names;
      for (const FaultKindTraits& k : faultKinds()) names.push_back(k.name);
      return names;
    }();
    std::string a = fault.requiredOneOf("action", kActions);
    if (!a.empty()) f.kind = parseFaultKind(a);
    if (event_trace && f.kind) fault.errorAt("action", "an events trace names the fault of each row; leave action out");
  }
  if (!event_trace || fault.has("target")) parseTarget(fault, &f);
  const bool between_groups = f.kind && traitsOf(*f.kind).between_groups;
  if (f.kind == FaultKind::kLink && !f.between)
    fault.errorAt("target", "a link fault needs target: {between: [<group>, <group>]}");
  if (!between_groups && f.between && f.kind)
    fault.errorAt("target", "between applies to " + kindsWhere(&FaultKindTraits::between_groups) + " faults only");
  if (between_groups && f.schedule.kind != ScheduleSpec::Kind::kAt && f.schedule.kind != ScheduleSpec::Kind::kTrigger)
    fault.errorAt("schedule", std::string("a ") + faultKindName(*f.kind) + " fault is scheduled with at_s or when");
  if (f.schedule.kind == ScheduleSpec::Kind::kTrace && f.schedule.trace_format == TraceFormat::kCapacity &&
      f.kind && !endsNode(*f.kind))
    fault.errorAt("schedule", "a capacity trace drives kill, preempt or vanish faults");

  const bool lasting = f.kind && traitsOf(*f.kind).lasting;
  if (fault.has("duration_s")) {
    if (f.kind && !lasting)
      fault.rejectKey("duration_s", std::string("a ") + faultKindName(*f.kind) + " is instantaneous; it has no duration");
    else
      f.duration_s = fault.required<double>("duration_s", Range::atLeast(0.001));  // 1 ms: a shorter fault is noise
  }
  f.profile = fault.oneOf("profile", {"aws", "gcp", "azure"}, "");
  const bool may_preempt = f.kind == FaultKind::kPreempt || event_trace;
  if (!f.profile.empty() && !may_preempt) fault.rejectKey("profile", "profile (spot notice) applies to preempt faults only");
  parseParams(fault, &f);
  if (f.kind == FaultKind::kTransportError && f.params.error == "break_peer" && !f.between)
    fault.errorAt("target", "break_peer needs target: {between: [<group>, <group>]}: whose connections break");
  if (f.kind == FaultKind::kPreempt && f.profile.empty() && !f.grace_given)
    fault.error("a preempt fault needs profile (aws | gcp | azure) or params.grace_s");
  if (fault.has("restart_after")) {
    const bool restartable = (f.kind && endsNode(*f.kind)) || event_trace;
    if (!restartable)
      fault.rejectKey("restart_after", "restart_after applies to " + kindsWhere(&FaultKindTraits::ends_node) + " faults only");
    else parseRestart(fault, &f);
  }
  return f;
}

}  // namespace

std::optional<double> profileNoticeCloudSeconds(const std::string& profile) {
  if (profile == "aws") return 120.0;
  if (profile == "gcp" || profile == "azure") return 30.0;
  return std::nullopt;
}

ChaosSpec parseChaosSpec(const ConfigNode& chaos) {
  ChaosSpec spec;
  if (chaos.isNull()) return spec;
  if (!chaos.expectMap()) return spec;
  chaos.checkKeys({"time_scale", "allow_full_outage", "pause_mode", "faults"});
  spec.time_scale = chaos.optional<double>("time_scale", 1.0, Range::positive());
  spec.allow_full_outage = chaos.optional<bool>("allow_full_outage", false);
  const std::string pm = chaos.oneOf("pause_mode", {"auto", "freezer", "signal"}, "auto");
  spec.pause_mode = pm == "freezer" ? PauseMode::kFreezer : pm == "signal" ? PauseMode::kSignal : PauseMode::kAuto;
  std::set<std::string> names;
  for (const ConfigNode& item : chaos.child("faults").items()) {
    FaultSpec f = parseFault(item);
    if (!f.name.empty() && !names.insert(f.name).second)
      item.errorAt("name", "duplicate fault name '" + f.name + "'");
    spec.faults.push_back(std::move(f));
  }
  return spec;
}

}  // namespace chaosbed::chaos
