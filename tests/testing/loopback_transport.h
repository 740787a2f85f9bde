#pragma once
// LoopbackHub: an in-process Transport for N ranks, the test double for collectives, the shaper, the faulty
// decorator and strategies. Each rank is a Transport object (usually driven by its own thread); all of them
// share one hub that matches sends to receives.
//
// Contract (the whole of transports/transport.h):
// - Matching is per (source, tag) in posting order; a kAnyPeer receive takes the earliest pending message
//   with its tag from any live source. A message longer than the receive buffer completes the receive with
//   InvalidArgument (the send succeeds, as with UCX's truncation error on the receiving side).
// - Sends of at most `eager_limit` bytes are copied and complete at once; longer ones complete when a
//   receive takes them (rendezvous), so a test sees the same completion behaviour as with UCX.
// - Errors stick per peer: failPeer() at a rank, or kill() of a rank at the hub (every other rank then sees
//   PeerLost(rank) as if a backend had detected the death), fails every pending and later operation with
//   that peer until reconnect(). A killed rank's own operations fail with Cancelled. restart() brings a
//   killed rank back as a new incarnation; the others reconnect() to it.
// - progress(until) blocks on a condition variable until one of this rank's operations completes, a peer
//   fails, or `until` passes; it returns at once when something happened since the calling thread's
//   previous call, so no wake-up is lost between a caller's check and its wait.
// - Thread-safe: one mutex per hub; no callback of any kind, so no user code runs under it.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace chaosbed::testing {

struct LoopbackOptions {
  size_t eager_limit = 64 * 1024;  // sends up to this many bytes complete without a matching receive
};

class LoopbackHub {
 public:
  explicit LoopbackHub(int size, LoopbackOptions options = {});
  ~LoopbackHub();
  LoopbackHub(const LoopbackHub&) = delete;
  LoopbackHub& operator=(const LoopbackHub&) = delete;

  int size() const;
  // The transport of `rank`. Each call returns a new handle onto the same rank; the hub outlives none of
  // them necessarily (handles share the hub's state).
  std::unique_ptr<Transport> transport(int rank);
  // One transport per rank, index = rank.
  std::vector<std::unique_ptr<Transport>> transports();

  // Simulates the death of `rank`: every other rank fails it with PeerLost(rank, why); its own pending and
  // later operations fail with Cancelled. Idempotent.
  void kill(int rank, const std::string& why = "loopback: rank killed");
  // A killed rank comes back as a new incarnation with empty queues and no sticky errors of its own; the
  // others keep seeing it failed until they reconnect().
  void restart(int rank);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace chaosbed::testing
