#pragma once
// The fault model and the plan it is drawn into.
//
// A Fault is one occurrence of a fault drawn from a spec: a kind, the resolved nodes it hits ("worker-2",
// "ps-0"), when (seconds of the run, or a progress trigger), how long, and its parameters. A Plan is the
// complete, sorted list of timed Actions of a run (apply / escalate / revert / replace), drawn once from
// the spec and the seed before the run starts (Jepsen-style: choosing targets is separate from acting).
// Everything here is plain data: copyable, comparable, printable.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::chaos {

// kill: a process crash on a live host (its sockets close: peers see it at once). vanish: a host that
// disappears without a word (the node is frozen, nothing is closed; the cluster's failure detector declares
// it lost after its timeout and fences it). preempt: a notice (SIGTERM), then a kill after the grace period.
// transport_error: the node's transport fails the way UCX or NCCL would while every process lives.
enum class FaultKind : uint8_t { kKill, kPreempt, kPause, kSlow, kLink, kVanish, kTransportError };

// Which of the controller's actuators (chaos/actuators/) carries a kind out.
enum class ActuatorKind : uint8_t { kSignal, kFreeze, kCpuQuota, kLink, kTransportErrors };

// What the spec, the schedule and the controller need to know of a kind, in one row per kind (fault.cc):
// a new kind is an enum value, its row, and what its actuator does with it.
struct FaultKindTraits {
  FaultKind kind;
  const char* name;           // as a spec's `action` and the event log spell it
  bool ends_node;             // its targets' processes end: they come back only by replacement (restart_after)
  bool takes_node_down;       // its targets do no work while it holds (ended, frozen or stopped)
  bool lasting;               // it lasts duration_s (or to the run's end), then is reverted
  bool reverted_at_stop;      // a run that ends while it holds undoes it (lasting ones, and a vanish's freeze)
  bool between_groups;        // it acts between two groups (target: {between: [..]}), scheduled by at_s or when
  std::vector<std::string_view> params;  // the params keys it accepts (none: it takes no params)
  ActuatorKind actuator;
};
// Every kind, in enum order.
const std::vector<FaultKindTraits>& faultKinds();
const FaultKindTraits& traitsOf(FaultKind kind);
// "kill", "preempt", "pause", "slow", "link", "vanish", "transport_error"
const char* faultKindName(FaultKind kind);
std::optional<FaultKind> parseFaultKind(const std::string& name);

// A fault that fires when a node reports progress instead of at a time ("when worker-2 reaches step 300").
struct ProgressTrigger {
  enum class Unit : uint8_t { kStep, kEpoch };
  std::string node;  // empty: the first node of any role to report it
  Unit unit = Unit::kStep;
  int64_t value = 0;
  bool operator==(const ProgressTrigger&) const = default;
};
std::string describeTrigger(const ProgressTrigger& t);  // "worker-2 step 300", "any epoch 2"

struct FaultParams {
  double cpu_fraction = 1.0;    // slow: fraction of the node's quota (or of one CPU when it has none)
  double grace_s = 0.0;         // preempt: seconds of the run between SIGTERM (notice) and SIGKILL
  double bandwidth_mbps = 0.0;  // link: 0 = uncapped
  double latency_ms = 0.0;      // link: added one-way delay
  bool partition = false;       // link: drop everything between the groups
  // link: who carries it out. auto: the kernel of the emulated hosts (hosts: netns) where it can (a bandwidth
  // cap or a partition between groups on different hosts), else the node's in-process shaper.
  enum class Via : uint8_t { kAuto, kKernel, kShaper };
  Via via = Via::kAuto;
  // transport_error: what fails (fail_send, fail_recv, drop, break_peer, abort_collective), from the nth
  // matching operation on, count times (drop: every send until the fault ends).
  std::string error;
  int64_t nth = 1;
  int64_t count = 1;
  bool operator==(const FaultParams&) const = default;
};

inline bool endsNode(FaultKind kind) { return traitsOf(kind).ends_node; }
const char* viaName(FaultParams::Via via);

// When (and whether) a killed, preempted or vanished node is replaced; durations are seconds of the run.
struct RestartPolicy {
  enum class Kind : uint8_t { kNever, kFixed, kExponential };
  Kind kind = Kind::kNever;
  double seconds = 0.0;  // fixed delay, or the exponential mean
  bool operator==(const RestartPolicy&) const = default;
};

struct Fault {
  uint64_t id = 0;       // unique within a plan, in plan order
  std::string name;      // the spec's fault name
  FaultKind kind = FaultKind::kKill;
  std::vector<std::string> targets;  // nodes hit; for link: group A
  std::vector<std::string> peers;    // link, transport_error: group B (transport_error: empty = any peer)
  double at_s = 0.0;                 // seconds of the run; with a trigger: seconds after it fires
  std::optional<ProgressTrigger> trigger;
  std::optional<double> duration_s;  // pause/slow/link; none = until the run ends
  FaultParams params;
  RestartPolicy restart;
  std::vector<double> restart_delay_s;  // kill/preempt with a restart policy: drawn delay per target
  bool operator==(const Fault&) const = default;
};

enum class ActionType : uint8_t {
  kApply,     // inject (kill: SIGKILL; preempt: SIGTERM notice; vanish: freeze; pause; slow; link)
  kEscalate,  // preempt only: the grace period is over, SIGKILL
  kRevert,    // the fault's duration is over
  kReplace,   // a killed/preempted/vanished node comes back (Cluster::replace)
};
const char* actionTypeName(ActionType type);

struct Action {
  double at_s = 0.0;  // seconds of the run; with a trigger: seconds after the trigger fires
  ActionType type = ActionType::kApply;
  uint64_t fault_id = 0;
  std::string node;
  std::optional<ProgressTrigger> trigger;
  bool operator==(const Action&) const = default;
};

// A rate-driven fault (poisson, wave by rate) said three ways: as given (cloud time), as the failures a run
// expects, and as a mean time between failures. Nominal: a node that is down (killed, not yet replaced)
// draws no arrivals, so a run sees at most this many.
struct FaultRate {
  std::string fault;          // the spec's fault name
  std::string schedule;       // "poisson" (per targeted node) | "wave" (waves)
  int targets = 0;            // nodes the arrivals are drawn for (poisson) or that a wave draws from
  double rate_per_hour = 0;   // cloud time: per node-hour (poisson) or waves per hour
  double time_scale = 1;      // cloud seconds per run second
  double expected_per_run = 0;  // node failures over the horizon, all targets together (a wave hits several)
  double mtbf_s = 0;          // run seconds between arrivals, over all targets (horizon / expected_per_run)
  bool operator==(const FaultRate&) const = default;
};

struct Plan {
  uint64_t seed = 0;
  double horizon_s = 0.0;
  std::vector<FaultRate> rates;  // one per rate-driven fault spec, in spec order
  std::vector<Fault> faults;    // indexed by Fault::id
  std::vector<Action> actions;  // timed ones sorted by (at_s, fault_id, type, node); triggered ones after
  const Fault& fault(uint64_t id) const { return faults.at(id); }
};

// Sorts actions into plan order: timed actions by (at_s, fault_id, type, node), then triggered ones.
void sortActions(std::vector<Action>& actions);

// Deterministic renderings of a plan (fixed-point, microsecond resolution): a human table and one JSON
// object per line. The same plan always renders to the same bytes.
std::string formatPlanTable(const Plan& plan);
std::string formatPlanJsonLines(const Plan& plan);

}  // namespace chaosbed::chaos
