#pragma once
// Drawing a Plan from a ChaosSpec: resolves targets against the cluster's nodes and draws every random
// quantity (random targets, Poisson arrivals, waves, straggler slowdowns, restart delays, capacity-trace
// victims) from the run's seed. Fault spec i draws only from streamFor(seed, i) (transports/base/random.h), so the
// same spec and seed give a byte-identical plan and adding a fault does not reshuffle the others.
//
// Semantics
// - at: one occurrence per listed time, on all resolved targets at once (random targets drawn once).
// - poisson: per targeted node, exponential inter-arrival times with rate rate_per_node_hour / 3600 *
//   time_scale per run second. A killed/preempted node draws its next arrival only once it is back
//   (replacement time); a node never replaced gets no more. For pause/slow, the next arrival is drawn after
//   the previous one ended (no overlap with itself); without a duration there is one arrival at most.
// - wave: waves at fixed times or at rate_per_hour / 3600 * time_scale per run second; each wave hits
//   count (or ceil(fraction * n)) targeted nodes drawn afresh.
// - trace: see schedule/trace.h. trigger: one occurrence whose actions are relative to the trigger.
// - preempt: apply (SIGTERM) at t, escalate (SIGKILL) at t + grace; replace at t + grace + restart delay.
//   kill: apply at t; replace at t + restart delay. pause/slow/link: revert at t + duration when given.
// - Only arrivals before the horizon (the run's time limit) are drawn; replacements and reverts beyond it
//   are dropped (stop() reverts whatever is still applied at the end).
// Blast-radius guard: unless spec.allow_full_outage, a plan in which every node of a role is down (killed
// and not yet replaced, or paused) at the same instant is rejected with the instant, the role and the
// faults; so is a triggered kill/preempt/pause that targets every node of a role.

#include <cstdint>
#include <vector>

#include "chaos/model/cluster.h"
#include "chaos/model/fault.h"
#include "chaos/model/spec.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

// InvalidArgument naming the fault ("file:line:col: chaos.faults[i]: ...") for targets that do not
// resolve, trace nodes that do not exist, or a blast-radius violation.
// A plan may hold at most this many actions; a spec that draws more is InvalidArgument (validate reports it).
inline constexpr size_t kMaxPlannedActions = 100000;
Result<Plan> drawPlan(const ChaosSpec& spec, const std::vector<NodeInfo>& nodes, uint64_t seed, double horizon_s);

// The blast-radius check on its own (drawPlan runs it unless spec.allow_full_outage, and prefixes the
// spec location of the fault that completes the outage).
Status checkBlastRadius(const Plan& plan, const std::vector<NodeInfo>& nodes);

}  // namespace chaosbed::chaos
