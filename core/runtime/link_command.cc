#include "core/runtime/link_command.h"

#include <nlohmann/json.hpp>

#include "core/config/json_fields.h"

namespace chaosbed {

namespace {
constexpr char kRejected[] = "rejected: ";
}  // namespace

std::string encodeLinkCommand(const LinkCommand& c) {
  nlohmann::json j = {{"op", c.op == LinkCommand::Op::kSet ? "set" : "clear"}, {"peers", c.peers}};
  if (c.op == LinkCommand::Op::kSet) {
    j["bandwidth_mbps"] = c.bandwidth_mbps;
    j["latency_ms"] = c.latency_ms;
    j["partition"] = c.partition;
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<LinkCommand> decodeLinkCommand(std::string_view text) {
  CHAOSBED_ASSIGN_OR_RETURN(nlohmann::json j, config::parseJson(text, "link command", kMaxLinkCommandBytes));
  config::JsonFields f(j, "link command");
  LinkCommand c;
  const std::string op = f.string("op", 16);
  if (f.ok() && op != "set" && op != "clear")
    f.error("op", "expected \"set\" or \"clear\", got \"" + config::excerpt(op) + "\"");
  c.op = op == "clear" ? LinkCommand::Op::kClear : LinkCommand::Op::kSet;
  c.peers = f.strings("peers", kMaxNodeNameBytes, kMaxLinkPeers);
  // Checked for a "clear" as well: a command with a malformed field is malformed, whatever its op.
  c.bandwidth_mbps = f.number("bandwidth_mbps", 0, kMaxLinkBandwidthMbps, 0.0);
  c.latency_ms = f.number("latency_ms", 0, kMaxLinkLatencyMs, 0.0);
  c.partition = f.boolean("partition", false);
  if (f.ok() && c.bandwidth_mbps > 0 && c.bandwidth_mbps < kMinLinkBandwidthMbps)
    f.error("bandwidth_mbps", "must be 0 (uncapped) or at least " + std::to_string(kMinLinkBandwidthMbps));
  CHAOSBED_RETURN_IF_ERROR(f.status());
  if (c.op == LinkCommand::Op::kClear) {
    c.bandwidth_mbps = 0;
    c.latency_ms = 0;
    c.partition = false;
  }
  return c;
}

std::string encodeLinkAck(const Status& outcome) {
  if (outcome.isOk()) return kLinkAckApplied;
  std::string why = config::excerpt(outcome.message(), kMaxAckReason);
  return kRejected + why;
}

Status decodeLinkAck(std::string_view ack) {
  if (ack == kLinkAckApplied) return Status::ok();
  if (ack.substr(0, sizeof kRejected - 1) == kRejected)
    return Status::invalidArgument(config::excerpt(ack, kMaxAckReason + sizeof kRejected));
  return Status::dataLoss("malformed link acknowledgement: " + config::excerpt(ack));
}

}  // namespace chaosbed
