#pragma once
// The events of a run's events.jsonl, one struct per shape, each serialised by one function (events.cc);
// docs/events.schema.json publishes them, and the tests hold every event they provoke to it.
//
// Node events: what a node appends to the control plane (ControlChannel::record). Each also carries node,
// incarnation and t (NodeEvent). The controller reads them back with checks (decodeNodeEvent: the store is
// untrusted), adds the strategy and records them. Where two roles write one type differently (a mirrored
// worker's checkpoint and a server shard's) each has its own struct; the schema has one shape per struct.
//
// The controller's events (experiments/run): what it saw and did to a strategy's nodes; the supervisor adds
// the strategy. The chaos controller's (chaos/): what it planned, did and healed. A fault episode is serialised
// by experiments/run/fault_episodes.h, which summary.json shares.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/control/membership.h"
#include "transports/base/status.h"

namespace chaosbed::events {

// ------------------------------------------------------------------------------------------ node events

// The evaluator's accuracy of one parameter snapshot: snapshot_t is the run time of the snapshot, step the
// gradients it holds; refined: a held snapshot evaluated after a paced evaluation crossed the target.
struct Eval {
  static constexpr const char* kType = "eval";
  double snapshot_t = 0;
  int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
  bool refined = false;
};

struct MirroredCheckpoint {
  static constexpr const char* kType = "checkpoint";
  int64_t step = 0;
  std::string reason;  // "interval", "notice", ...
};
struct ShardCheckpoint {
  static constexpr const char* kType = "checkpoint";
  int shard = 0;
  int64_t version = 0;
};
struct MirroredCheckpointFailed {
  static constexpr const char* kType = "checkpoint_failed";
  int64_t step = 0;
  std::string error;
};
struct ShardCheckpointFailed {
  static constexpr const char* kType = "checkpoint_failed";
  int shard = 0;
  int64_t version = 0;
  std::string error;
};
// A preempted server shard's save at its notice.
struct ShardNoticeCheckpoint {
  static constexpr const char* kType = "notice_checkpoint";
  int shard = 0;
  int64_t version = 0;
  bool saved = false;
  std::string error;  // "" when saved
};
// A server shard restored from a checkpoint file.
struct ShardRestored {
  static constexpr const char* kType = "restored";
  int shard = 0;
  int64_t version = 0;
  std::string path;
};

// Training state restored to an earlier point: samples_lost were trained and are not in the model.
struct MirroredRollback {
  static constexpr const char* kType = "rollback";
  int64_t step = 0;
  std::optional<int64_t> from_step = std::nullopt;  // none: this worker held no state (a replacement)
  int64_t samples_lost = 0;
  int64_t generation = 0;
};
struct ShardRollback {
  static constexpr const char* kType = "rollback";
  int shard = 0;
  int64_t version = 0;
  int64_t lost_updates = 0;
  int64_t samples_lost = 0;
};

// Every worker of an elastic generation was lost: the next one restored the newest checkpoint (restored), or
// found none and starts from the seed.
struct TotalLoss {
  bool restored = false;  // the type: "restored_after_total_loss" or "restart_from_scratch"
  int64_t step = 0;
  int64_t samples = 0;
  int64_t generation = 0;
};

// A worker saw a peer fail. A rank is -1 where the error names none.
struct MirroredFailureDetected {
  static constexpr const char* kType = "failure_detected";
  int lost_rank = -1;
  int64_t step = 0;
  int64_t generation = 0;
  std::string reason;
  std::string error;
};
struct PsWorkerFailureDetected {
  static constexpr const char* kType = "failure_detected";
  int lost = -1;
  std::string status;
};

// A worker trains again, seconds after it saw a failure.
struct MirroredRecovered {
  static constexpr const char* kType = "recovered";
  double seconds = 0;
  int64_t generation = 0;
  int64_t step = 0;
};
struct PsWorkerRecovered {
  static constexpr const char* kType = "recovered";
  double seconds = 0;
};

// A mirrored worker entered a new generation.
struct MembershipChanged {
  static constexpr const char* kType = "membership_changed";
  int64_t generation = 0;
  std::vector<int> workers;
  std::vector<int> joined;
  int64_t step = 0;
  double seconds = 0;
};

// A worker left at a preemption notice, after its step.
struct MirroredLeftOnNotice {
  static constexpr const char* kType = "left_on_notice";
  int64_t step = 0;
  int64_t generation = 0;
};
struct PsWorkerLeftOnNotice {
  static constexpr const char* kType = "left_on_notice";
  int64_t step = 0;
};

// workload.emulate measured a step's compute and set the transfer it emulates.
struct EmulationCalibrated {
  static constexpr const char* kType = "emulation_calibrated";
  double compute_seconds = 0;
  double target_ratio = 0;
  double transfer_seconds = 0;
};

// A node's role ended with an error.
struct Error {
  static constexpr const char* kType = "error";
  std::string message;
};

// A simulated node's report and the generations it sees (control-plane scale runs).
struct SimulatedReport {
  static constexpr const char* kType = "simulated.report";
  int64_t seq = 0;
};
struct MembershipSeen {
  static constexpr const char* kType = "membership.seen";
  int64_t generation = 0;
};

// One event as the store carries it: who wrote it (node, incarnation: its predecessors), when (t: run seconds)
// and what. The writer (ControlChannel) and the reader (the controller) share this, so a line has one format.
using NodePayload = std::variant<Eval, MirroredCheckpoint, ShardCheckpoint, MirroredCheckpointFailed,
                                 ShardCheckpointFailed, ShardNoticeCheckpoint, ShardRestored, MirroredRollback,
                                 ShardRollback, TotalLoss, MirroredFailureDetected, PsWorkerFailureDetected,
                                 MirroredRecovered, PsWorkerRecovered, MembershipChanged, MirroredLeftOnNotice,
                                 PsWorkerLeftOnNotice, EmulationCalibrated, Error, SimulatedReport, MembershipSeen>;
struct NodeEvent {
  std::string node;
  int64_t incarnation = 0;
  double t = 0;
  NodePayload what;
};

// The event's "type" ("eval", "checkpoint", ...).
const char* typeName(const NodePayload& e);
// The line: {"type", "node", "incarnation", "t", ...the event's fields}.
nlohmann::json toJson(const NodeEvent& e);
// A line read back from the store, which is untrusted: InvalidArgument ("event: <field>: <problem>") for a
// malformed one, an unknown type, or a field its type does not have.
Result<NodeEvent> decodeNodeEvent(std::string_view text);

// ------------------------------------------------------------------------------ the controller's events

// A strategy's run begins: start_ns is the CLOCK_REALTIME origin of every t.
struct RunStarted {
  static constexpr const char* kType = "run.start";
  int64_t start_ns = 0;
};
// A strategy's run ends, and why ("target", "time_limit", ...).
struct RunStopped {
  static constexpr const char* kType = "run.stop";
  std::string reason;
  double t = 0;
};
// A node's process ended: how (exit status or signal), and whether a chaos action ended it.
struct NodeExited {
  static constexpr const char* kType = "node.exited";
  std::string node;
  std::string how;
  bool by_chaos = false;
  double t = 0;
};
// A node was replaced; incarnation counts its predecessors.
struct NodeRestarted {
  static constexpr const char* kType = "node.restarted";
  std::string node;
  int incarnation = 0;
  double t = 0;
};
// The failure detector declared a silent node lost (it is fenced next).
struct NodeLost {
  static constexpr const char* kType = "node.lost";
  std::string node;
  double silent_since_s = 0;
  double timeout_s = 0;
  double t = 0;
};
// A generation of mirrored workers, published.
struct MembershipPublished {
  static constexpr const char* kType = "membership";
  Membership membership;
  double t = 0;
};
// A recovery of the strategy, booked: seconds long, and its cause.
struct RecoveryBooked {
  static constexpr const char* kType = "recovery";
  double seconds = 0;
  std::string cause;
  double t = 0;
};

// Each with its "type".
nlohmann::json toJson(const RunStarted& e);
nlohmann::json toJson(const RunStopped& e);
nlohmann::json toJson(const NodeExited& e);
nlohmann::json toJson(const NodeRestarted& e);
nlohmann::json toJson(const NodeLost& e);
nlohmann::json toJson(const MembershipPublished& e);
nlohmann::json toJson(const RecoveryBooked& e);

// ------------------------------------------------------------------------ the chaos controller's events

// One action of the plan (chaos/model/fault.h): planned ("chaos.planned", one per action when the run starts)
// or what became of it ("chaos.applied", "chaos.escalated", "chaos.reverted", "chaos.replaced",
// "chaos.skipped": its node was gone, "chaos.failed").
struct ChaosAction {
  std::string type;
  uint64_t fault_id = 0;
  std::string name;
  std::string kind;  // the fault kind ("kill", "pause", ...)
  std::string node;
  std::string action;                                 // "apply", "escalate", "revert", "replace"
  std::optional<double> planned_s = std::nullopt;     // run seconds of a timed action
  std::optional<std::string> trigger = std::nullopt;  // a triggered action's trigger ("worker-0 step 150")...
  std::optional<double> offset_s = std::nullopt;      // ...and its offset after it (planned only)
  std::optional<int64_t> planned_mono_ns = std::nullopt;
  std::optional<double> delay_ms = std::nullopt;        // how late it was done, against the plan
  std::optional<nlohmann::json> params = std::nullopt;  // an apply's parameters, and who carried it out ("via")
  std::optional<std::string> by = std::nullopt;         // a revert not at its time: "stop", "agent: lease lapsed"
  std::optional<std::string> error = std::nullopt;
  // When it was done (CLOCK_MONOTONIC, CLOCK_REALTIME); absent: when the line is written.
  std::optional<int64_t> mono_ns = std::nullopt;
  std::optional<int64_t> wall_ns = std::nullopt;
};
// A fault undone by crash safety, one heal operation each (chaos/actuators/heal.h): by "stop", the agent or
// the cleanup of a previous run.
struct ChaosHealed {
  static constexpr const char* kType = "chaos.healed";
  uint64_t fault_id = 0;
  std::string name;
  std::string kind;
  std::string node;
  std::string op;  // "thaw", "cpu_limit", "sigcont"
  std::string by;
  std::optional<std::string> error = std::nullopt;
};
// The controller stalled past its lease and the agent healed `healed` faults.
struct ChaosLeaseLapsed {
  static constexpr const char* kType = "chaos.lease_lapsed";
  int healed = 0;
  int64_t mono_ns = 0;
  int64_t wall_ns = 0;
};
// The chaos agent died: another was started ("chaos.agent_restarted", pid), or none could be
// ("chaos.agent_lost", error).
struct ChaosAgentReplaced {
  int64_t old_pid = 0;
  std::optional<int64_t> pid = std::nullopt;
  std::optional<std::string> error = std::nullopt;
  int64_t mono_ns = 0;
  int64_t wall_ns = 0;
};

// Each with its "type".
nlohmann::json toJson(const ChaosAction& e);
nlohmann::json toJson(const ChaosHealed& e);
nlohmann::json toJson(const ChaosLeaseLapsed& e);
nlohmann::json toJson(const ChaosAgentReplaced& e);

}  // namespace chaosbed::events
