#include "core/runtime/link_command.h"

#include <algorithm>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/config/json_fields.h"

namespace chaosbed {

namespace {
constexpr char kRejected[] = "rejected: ";
}  // namespace

namespace {
const char* opName(LinkCommand::Op op) {
  switch (op) {
    case LinkCommand::Op::kSet: return "set";
    case LinkCommand::Op::kClear: return "clear";
    case LinkCommand::Op::kError: return "error";
    case LinkCommand::Op::kClearErrors: return "clear_errors";
  }
  return "?";
}
constexpr const char* kErrors[] = {"fail_send", "fail_recv", "drop", "break_peer", "abort_collective"};
constexpr int64_t kMaxNth = 1'000'000'000;
}  // namespace

std::string encodeLinkCommand(const LinkCommand& c) {
  nlohmann::json j = {{"op", opName(c.op)}, {"peers", c.peers}};
  if (c.op == LinkCommand::Op::kError || c.op == LinkCommand::Op::kClearErrors) j["fault"] = c.fault;
  if (c.op == LinkCommand::Op::kError) {
    j["incarnation"] = c.incarnation;
    j["error"] = c.error;
    j["nth"] = c.nth;
    j["count"] = c.count;
  }
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
  bool known = false;
  for (auto o : {LinkCommand::Op::kSet, LinkCommand::Op::kClear, LinkCommand::Op::kError, LinkCommand::Op::kClearErrors})
    if (op == opName(o)) c.op = o, known = true;
  if (f.ok() && !known)
    f.error("op", "expected \"set\", \"clear\", \"error\" or \"clear_errors\", got \"" + config::excerpt(op) + "\"");
  const bool error_op = c.op == LinkCommand::Op::kError || c.op == LinkCommand::Op::kClearErrors;
  c.peers = error_op ? f.strings("peers", kMaxNodeNameBytes, kMaxLinkPeers, std::vector<std::string>{})
                     : f.strings("peers", kMaxNodeNameBytes, kMaxLinkPeers);
  if (error_op)
    c.fault = uint64_t(f.integer("fault", 0, int64_t{1} << 40));
  if (c.op == LinkCommand::Op::kError) {
    c.incarnation = f.integer("incarnation", 0, int64_t{1} << 40);
    c.error = f.string("error", 32);
    if (f.ok() && std::find(std::begin(kErrors), std::end(kErrors), c.error) == std::end(kErrors))
      f.error("error", "not one of fail_send, fail_recv, drop, break_peer, abort_collective: \"" +
                           config::excerpt(c.error) + "\"");
    c.nth = f.integer("nth", 1, kMaxNth, 1);
    c.count = f.integer("count", 1, kMaxNth, 1);
  }
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
