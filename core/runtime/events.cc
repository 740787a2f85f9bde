#include "core/runtime/events.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "core/config/json_fields.h"

namespace chaosbed::events {
namespace {

using config::JsonFields;
using json = nlohmann::json;

constexpr int64_t kMaxCount = int64_t{1} << 62;  // steps, samples, versions, generations
constexpr int64_t kMaxRank = 1 << 20;
constexpr int64_t kMaxShard = 1 << 16;
constexpr double kMaxSeconds = 1e9;
constexpr size_t kMaxText = 4096;  // messages and paths a node writes (clip)
// What the reader takes: a clipped text whose bytes that were not UTF-8 became U+FFFD (3 bytes each).
constexpr size_t kMaxReadText = 3 * kMaxText;

json optional(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }

// A node's text as the reader takes it: at most kMaxText bytes (cut before a UTF-8 sequence that would not
// fit), so a long error message is shortened, never the reason its event is refused.
std::string clip(const std::string& text) {
  if (text.size() <= kMaxText) return text;
  size_t end = kMaxText - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// The fields of each event (the envelope's are NodeEvent's).
json fields(const Eval& e) {
  json j = {{"snapshot_t", e.snapshot_t}, {"step", e.step}, {"accuracy", e.accuracy}, {"loss", e.loss}};
  if (e.refined) j["refined"] = true;
  return j;
}
json fields(const MirroredCheckpoint& e) { return {{"step", e.step}, {"reason", clip(e.reason)}}; }
json fields(const ShardCheckpoint& e) { return {{"shard", e.shard}, {"version", e.version}}; }
json fields(const MirroredCheckpointFailed& e) { return {{"step", e.step}, {"error", clip(e.error)}}; }
json fields(const ShardCheckpointFailed& e) {
  return {{"shard", e.shard}, {"version", e.version}, {"error", clip(e.error)}};
}
json fields(const ShardNoticeCheckpoint& e) {
  return {{"shard", e.shard}, {"version", e.version}, {"saved", e.saved}, {"error", clip(e.error)}};
}
json fields(const ShardRestored& e) { return {{"shard", e.shard}, {"version", e.version}, {"path", clip(e.path)}}; }
json fields(const MirroredRollback& e) {
  return {{"step", e.step},
          {"from_step", optional(e.from_step)},
          {"samples_lost", e.samples_lost},
          {"generation", e.generation}};
}
json fields(const ShardRollback& e) {
  return {
      {"shard", e.shard}, {"version", e.version}, {"lost_updates", e.lost_updates}, {"samples_lost", e.samples_lost}};
}
json fields(const TotalLoss& e) { return {{"step", e.step}, {"samples", e.samples}, {"generation", e.generation}}; }
json fields(const MirroredFailureDetected& e) {
  return {{"lost_rank", e.lost_rank},
          {"step", e.step},
          {"generation", e.generation},
          {"reason", clip(e.reason)},
          {"error", clip(e.error)}};
}
json fields(const PsWorkerFailureDetected& e) { return {{"lost", e.lost}, {"status", clip(e.status)}}; }
json fields(const MirroredRecovered& e) {
  return {{"seconds", e.seconds}, {"generation", e.generation}, {"step", e.step}};
}
json fields(const PsWorkerRecovered& e) { return {{"seconds", e.seconds}}; }
json fields(const MembershipChanged& e) {
  return {{"generation", e.generation},
          {"workers", e.workers},
          {"joined", e.joined},
          {"step", e.step},
          {"seconds", e.seconds}};
}
json fields(const MirroredLeftOnNotice& e) { return {{"step", e.step}, {"generation", e.generation}}; }
json fields(const PsWorkerLeftOnNotice& e) { return {{"step", e.step}}; }
json fields(const EmulationCalibrated& e) {
  return {{"compute_seconds", e.compute_seconds},
          {"target_ratio", e.target_ratio},
          {"transfer_seconds", e.transfer_seconds}};
}
json fields(const Error& e) { return {{"message", clip(e.message)}}; }
json fields(const SimulatedReport& e) { return {{"seq", e.seq}}; }
json fields(const MembershipSeen& e) { return {{"generation", e.generation}}; }

template <class E>
const char* typeOf(const E&) {
  return E::kType;
}
const char* typeOf(const TotalLoss& e) { return e.restored ? "restored_after_total_loss" : "restart_from_scratch"; }

std::vector<int> ranks(JsonFields& f, const char* key) {
  std::vector<int> out;
  for (int64_t r : f.integers(key, 0, kMaxRank, 1 << 16)) out.push_back(int(r));
  return out;
}

// One reader per type; where two roles shape a type differently, a field only one of them writes decides.
using Reader = std::function<NodePayload(JsonFields&, const json&)>;
const std::map<std::string, Reader, std::less<>>& readers() {
  static const std::map<std::string, Reader, std::less<>> r = {
      {"eval",
       [](JsonFields& f, const json& j) -> NodePayload {
         Eval e;
         e.snapshot_t = f.number("snapshot_t", -kMaxSeconds, kMaxSeconds);
         e.step = f.integer("step", 0, kMaxCount);
         e.accuracy = f.number("accuracy", 0, 1);
         // A loss that is not finite (a diverged model) is written as null.
         e.loss = j.contains("loss") && j["loss"].is_null() ? std::nan("") : f.number("loss", 0, 1e300);
         e.refined = f.boolean("refined", false);
         return e;
       }},
      {"checkpoint",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (j.contains("shard"))
           return ShardCheckpoint{int(f.integer("shard", 0, kMaxShard)), f.integer("version", 0, kMaxCount)};
         return MirroredCheckpoint{f.integer("step", 0, kMaxCount), f.string("reason", kMaxReadText)};
       }},
      {"checkpoint_failed",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (j.contains("shard"))
           return ShardCheckpointFailed{int(f.integer("shard", 0, kMaxShard)), f.integer("version", 0, kMaxCount),
                                        f.string("error", kMaxReadText)};
         return MirroredCheckpointFailed{f.integer("step", 0, kMaxCount), f.string("error", kMaxReadText)};
       }},
      {"notice_checkpoint",
       [](JsonFields& f, const json&) -> NodePayload {
         return ShardNoticeCheckpoint{int(f.integer("shard", 0, kMaxShard)), f.integer("version", 0, kMaxCount),
                                      f.boolean("saved"), f.string("error", kMaxReadText)};
       }},
      {"restored",
       [](JsonFields& f, const json&) -> NodePayload {
         return ShardRestored{int(f.integer("shard", 0, kMaxShard)), f.integer("version", 0, kMaxCount),
                              f.string("path", kMaxReadText)};
       }},
      {"rollback",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (j.contains("shard"))
           return ShardRollback{int(f.integer("shard", 0, kMaxShard)), f.integer("version", 0, kMaxCount),
                                f.integer("lost_updates", 0, kMaxCount), f.integer("samples_lost", 0, kMaxCount)};
         MirroredRollback e;
         e.step = f.integer("step", 0, kMaxCount);
         if (!(j.contains("from_step") && j["from_step"].is_null())) e.from_step = f.integer("from_step", 0, kMaxCount);
         e.samples_lost = f.integer("samples_lost", 0, kMaxCount);
         e.generation = f.integer("generation", 0, kMaxCount);
         return e;
       }},
      {"restored_after_total_loss",
       [](JsonFields& f, const json&) -> NodePayload {
         return TotalLoss{true, f.integer("step", 0, kMaxCount), f.integer("samples", 0, kMaxCount),
                          f.integer("generation", 0, kMaxCount)};
       }},
      {"restart_from_scratch",
       [](JsonFields& f, const json&) -> NodePayload {
         return TotalLoss{false, f.integer("step", 0, kMaxCount), f.integer("samples", 0, kMaxCount),
                          f.integer("generation", 0, kMaxCount)};
       }},
      {"failure_detected",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (j.contains("lost"))
           return PsWorkerFailureDetected{int(f.integer("lost", -1, kMaxRank)), f.string("status", kMaxReadText)};
         return MirroredFailureDetected{int(f.integer("lost_rank", -1, kMaxRank)), f.integer("step", 0, kMaxCount),
                                        f.integer("generation", 0, kMaxCount), f.string("reason", kMaxReadText),
                                        f.string("error", kMaxReadText)};
       }},
      {"recovered",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (!j.contains("generation")) return PsWorkerRecovered{f.number("seconds", 0, kMaxSeconds)};
         return MirroredRecovered{f.number("seconds", 0, kMaxSeconds), f.integer("generation", 0, kMaxCount),
                                  f.integer("step", 0, kMaxCount)};
       }},
      {"membership_changed",
       [](JsonFields& f, const json&) -> NodePayload {
         MembershipChanged e;
         e.generation = f.integer("generation", 0, kMaxCount);
         e.workers = ranks(f, "workers");
         e.joined = ranks(f, "joined");
         e.step = f.integer("step", 0, kMaxCount);
         e.seconds = f.number("seconds", 0, kMaxSeconds);
         return e;
       }},
      {"left_on_notice",
       [](JsonFields& f, const json& j) -> NodePayload {
         if (!j.contains("generation")) return PsWorkerLeftOnNotice{f.integer("step", 0, kMaxCount)};
         return MirroredLeftOnNotice{f.integer("step", 0, kMaxCount), f.integer("generation", 0, kMaxCount)};
       }},
      {"emulation_calibrated",
       [](JsonFields& f, const json&) -> NodePayload {
         return EmulationCalibrated{f.number("compute_seconds", 0, kMaxSeconds), f.number("target_ratio", 0, 1e9),
                                    f.number("transfer_seconds", 0, kMaxSeconds)};
       }},
      {"error", [](JsonFields& f, const json&) -> NodePayload { return Error{f.string("message", kMaxReadText)}; }},
      {"simulated.report",
       [](JsonFields& f, const json&) -> NodePayload { return SimulatedReport{f.integer("seq", 0, kMaxCount)}; }},
      {"membership.seen",
       [](JsonFields& f, const json&) -> NodePayload { return MembershipSeen{f.integer("generation", 0, kMaxCount)}; }},
  };
  return r;
}

}  // namespace

json toJson(const ChaosAction& e) {
  json j = {{"type", e.type}, {"fault_id", e.fault_id}, {"name", e.name},
            {"kind", e.kind}, {"node", e.node},         {"action", e.action}};
  auto put = [&j](const char* key, const auto& v) {
    if (v) j[key] = *v;
  };
  put("planned_s", e.planned_s);
  put("trigger", e.trigger);
  put("offset_s", e.offset_s);
  put("planned_mono_ns", e.planned_mono_ns);
  put("delay_ms", e.delay_ms);
  put("params", e.params);
  put("by", e.by);
  put("error", e.error);
  put("mono_ns", e.mono_ns);
  put("wall_ns", e.wall_ns);
  return j;
}
json toJson(const ChaosHealed& e) {
  json j = {{"type", ChaosHealed::kType},
            {"fault_id", e.fault_id},
            {"name", e.name},
            {"kind", e.kind},
            {"node", e.node},
            {"op", e.op},
            {"by", e.by}};
  if (e.error) j["error"] = *e.error;
  return j;
}
json toJson(const ChaosLeaseLapsed& e) {
  return {{"type", ChaosLeaseLapsed::kType}, {"healed", e.healed}, {"mono_ns", e.mono_ns}, {"wall_ns", e.wall_ns}};
}
json toJson(const ChaosAgentReplaced& e) {
  json j = {{"type", e.pid ? "chaos.agent_restarted" : "chaos.agent_lost"},
            {"old_pid", e.old_pid},
            {"mono_ns", e.mono_ns},
            {"wall_ns", e.wall_ns}};
  if (e.pid) j["pid"] = *e.pid;
  if (e.error) j["error"] = *e.error;
  return j;
}

json toJson(const RunStarted& e) { return {{"type", RunStarted::kType}, {"start_ns", e.start_ns}}; }
json toJson(const RunStopped& e) { return {{"type", RunStopped::kType}, {"reason", e.reason}, {"t", e.t}}; }
json toJson(const NodeExited& e) {
  return {{"type", NodeExited::kType}, {"node", e.node}, {"how", e.how}, {"by_chaos", e.by_chaos}, {"t", e.t}};
}
json toJson(const NodeRestarted& e) {
  return {{"type", NodeRestarted::kType}, {"node", e.node}, {"incarnation", e.incarnation}, {"t", e.t}};
}
json toJson(const NodeLost& e) {
  return {{"type", NodeLost::kType},
          {"node", e.node},
          {"silent_since_s", e.silent_since_s},
          {"timeout_s", e.timeout_s},
          {"t", e.t}};
}
json toJson(const MembershipPublished& e) {
  return {{"type", MembershipPublished::kType}, {"membership", e.membership.toJson()}, {"t", e.t}};
}
json toJson(const RecoveryBooked& e) {
  return {{"type", RecoveryBooked::kType}, {"seconds", e.seconds}, {"cause", e.cause}, {"t", e.t}};
}

const char* typeName(const NodePayload& e) {
  return std::visit([](const auto& ev) { return typeOf(ev); }, e);
}

json toJson(const NodeEvent& e) {
  json j = std::visit([](const auto& ev) { return fields(ev); }, e.what);
  j["type"] = typeName(e.what);
  j["node"] = e.node;
  j["incarnation"] = e.incarnation;
  j["t"] = e.t;
  return j;
}

Result<NodeEvent> decodeNodeEvent(std::string_view text) {
  CHAOSBED_ASSIGN_OR_RETURN(json j, config::parseJson(text, "event", 64 * 1024));
  JsonFields f(j, "event");
  const std::string type = f.string("type", 64);
  NodeEvent e;
  e.node = f.string("node", 64);
  e.incarnation = f.integer("incarnation", 0, kMaxCount);
  e.t = f.number("t", -kMaxSeconds, kMaxSeconds);  // another host's clock may run behind the controller's
  CHAOSBED_RETURN_IF_ERROR(f.status());
  const auto reader = readers().find(type);
  if (reader == readers().end())
    return Status::invalidArgument("event: type: unknown type '" + config::excerpt(type) + "'");
  e.what = reader->second(f, j);
  CHAOSBED_RETURN_IF_ERROR(f.status());
  // Every field must be one its type has: written back, the event has them all.
  const json back = toJson(e);
  for (const auto& [key, value] : j.items())
    if (!back.contains(key))
      return Status::invalidArgument("event: " + config::excerpt(key) + ": not a field of '" + type + "'");
  return e;
}

}  // namespace chaosbed::events
