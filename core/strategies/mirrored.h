#pragma once
// The `mirrored` strategy: synchronous data parallel training (TF MultiWorkerMirrored, PyTorch DDP) over
// the worker ranks of ctx.transport, with the failure policies of docs/design.md 3.
//
// One step, on every member of the current membership (sorted ranks; member i = position i):
//   1. data: a GLOBAL batch of members x batch_per_worker samples, taken in order from the permutation of
//      the training set for (config.seed, epoch) (core/data/batches.h shardOrder with one shard); member i
//      takes slice i. An epoch ends when fewer than a global batch of samples is left (the tail is skipped).
//      So N workers with global batch B follow the trajectory of one process with batch B.
//   2. compute the gradient of the slice (compute time);
//   3. allgather a step header {arrival realtime, newest membership generation seen, stop, preemption
//      notice, step}: every member waits (idle, reason peer) max(arrival) - own arrival, and all members
//      take membership / stop / notice decisions at the same step;
//   4. ring all-reduce of the flat gradient (transfer), scaled by 1/members, SGD update (compute).
//   With backup_workers b > 0, step 3-4 are replaced by Chen et al.'s scheme: members report "ready" to the
//   lowest member (the coordinator), which takes the first N-b (itself included), tells everyone; included
//   members all-reduce over a sub-communicator and divide by N-b, the coordinator forwards the reduced
//   gradient to the excluded ones, which apply it instead of their own. Every member stays identical; a late
//   member's samples of that step are dropped (not counted as samples). A member that is behind and finds
//   the decision of its next step already there (it is excluded again) skips that gradient and only applies
//   the forwarded one, so it catches up; the coordinator keeps at most 64 MiB of forwarded gradients in
//   flight to one member before it waits for it. The coordinator itself is never left out.
//
// Side duties of the lowest member: a parameter snapshot to ctx.evaluatorRank() at the step boundary after
// every eval_interval_s, or after every eval_interval_steps gradients (core/strategies/tags.h; skipped while the previous one is in flight, never blocks training); a checkpoint
// (params, momentum, step, epoch, data position, samples) to ctx.checkpoint_dir every checkpoint_interval_s.
//
// Failures: a collective that fails with PeerLost/Aborted/Timeout (after collective_timeout_s) starts a
// recovery (idle, reason recovery, from the start of the failed collective until training resumes): event
// "failure_detected", wait for the controller's next membership, then enter it:
//   - restart (elastic false): membership.rollback -> everyone restores the latest good checkpoint; the
//     samples this node processed since that checkpoint are accounted as lost (a replacement also accounts
//     its predecessor's share, as reported by the survivors);
//   - elastic: survivors go on in the generation without the dead rank; a generation with `joined` ranks is
//     entered by everyone at a step boundary (the max generation in the step headers); the joiners receive
//     params + momentum + step by broadcast from the lowest member holding the newest state.
//   Entering a generation starts with a store rendezvous (key "<run>/mirrored/entered/<generation>/<rank>"):
//   nobody sends before every member has reconnected to the new incarnations. It ends with a state sync:
//   members that disagree on the step (a failure can strike after some members finished a step) take the
//   newest state by broadcast. accounting.recovery() and the event "recovered" come at the first completed
//   step after a failure.
// A replacement (ctx.control.incarnation() > 0) joins the newest membership if it lists the replacement
// among `joined`, else the next one that lists it (the newest may still be its predecessor's).
// checkpoint_on_notice: a member whose header carries a preemption notice leaves (returns OK) after the agreed
// step, once the lowest other member has saved a checkpoint of that step; the others then await the next
// membership, so a restart rolls back to exactly that step and loses nothing.
//
// Stops after the step at which any member saw ctx.control.stopRequested(), the time limit (from the
// controller's start time) passed, or config.max_steps steps were applied. Returns OK on such a stop and
// when leaving on notice; an error when it cannot go on (bad config, not a member any more, no membership
// before the time limit is a normal stop).
//
// Threads: runs on the calling thread; uses ctx.transport only from it (the control watchers are ctx's).

#include <cstdint>
#include <functional>
#include <vector>

#include "core/data/dataset.h"
#include "core/strategies/strategy.h"
#include "transports/base/status.h"

namespace chaosbed {

// What a mirrored worker ended with (tests compare it across ranks and with a single process).
struct MirroredOutcome {
  std::vector<float> parameters;
  std::vector<float> velocity;   // SGD momentum buffer
  int64_t step = 0;              // steps applied to the parameters
  int64_t generation = 0;        // membership generation at the end
  bool left_on_notice = false;   // returned after a preemption notice (checkpoint_on_notice)
};

// Test seams, called on the training thread.
struct MirroredHooks {
  // After this member computed its gradient of `step` (inside the compute time): tests inject slowness,
  // a kill or a preemption notice at a protocol point with it.
  std::function<void(int64_t step, int64_t generation)> after_gradient;
};

// The role function: trains on ctx.data (loading it when the runtime has not) (see above).
Status runMirroredWorker(NodeContext& ctx);
// Trains on a given training set (it must outlive the call).
Result<MirroredOutcome> runMirrored(NodeContext& ctx, const data::Dataset& train, const MirroredHooks& hooks = {});

}  // namespace chaosbed
