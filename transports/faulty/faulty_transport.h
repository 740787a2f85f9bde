#pragma once
// FaultyTransport: a Transport decorator for deterministic, single-process fault injection (LevelDB's
// FaultInjectionTestEnv for the network): fail the Nth send to a rank, drop everything to a rank, break a
// peer the way UCX reports a reset connection, fail the next collective step. Rules are added and removed
// at run time from any thread; counting is exact, so a test injects a fault at a protocol point, never
// after a sleep.
//
// Contract
// - Each posted operation (isend/irecv) is checked against the rules in the order they were added; the
//   first rule that fires decides its fate, the others don't count it. An operation no rule fires on goes
//   to the inner transport unchanged.
// - kFail completes the operation at once with the rule's status; the peer stays usable (one lost
//   operation). kDrop (sends only) completes the send successfully without delivering it, like a message
//   lost on the wire: the receiver waits until its deadline or a failure.
// - breakPeer() makes the peer fail the way a backend reports a dead connection: PeerLost(peer) with the
//   given message, sticky until reconnect(), pending operations included (it calls failPeer on the inner
//   transport, so failureCount() rises and waiters watching the peer wake up).
// - A rule fires on the operations it matches after skipping the first `skip` of them, `times` times
//   (kForever: every one), then retires. fired() counts what the rules did.

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "transports/transport.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed {

enum class FaultOp : uint8_t { kSend, kRecv, kAny };
enum class FaultAction : uint8_t { kFail, kDrop };

struct FaultRule {
  static constexpr uint64_t kForever = std::numeric_limits<uint64_t>::max();

  FaultOp op = FaultOp::kSend;
  int peer = kAnyPeer;            // the peer of the operation; kAnyPeer matches every peer
  bool collective_only = false;   // only tags of collectives (transports/collective.h)
  uint64_t skip = 0;              // matching operations to let through before firing
  uint64_t times = 1;             // how many operations it fires on
  FaultAction action = FaultAction::kFail;
  Status status = Status::ioError("faulty: injected failure");  // for kFail
};

class FaultyTransport final : public TransportWrapper {
 public:
  explicit FaultyTransport(std::unique_ptr<Transport> inner);

  // Adds a rule; returns its id for removeRule. InvalidArgument for a kDrop on receives or an OK status.
  Result<int> addRule(FaultRule rule);
  void removeRule(int id);
  // Removes every rule (broken peers stay broken until reconnect()).
  void clear();
  // Operations the rules have failed or dropped so far.
  uint64_t fired() const;

  // Conveniences over addRule, each returning the rule's id.
  // The nth (1-based, counted from now) send to peer fails with status.
  Result<int> failNthSend(int peer, uint64_t n, Status status);
  // Every send to peer from now on is silently lost.
  Result<int> dropSendsTo(int peer);
  // The next send or receive of any collective fails with status (default: Aborted, naming no rank).
  Result<int> failNextCollectiveStep(Status status = Status::aborted("faulty: injected collective step failure"));
  // The peer fails for good, as UCX reports a reset connection (see the contract above).
  void breakPeer(int peer, const std::string& message = "ucx: Connection reset by remote peer");

  // Transport: what the rules change; the rest is forwarded (TransportWrapper).
  std::string name() const override { return "faulty(" + inner().name() + ")"; }
  RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) override;
  RequestPtr irecv(int peer, Tag tag, std::span<std::byte> data) override;

 private:
  struct Entry {
    int id;
    FaultRule rule;
    uint64_t seen = 0;   // matching operations so far
    uint64_t fired = 0;
  };
  // The rule that fires on this operation, if any (copied out), updating the counters. Requires mu_.
  std::optional<FaultRule> match(bool is_send, int peer, Tag tag) CHAOSBED_REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Entry> rules_ CHAOSBED_GUARDED_BY(mu_);
  int next_id_ CHAOSBED_GUARDED_BY(mu_) = 1;
  uint64_t fired_ CHAOSBED_GUARDED_BY(mu_) = 0;
};

}  // namespace chaosbed
