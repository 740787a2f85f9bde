#pragma once
// The `chaos:` section of an experiment spec, parsed into a ChaosSpec (what to inject, before any drawing).
//
//   chaos:
//     time_scale: 60            # cloud seconds per second of the run (default 1)
//     allow_full_outage: false  # blast-radius guard: refuse plans that take down every node of a role at once
//     pause_mode: auto          # auto (freezer when the node has a cgroup, else SIGSTOP) | freezer | signal
//     faults:
//       - name: spot-reclaims                 # required, unique
//         action: preempt                     # kill | preempt | vanish | pause | slow | link | transport_error
//         profile: aws                        # preempt notice: aws 120 s, gcp 30 s, azure 30 s (cloud time)
//         target: {role: worker}              # see below
//         schedule: {poisson: {rate_per_node_hour: 0.6}}
//         restart_after: {exponential: {mean_s: 120}}   # kill/preempt; or {fixed_s: 60}; or never (default)
//       - {name: s, action: slow, target: {role: worker, index: 3}, at_s: 20, duration_s: 30,
//          params: {cpu_fraction: 0.25}}
//
// Targets: {role: R} every node of R; {role: R, index: 3} or index: [0, 2]; {nodes: [worker-2, ps-0]};
//   {role: R, count: k} k random nodes; {role: R, fraction: f} ceil(f*n) random nodes (drawn once);
//   link faults: {between: [<group>, <group>]} with two of the above.
// When: `at_s: 20` or `at_s: [20, 80]` (seconds of the run), or `schedule:` with exactly one of
//   {at_s: [...]}, {poisson: {rate_per_node_hour: r}} (per targeted node, cloud time) or
//   {poisson: {expected_per_run: n}} (n arrivals over the run, all targets together, whatever the time scale),
//   {wave: {fraction: f | count: k, rate_per_hour: r | at_s: [...]}} (f of the targeted nodes at once;
//     rate in waves per cloud hour), {trace: {path: file.csv, format: events|capacity, time_unit: s|h,
//     fleet_size: n, start_s: t}} (see schedule/trace.h), or `when: {node: worker-2, step: 300, after_s: 0}`
//   / `when: {epoch: 2}` (progress trigger; without node: the first node to report it).
// Params: slow: cpu_fraction in (0, 1], or slowdown: {lognormal: {median: m, sigma: s}} |
//   {pareto: {scale: xm, shape: a}} | {bimodal: {p_slow: p, slow: x, fast: y}} (a slowdown factor >= 1 is
//   drawn per targeted node; cpu_fraction = 1/slowdown; nodes drawing <= 1 are left alone);
//   preempt: grace_s (seconds of the run; overrides the profile); link: bandwidth_mbps, latency_ms,
//   partition (at least one), via: auto | kernel | shaper (who carries it out; FaultParams::Via).
// Units: at_s, duration_s, after_s and grace_s are seconds of the run. rate_per_node_hour, rate_per_hour,
//   profile notices, restart_after and capacity-trace times are cloud time, divided by time_scale.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chaos/model/fault.h"
#include "chaos/model/trace.h"
#include "core/config/config.h"

namespace chaosbed::chaos {

struct GroupSelector {
  std::string role;                // empty when `nodes` names the nodes
  std::vector<int> indices;        // explicit indices within the role
  std::vector<std::string> nodes;  // explicit node names
  int count = 0;                   // k random nodes of the role
  double fraction = 0.0;           // ceil(fraction * n) random nodes of the role
  std::string where;               // "file:line:col" of the selector, for later errors
};

struct ScheduleSpec {
  enum class Kind : uint8_t { kAt, kPoisson, kWave, kTrace, kTrigger };
  Kind kind = Kind::kAt;
  std::vector<double> at_s;       // kAt, and kWave at fixed times
  double rate_per_node_hour = 0;  // kPoisson (cloud time)
  double expected_per_run = 0;    // kPoisson alternative: arrivals per run over all targets (0: use the rate)
  double rate_per_hour = 0;       // kWave by rate
  double wave_fraction = 0;       // kWave
  int wave_count = 0;             // kWave
  std::string trace_path;         // kTrace, resolved against the spec's directory
  TraceFormat trace_format = TraceFormat::kEvents;
  double trace_time_unit_s = 1;   // seconds per trace time unit
  int fleet_size = 0;             // capacity: the trace's full fleet (0 = its maximum)
  std::optional<double> trace_start_s;  // capacity: trace time where the replay starts (default: first full fleet)
  std::vector<TraceRow> trace;    // loaded at parse time
  ProgressTrigger trigger;        // kTrigger
  double after_s = 0;             // kTrigger: delay after the trigger fires
};

struct SlowdownSpec {
  enum class Kind : uint8_t { kNone, kLognormal, kPareto, kBimodal };
  Kind kind = Kind::kNone;
  double a = 0, b = 0, c = 0;  // lognormal (median, sigma); pareto (scale, shape); bimodal (p_slow, slow, fast)
};

struct RestartSpec {
  RestartPolicy::Kind kind = RestartPolicy::Kind::kNever;
  double cloud_s = 0;  // fixed delay or exponential mean, cloud seconds
};

struct FaultSpec {
  std::string name;
  std::optional<FaultKind> kind;  // absent only for event traces (each row names its kind)
  std::vector<GroupSelector> groups;  // one, or two for `between`
  bool between = false;
  ScheduleSpec schedule;
  std::optional<double> duration_s;
  FaultParams params;
  bool grace_given = false;  // params.grace_s set explicitly
  std::string profile;       // aws | gcp | azure | ""
  SlowdownSpec slowdown;
  RestartSpec restart;
  std::string where;  // "file:line:col: chaos.faults[i]" for errors found after parsing
};

enum class PauseMode : uint8_t { kAuto, kFreezer, kSignal };

struct ChaosSpec {
  double time_scale = 1.0;
  bool allow_full_outage = false;
  PauseMode pause_mode = PauseMode::kAuto;
  std::vector<FaultSpec> faults;
};

// Run seconds of a spot profile's notice: aws 120 s, gcp 30 s, azure 30 s of cloud time / time_scale.
std::optional<double> profileNoticeCloudSeconds(const std::string& profile);

// Parses the `chaos:` node (absent or null: no faults). Every problem is recorded in chaos.diagnostics()
// as "file:line:col: chaos.faults[0].target.role: message"; the caller checks the diagnostics. Trace files
// are read here, relative to the directory of chaos.file(); their errors name the trace file and line.
ChaosSpec parseChaosSpec(const config::ConfigNode& chaos);

}  // namespace chaosbed::chaos
