#pragma once
// The evaluator role: receives parameter snapshots and measures test accuracy off the training critical
// path (docs/design.md: TTA counts the snapshot's time, not the evaluation's).
// - mirrored: the lowest live worker sends whole-model snapshots (kSnapshotTag, core/strategies/tags.h);
// - parameter_server: every server sends its shard at each tick (kShardSnapshotTag); the evaluator
//   evaluates the model once every shard has sent a newer copy (core/strategies/shard_assembly.h; a dead
//   server's range waits for its replacement).
// Every evaluated snapshot becomes an "eval" control event {snapshot_t, step, accuracy, loss}, which the
// controller turns into the time series, TTA and the stop decision. The role runs until the controller
// says stop, then evaluates what it already holds (bounded) and returns.

#include "core/strategies/strategy.h"

namespace chaosbed {

Status runEvaluator(NodeContext& ctx);

}  // namespace chaosbed
