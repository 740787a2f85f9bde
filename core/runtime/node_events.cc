#include "core/runtime/node_events.h"

namespace chaosbed::node_events {

const char* typeOf(const TotalLoss& e) { return e.restored ? "restored_after_total_loss" : "restart_from_scratch"; }

nlohmann::json toJson(const Eval& e) {
  nlohmann::json j = {{"snapshot_t", e.snapshot_t}, {"step", e.step}, {"accuracy", e.accuracy}, {"loss", e.loss}};
  if (e.refined) j["refined"] = true;
  return j;
}
nlohmann::json toJson(const MirroredCheckpoint& e) { return {{"step", e.step}, {"reason", e.reason}}; }
nlohmann::json toJson(const ShardCheckpoint& e) { return {{"shard", e.shard}, {"version", e.version}}; }
nlohmann::json toJson(const MirroredCheckpointFailed& e) { return {{"step", e.step}, {"error", e.error}}; }
nlohmann::json toJson(const ShardCheckpointFailed& e) {
  return {{"shard", e.shard}, {"version", e.version}, {"error", e.error}};
}
nlohmann::json toJson(const ShardNoticeCheckpoint& e) {
  return {{"shard", e.shard}, {"version", e.version}, {"saved", e.saved}, {"error", e.error}};
}
nlohmann::json toJson(const ShardRestored& e) { return {{"shard", e.shard}, {"version", e.version}, {"path", e.path}}; }
nlohmann::json toJson(const MirroredRollback& e) {
  return {{"step", e.step},
          {"from_step", e.from_step ? nlohmann::json(*e.from_step) : nlohmann::json(nullptr)},
          {"samples_lost", e.samples_lost},
          {"generation", e.generation}};
}
nlohmann::json toJson(const ShardRollback& e) {
  return {{"shard", e.shard}, {"version", e.version}, {"lost_updates", e.lost_updates}, {"samples_lost", e.samples_lost}};
}
nlohmann::json toJson(const TotalLoss& e) {
  return {{"step", e.step}, {"samples", e.samples}, {"generation", e.generation}};
}
nlohmann::json toJson(const MirroredFailureDetected& e) {
  return {{"lost_rank", e.lost_rank}, {"step", e.step}, {"generation", e.generation}, {"reason", e.reason},
          {"error", e.error}};
}
nlohmann::json toJson(const PsWorkerFailureDetected& e) { return {{"lost", e.lost}, {"status", e.status}}; }
nlohmann::json toJson(const MirroredRecovered& e) {
  return {{"seconds", e.seconds}, {"generation", e.generation}, {"step", e.step}};
}
nlohmann::json toJson(const PsWorkerRecovered& e) { return {{"seconds", e.seconds}}; }
nlohmann::json toJson(const MembershipChanged& e) {
  return {{"generation", e.generation}, {"workers", e.workers}, {"joined", e.joined}, {"step", e.step},
          {"seconds", e.seconds}};
}
nlohmann::json toJson(const MirroredLeftOnNotice& e) { return {{"step", e.step}, {"generation", e.generation}}; }
nlohmann::json toJson(const PsWorkerLeftOnNotice& e) { return {{"step", e.step}}; }
nlohmann::json toJson(const EmulationCalibrated& e) {
  return {{"compute_seconds", e.compute_seconds}, {"target_ratio", e.target_ratio},
          {"transfer_seconds", e.transfer_seconds}};
}
nlohmann::json toJson(const Error& e) { return {{"message", e.message}}; }
nlohmann::json toJson(const SimulatedReport& e) { return {{"seq", e.seq}}; }
nlohmann::json toJson(const MembershipSeen& e) { return {{"generation", e.generation}}; }

}  // namespace chaosbed::node_events
