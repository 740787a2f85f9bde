#pragma once
// Transport: ranks exchanging tagged, contiguous byte buffers, asynchronously. The one interface that every
// backend (ucx/, nccl/ for device buffers), decorator (shaper/, faulty/) and the collectives build on.
//
// Contract
// - Ranks are 0..size()-1 and fixed for the life of the transport; a replacement node rejoins under the
//   same rank (reconnect()). Communicators (collective.h) are subsets of these ranks.
// - isend/irecv post an operation and return at once. The caller owns the buffer and keeps it alive and
//   untouched until the request is complete. Messages between one pair with one tag arrive in order.
// - Errors are values and they stick per peer: once a peer has failed (killed, declared dead by the control
//   plane, or its endpoint abandoned after a cancelled send) every pending and later operation with it
//   completes with the same status (PeerLost{rank} by default) until reconnect(). Failures never hang:
//   backends detect a dead peer on their own (within 1 s), an unresponsive one trips the caller's deadline.
// - Thread safety: every method may be called from any thread; backends serialise internally. No callback
//   of a transport runs under a lock that a caller may hold.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transports/base/deadline.h"
#include "transports/base/status.h"

namespace chaosbed {

// User tags must fit in kUserTagBits; backends may use the bits above for the source rank.
using Tag = uint64_t;
inline constexpr int kUserTagBits = 48;
inline constexpr Tag kMaxUserTag = (Tag{1} << kUserTagBits) - 1;
inline constexpr int kAnyPeer = -1;

// One posted send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // True once the operation has completed, successfully or not. Never blocks.
  virtual bool isComplete() const = 0;
  // The outcome; OK until completion.
  virtual Status status() const = 0;
  // The peer given when posting (kAnyPeer for a wildcard receive).
  virtual int peer() const = 0;
  // For a completed receive: the sender and the number of bytes received.
  virtual int source() const = 0;
  virtual size_t receivedBytes() const = 0;
  // Completes a pending operation with Cancelled; a no-op once complete. A receive's buffer is no longer
  // written when it returns. A send that cannot be recalled halfway abandons the peer's endpoint (the peer
  // then reads as failed until reconnect()); if the peer lives it may still take the message. So the
  // transport may read the buffer of a send that was cancelled or failed mid-way until the transport is
  // destroyed: send large messages from buffers that live as long as the transport (members, not locals).
  virtual void cancel() = 0;
  // True while the transport may still touch the buffer: until completion, and after a cancel or failure
  // that could not stop a transfer mid-way (see cancel()). Reuse a cancelled request's buffer only once
  // this is false.
  virtual bool bufferInUse() const { return !isComplete(); }
};
using RequestPtr = std::unique_ptr<Request>;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Backend name for logs and benchmarks: "ucx", "shaper(ucx)", ...
  virtual std::string name() const = 0;
  // True when messages between this host's processes go through shared memory, where a message costs far
  // less than over a socket: the collectives then prefer algorithms of more, smaller messages (collective.h).
  virtual bool sharedMemory() const { return false; }

  virtual RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) = 0;
  // Receives one message of at most data.size() bytes from peer (or kAnyPeer) with exactly this tag; a longer
  // message completes the request with InvalidArgument.
  virtual RequestPtr irecv(int peer, Tag tag, std::span<std::byte> data) = 0;

  // Drives progress. Returns when some operation completed, a peer failed, or `until` passed; may return
  // early. Callers loop on it (see waitAll).
  virtual void progress(Deadline until) = 0;
  // Seconds this rank's progress has spent advancing operations (moving bytes, protocol steps), cumulative
  // from the start; its other time in progress() it waited. A caller that waits in progress() books the
  // difference across the call as its transfer, not its idle. 0 where the transport does not measure it.
  virtual double progressBusySeconds() const { return 0; }

  // OK while the peer is usable, else the sticky status that its operations complete with.
  virtual Status peerStatus(int peer) const = 0;
  // Increments whenever any peer fails: lets a waiter notice the death of a member it is not talking to.
  virtual uint64_t failureCount() const = 0;
  // The control plane's verdict (launcher exit notice, missed heartbeats, a deadline): fails every pending
  // and later operation with peer with `why`. Idempotent; wakes anyone blocked in progress().
  virtual void failPeer(int peer, const Status& why) = 0;
  // Connects to the incarnation of peer that the bootstrap now publishes (a replacement joined under the
  // same rank) and clears its sticky error.
  virtual Status reconnect(int peer, Deadline deadline) = 0;
};

// The base of a decorator (LinkShaper, FaultyTransport): owns the transport it wraps and forwards every call
// to it, so that a decorator overrides only what it changes (and a method added to Transport reaches every
// decorator's inner transport without touching them). Every transport, decorated or not, passes the
// contract suite (tests/integration/transport_contract_test.cc).
class TransportWrapper : public Transport {
 public:
  explicit TransportWrapper(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  Transport& inner() { return *inner_; }
  const Transport& inner() const { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  bool sharedMemory() const override { return inner_->sharedMemory(); }
  RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) override { return inner_->isend(peer, tag, data); }
  RequestPtr irecv(int peer, Tag tag, std::span<std::byte> data) override { return inner_->irecv(peer, tag, data); }
  void progress(Deadline until) override { inner_->progress(until); }
  double progressBusySeconds() const override { return inner_->progressBusySeconds(); }
  Status peerStatus(int peer) const override { return inner_->peerStatus(peer); }
  uint64_t failureCount() const override { return inner_->failureCount(); }
  void failPeer(int peer, const Status& why) override { inner_->failPeer(peer, why); }
  Status reconnect(int peer, Deadline deadline) override { return inner_->reconnect(peer, deadline); }

 private:
  std::unique_ptr<Transport> inner_;
};

// Waits for every request to complete. Returns OK, or the first failure: a request's own error, PeerLost of
// any rank in `watch` that fails meanwhile (so a collective aborts when any member dies, not only its
// neighbours), or Timeout at the deadline. On failure the requests still pending are cancelled.
Status waitAll(Transport& transport, std::span<const RequestPtr> requests, Deadline deadline,
               std::span<const int> watch = {});
Status wait(Transport& transport, const RequestPtr& request, Deadline deadline);

// Blocking conveniences built on isend/irecv + wait.
Status send(Transport& transport, int peer, Tag tag, std::span<const std::byte> data, Deadline deadline);
Status recv(Transport& transport, int peer, Tag tag, std::span<std::byte> data, Deadline deadline);

template <class T>
std::span<const std::byte> asBytes(std::span<T> s) { return std::as_bytes(s); }
template <class T>
std::span<std::byte> asWritableBytes(std::span<T> s) { return std::as_writable_bytes(s); }

}  // namespace chaosbed
