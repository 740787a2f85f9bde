#pragma once
// LinkShaper: a Transport decorator that emulates a slower, longer or broken link to each peer: added
// latency, a bandwidth cap (token bucket) and partitions, all changeable at run time from any thread (the
// chaos controller's `link` fault). Shaping applies to this rank's sends; receives pass straight through,
// so shaping both directions of a link means shaping both ends.
//
// Contract
// - Sends to a peer leave in posting order (a FIFO per peer), so per-(peer, tag) ordering is kept. A send
//   is handed to the inner transport once (a) its added latency has passed since it was posted and (b) the
//   token bucket holds its size: tokens refill at `bandwidth` bytes/s up to `burst` bytes, and a message
//   larger than what is in the bucket waits until the missing bytes have accrued (its serialisation time),
//   so a capped transfer of B bytes takes about (B - burst) / bandwidth.
// - A partitioned link holds its sends until the partition heals. A send held longer than the hold limit
//   (setPartitionHold) fails with Timeout and so does the link, the way a TCP connection dies after its
//   retransmission timeout: the peer is failed in the inner transport with that Timeout (sticky until
//   reconnect()), because dropping one message out of an ordered stream would silently mismatch the rest.
// - Held sends move only inside progress() (and at posting when nothing is queued): progress() releases
//   what is due and then drives the inner transport with a wake-up no later than the next release. While
//   sends are queued it wakes at least every kMaxHoldPoll to pick up parameter changes made by other threads.
//   A release counts as progress: when progress() hands a send over it only polls the inner transport and
//   returns, because the inner send may already be complete, and an inner transport that waits for the next
//   completion would otherwise sleep until the caller's deadline with the caller's request done.
// - Cancelling a held send removes it from the queue; cancelling a released one cancels the inner request.
//   Destroying a request that is still held cancels it.
// - Thread-safe: every method and setter may be called from any thread; the inner transport is never called
//   under the shaper's lock except to post a released send (inner isend never blocks).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace chaosbed {

// The shaping of one directed link (this rank -> peer). All defaults: an unshaped link.
struct LinkParams {
  std::chrono::microseconds latency{0};  // added one-way delay
  double bandwidth_bytes_per_s = 0;      // 0: no cap
  uint64_t burst_bytes = 64 * 1024;      // token bucket depth
  bool partitioned = false;

  bool shaped() const { return latency.count() > 0 || bandwidth_bytes_per_s > 0 || partitioned; }
};

class LinkShaper final : public TransportWrapper {
 public:
  static constexpr std::chrono::milliseconds kMaxHoldPoll{2};
  static constexpr std::chrono::seconds kDefaultPartitionHold{30};

  explicit LinkShaper(std::unique_ptr<Transport> inner);
  ~LinkShaper() override;

  // Run-time controls, thread-safe. peer must be a valid rank (else InvalidArgument naming it).
  Status setLink(int peer, const LinkParams& params);
  Status setLatency(int peer, std::chrono::microseconds latency);
  Status setBandwidth(int peer, double bytes_per_s, std::optional<uint64_t> burst_bytes = std::nullopt);
  Status setPartitioned(int peer, bool partitioned);
  // How long a send may wait behind a partition before it (and the link) fails with Timeout.
  void setPartitionHold(std::chrono::milliseconds hold);
  // Heals every link: no latency, no cap, no partition. Held sends are then released by progress().
  void clear();
  LinkParams link(int peer) const;
  // Sends posted but not yet handed to the inner transport.
  size_t heldCount() const;

  // Transport: what shaping changes; the rest is forwarded (TransportWrapper).
  std::string name() const override { return "shaper(" + inner().name() + ")"; }
  // False whatever the inner transport: a shaped message costs an emulated link's time.
  bool sharedMemory() const override { return false; }
  RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) override;
  void progress(Deadline until) override;
  void failPeer(int peer, const Status& why) override;

  struct State;  // links, queues and the lock; shared with request handles

 private:
  struct Pumped {
    std::optional<SteadyClock::time_point> next_due;  // when the next held send is due, if any
    bool released = false;                            // some send was handed to the inner transport
  };
  // Hands due sends to the inner transport, fails the links whose partition hold ran out and the held
  // sends to peers the inner transport has failed.
  Pumped pump();

  std::shared_ptr<State> state_;
};

}  // namespace chaosbed
