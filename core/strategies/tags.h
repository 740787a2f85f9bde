#pragma once
// Point-to-point tags of the strategies, and the wire format of the messages that other roles receive.
// Strategy tags keep bit 47 clear (transports/collective.h reserves it for collectives):
//   bits 46..44 : message kind (kSnapshotKind, ...)
//   bits 43..32 : membership generation mod 2^12 (0 for kinds that outlive generations)
//   bits 31..0  : training step mod 2^32 (0 for kinds without a step)
// so a message of an aborted step or an older generation never matches a newer receive.
//
// Parameter snapshots (worker -> evaluator, for time-to-accuracy)
//   One message with tag kSnapshotTag: a SnapshotHeader (24 bytes, host byte order) immediately followed by
//   param_count floats, the flat parameter buffer of core/model/mlp.h. The evaluator receives it with
//   kAnyPeer into a buffer of snapshotMessageBytes(param_count) bytes; source() is the sending worker.
//   Senders never block training on it: a snapshot is skipped while the previous one is still in flight.

#include <cstddef>
#include <cstdint>

#include "transports/collective.h"
#include "transports/transport.h"

namespace chaosbed {

enum class StrategyMessage : uint8_t {
  kSnapshot = 1,         // worker -> evaluator, SnapshotHeader + params
  kMirroredReady = 2,    // mirrored backup workers: member -> coordinator, the step header
  kMirroredDecision = 3, // coordinator -> members: the included set and the agreed flags of a step
  kMirroredGradient = 4, // coordinator -> excluded members: the reduced gradient of a step
  kShardSnapshot = 5,    // parameter server -> evaluator, ShardSnapshotHeader + the shard's params
  kPsRequest = 6,        // parameter server: worker -> server, PsRequestHeader [+ gradient slice]
  kPsReply = 7,          // parameter server: server -> worker, PsReplyHeader + parameter slice
};

inline constexpr int kStrategyKindShift = 44;
inline constexpr int kStrategyGenerationShift = 32;

// The tag of message `kind` of `step` in membership `generation`.
inline constexpr Tag strategyTag(StrategyMessage kind, int64_t generation, int64_t step) {
  return (Tag{static_cast<uint8_t>(kind)} << kStrategyKindShift) |
         ((static_cast<Tag>(generation) & 0xfff) << kStrategyGenerationShift) |
         (static_cast<Tag>(step) & 0xffffffffu);
}

inline constexpr Tag kSnapshotTag = strategyTag(StrategyMessage::kSnapshot, 0, 0);
static_assert(kSnapshotTag <= kMaxP2pTag);
static_assert(strategyTag(StrategyMessage::kMirroredGradient, 0xfff, 0xffffffff) <= kMaxP2pTag);

struct SnapshotHeader {
  int64_t step = 0;         // mini-batch gradients applied to these parameters
  int64_t realtime_ns = 0;  // CLOCK_REALTIME when the parameters were copied (the snapshot's TTA time)
  int64_t param_count = 0;  // floats that follow
};
static_assert(sizeof(SnapshotHeader) == 24);

inline constexpr size_t snapshotMessageBytes(size_t param_count) {
  return sizeof(SnapshotHeader) + param_count * sizeof(float);
}

// Parameter-server snapshots (server -> evaluator). Every eval_interval_s each server sends its shard, taken
// at the tick boundary t0 + tick * eval_interval_s (or, with eval_interval_steps N, once it has applied
// tick * N workers' gradients), with tag kShardSnapshotTag: a ShardSnapshotHeader
// followed by count floats, which belong at [offset, offset + count) of the flat parameter buffer. The
// evaluator assembles the latest copy of each range into one snapshot whose time is the latest shard's
// (core/strategies/shard_assembly.h).
inline constexpr Tag kShardSnapshotTag = strategyTag(StrategyMessage::kShardSnapshot, 0, 0);

struct ShardSnapshotHeader {
  int64_t realtime_ns = 0;  // when this shard was copied
  int64_t offset = 0;       // first parameter of the shard in the flat buffer
  int64_t count = 0;        // floats that follow
  int64_t updates = 0;      // updates applied to this shard so far (the "step" of a PS snapshot)
};
static_assert(sizeof(ShardSnapshotHeader) == 32);

}  // namespace chaosbed
