#pragma once
// The events a node appends to the control plane (ControlChannel::record), one struct per shape: what each
// carries is here, and each is serialised by one function. The controller adds the strategy and forwards
// them to events.jsonl; docs/events.schema.json publishes them (with the controller's and chaos's own), and
// the tests hold every event they provoke to it. Where two roles write one type differently (a mirrored
// worker's checkpoint and a server shard's) each has its own struct; the schema has one shape per struct.
//
// Every event also carries node, incarnation and t (ControlChannel::event).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace chaosbed::node_events {

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
  std::optional<int64_t> from_step;  // none: this worker held no state (a replacement)
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

// The type and the fields of each (node, incarnation and t are the channel's).
template <class Event>
const char* typeOf(const Event&) {
  return Event::kType;
}
const char* typeOf(const TotalLoss& e);

nlohmann::json toJson(const Eval& e);
nlohmann::json toJson(const MirroredCheckpoint& e);
nlohmann::json toJson(const ShardCheckpoint& e);
nlohmann::json toJson(const MirroredCheckpointFailed& e);
nlohmann::json toJson(const ShardCheckpointFailed& e);
nlohmann::json toJson(const ShardNoticeCheckpoint& e);
nlohmann::json toJson(const ShardRestored& e);
nlohmann::json toJson(const MirroredRollback& e);
nlohmann::json toJson(const ShardRollback& e);
nlohmann::json toJson(const TotalLoss& e);
nlohmann::json toJson(const MirroredFailureDetected& e);
nlohmann::json toJson(const PsWorkerFailureDetected& e);
nlohmann::json toJson(const MirroredRecovered& e);
nlohmann::json toJson(const PsWorkerRecovered& e);
nlohmann::json toJson(const MembershipChanged& e);
nlohmann::json toJson(const MirroredLeftOnNotice& e);
nlohmann::json toJson(const PsWorkerLeftOnNotice& e);
nlohmann::json toJson(const EmulationCalibrated& e);
nlohmann::json toJson(const Error& e);
nlohmann::json toJson(const SimulatedReport& e);
nlohmann::json toJson(const MembershipSeen& e);

}  // namespace chaosbed::node_events
