#pragma once
// Link commands: how the controller tells a node to shape its links (chaos `link` faults), and how the node
// answers. Both sides use this module; the store keys are in core/runtime/control.h
// (link/<node>/count, link/<node>/<i>, link/<node>/ack/<i>).
//
// Command (JSON object):
//   {"op": "set" | "clear", "peers": [node names], "bandwidth_mbps": B, "latency_ms": L, "partition": P}
//   {"op": "error", "fault": id, "incarnation": I, "peers": [...], "error": E, "nth": N, "count": C}
//       transport_error faults: E is fail_send | fail_recv | drop | break_peer | abort_collective; peers
//       empty = any peer; N, C >= 1. Only process I of the node applies it: a replacement, which replays
//       the node's commands from the first (link shaping outlives a process), starts with a sound transport.
//   {"op": "clear_errors", "fault": id}                                              its rules removed
//   op and peers are required; bandwidth_mbps (0 = uncapped, else [kMinLinkBandwidthMbps,
//   kMaxLinkBandwidthMbps]), latency_ms ([0, kMaxLinkLatencyMs]) and partition (boolean) are optional
//   (0, 0, false) and ignored by "clear". Anything else (null, a string where a number belongs, NaN or
//   infinity, an out-of-range value, a non-string peer, more than kMaxLinkPeers peers) makes the whole
//   command invalid: the node applies nothing of it.
//
// Acknowledgement (the value of link/<node>/ack/<i>): the node answers every command it read, so the
// controller never waits for an answer that cannot come:
//   "1"                  applied
//   "rejected: <why>"    not applied (or applied in part when the shaper refused a peer): malformed, or the
//                        node's shaper refused it; <why> is one line of at most kMaxAckReason bytes
// decodeLinkAck() turns an ack into OK, or InvalidArgument carrying <why>; any other value is DataLoss.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed {

inline constexpr double kMaxLinkLatencyMs = 3'600'000.0;     // one hour of added one-way delay
inline constexpr double kMinLinkBandwidthMbps = 1e-3;        // 1 kbit/s: below it a message would wait ~forever
inline constexpr double kMaxLinkBandwidthMbps = 10'000'000.0;  // 10 Tbit/s
inline constexpr size_t kMaxLinkPeers = 4096;
inline constexpr size_t kMaxNodeNameBytes = 128;
inline constexpr size_t kMaxLinkCommandBytes = 256 * 1024;
inline constexpr size_t kMaxAckReason = 300;

struct LinkCommand {
  enum class Op { kSet, kClear, kError, kClearErrors };
  Op op = Op::kSet;
  std::vector<std::string> peers;
  double bandwidth_mbps = 0;  // 0: uncapped
  double latency_ms = 0;
  bool partition = false;
  // kError / kClearErrors
  uint64_t fault = 0;
  int64_t incarnation = 0;  // kError: the process it is for (0: the node's first)
  std::string error{};
  int64_t nth = 1;
  int64_t count = 1;

  bool operator==(const LinkCommand&) const = default;
};

std::string encodeLinkCommand(const LinkCommand& command);
// Never throws; InvalidArgument "link command: <field>: <problem>" for anything but a valid command.
Result<LinkCommand> decodeLinkCommand(std::string_view text);

inline constexpr char kLinkAckApplied[] = "1";
// "1" for OK, else "rejected: " + the status's message (one line, truncated to kMaxAckReason).
std::string encodeLinkAck(const Status& outcome);
// OK for "1"; InvalidArgument("rejected: <why>") for a rejection; DataLoss for anything else.
Status decodeLinkAck(std::string_view ack);

}  // namespace chaosbed
