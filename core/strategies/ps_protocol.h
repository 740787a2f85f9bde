// Parameter server protocol (all messages point to point over ctx.transport, tags in tags.h):
//
//   worker -> server s   tag kPsRequestTag        PsRequestHeader [+ count gradient floats of shard s]
//   server -> worker     tag psReplyTag(seq)      PsReplyHeader + count parameter floats of shard s
//
// A worker step: compute the gradient on its own data shard, then send every server its slice of the
// gradient (kPushPull) and receive the shard's fresh parameters in the reply: one round trip per shard per
// step, all shards in flight at once. A new or replacement worker starts with kPull (no gradient).
// Servers apply each push at once (async SGD with momentum), scaled by 1/workers so that the learning rate
// per sample equals the synchronous strategies'. Bounded staleness (max_staleness s > 0): a
// reply is held until the slowest live worker is at most s pushes behind the requester (SSP); s = 0 is a
// synchronous parameter server: the server averages the gradients of one round from every live worker and
// applies them once, then answers everyone (the update mirrored would make).
//
// Time accounting on the worker: the server reports how long it held the request for the staleness bound
// (idle, reason peer) and how long it spent serving it (idle, reason server: a slow or busy server); the
// rest of the round trip is transfer. A lost server (PeerLost) is idle, reason server, plus recovery until
// its replacement answers; the step's gradient for that shard is dropped.
//
// Servers snapshot their shard for the evaluator at every eval tick (tags.h kShardSnapshotTag) and
// checkpoint it every checkpoint_interval_s; a replacement server restores its latest good checkpoint and
// accounts the updates it lost as rolled-back samples (batch_per_worker / shards per lost update).
//
// Preemption notice (checkpoint_on_notice; SIGTERM, then SIGKILL after the grace period): a server saves
// its shard at once and waits until it is on disk, then serves on until it is killed, so that its
// replacement loses only the updates of the grace period. A worker has nothing of its own to save: it
// leaves after the step it is in, so no push is cut off halfway.
//
// This header holds what both sides share: the messages and their tags (ps_server.cc and ps_worker.cc).

#pragma once

#include <chrono>
#include <cstdint>

#include "core/strategies/tags.h"
#include "transports/base/deadline.h"

namespace chaosbed {

enum class PsOp : uint32_t { kPull = 1, kPushPull = 2 };

struct PsRequestHeader {
  uint32_t op = 0;
  uint32_t incarnation = 0;  // the worker's (launcher) incarnation: a larger one means a replacement
  int64_t seq = 0;           // echoed in the reply's tag
  int64_t pulled_version = 0;
  int64_t samples = 0;       // samples behind the gradient
  int64_t count = 0;         // gradient floats that follow
  int64_t sent_ns = 0;       // the worker's CLOCK_MONOTONIC when it sent this (one host: the server's clock too)
};
static_assert(sizeof(PsRequestHeader) == 48);

struct PsReplyHeader {
  int64_t version = 0;       // updates applied to the shard
  int64_t staleness = 0;     // updates between the worker's pull and the application of its push
  int64_t bound_wait_ns = 0; // held for the staleness bound / the synchronous round (waiting for peers)
  int64_t service_ns = 0;    // from arrival to reply, minus bound_wait_ns
  int64_t count = 0;         // parameter floats that follow
  int64_t queued_ns = 0;     // from the worker's send to the server taking the request up: queueing behind
                             // other workers' requests, plus the request's own time on the wire
};
static_assert(sizeof(PsReplyHeader) == 48);

constexpr Tag kPsRequestTag = strategyTag(StrategyMessage::kPsRequest, 0, 0);
inline Tag psReplyTag(int64_t seq) { return strategyTag(StrategyMessage::kPsReply, 0, seq); }

// The monotonic clock in nanoseconds: requests and replies carry it (one host: both sides read the same clock).
inline int64_t monoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

}  // namespace chaosbed
