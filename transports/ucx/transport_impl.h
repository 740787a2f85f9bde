#pragma once
// Internal to transports/ucx: the UcxTransport class that transport.h's createUcxTransport returns, shared by
// transport.cc (set-up, operations, progress) and peer_failures.cc (peer failures and reconnect). See
// transport.h for the design.

#include <cstdlib>

#include <glog/logging.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/base/thread_annotations.h"
#include "transports/ucx/control.h"
#include "transports/ucx/transport.h"

namespace chaosbed::ucx {


inline constexpr int kRankShift = kUserTagBits;
inline constexpr int kMaxRanks = 1 << (64 - kUserTagBits);
inline constexpr ucp_tag_t kExactMask = ~ucp_tag_t{0};
inline constexpr ucp_tag_t kAnySourceMask = kMaxUserTag;
// A sleeping progress() wakes at least this often. It bounds the cost of a wake-up another thread consumed,
// and of the protocol steps of a shared-memory rendezvous without CMA that raise no wake-up event.
inline constexpr auto kMaxSleep = std::chrono::milliseconds(2);
// progress() polls without yielding this long first, while this rank seems to have a core to itself: a small
// message's round trip is a few microseconds.
inline constexpr auto kBusySpin = std::chrono::microseconds(10);
// A sched_yield that took longer than this ran another task: the core is shared (measured here: about 1.5 us
// when nothing else is runnable, 6 us per switch under a paravirtualised kernel), and then progress() yields
// at once instead of busy-polling, so a rank that has work gets the core (Open MPI's yield_when_idle, learnt
// instead of configured).
inline constexpr auto kYieldRanAnother = std::chrono::microseconds(4);
// The least time a control connection to a published peer gets, whatever the caller's deadline.
inline constexpr auto kMinDial = std::chrono::milliseconds(500);

inline std::string ucsText(ucs_status_t st) { return ucs_status_string(st); }

class UcxTransport;

// One posted operation, shared by its Request and (while UCX holds it) the transport's pending table.
struct Op {
  UcxTransport* transport = nullptr;
  bool is_send = false;
  int peer = kAnyPeer;
  size_t capacity = 0;
  // Guarded by the transport's worker_mu_ (a comment: the analysis cannot name another object's lock here):
  void* ucx_req = nullptr;       // UCX's request while UCX holds the operation
  bool posted = false;           // the *_nbx call returned
  bool ucx_done = false;         // UCX reported completion
  std::optional<Status> forced;  // the outcome a failure or cancel() decided
  // Published by `done` (release); read after done (acquire).
  Status status;
  int source = -1;
  size_t received = 0;
  std::atomic<bool> done{false};
};
using OpPtr = std::shared_ptr<Op>;

class UcxRequest final : public Request {
 public:
  explicit UcxRequest(OpPtr op) : op_(std::move(op)) {}
  ~UcxRequest() override { cancel(); }
  bool isComplete() const override { return op_->done.load(std::memory_order_acquire); }
  Status status() const override { return isComplete() ? op_->status : Status::ok(); }
  int peer() const override { return op_->peer; }
  int source() const override { return isComplete() ? op_->source : -1; }
  size_t receivedBytes() const override { return isComplete() ? op_->received : 0; }
  void cancel() override;
  bool bufferInUse() const override;

 private:
  OpPtr op_;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(Store& store, const UcxOptions& options, uint64_t incarnation)
      : store_(store), options_(options), rank_(options.rank), size_(options.size), incarnation_(incarnation),
        peers_(options.size), eps_(size_t(options.size), nullptr), failures_(size_t(options.size)) {}

  ~UcxTransport() override { shutdown(); }

  Status init();
  Status publish();
  // Looks up peer's record (waiting for an incarnation >= min_incarnation), creates its endpoint and
  // control connection.
  // `published` (optional) says whether such a record was found.
  Status connectPeer(int peer, uint64_t min_incarnation, Deadline deadline, bool* published = nullptr);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "ucx"; }
  bool sharedMemory() const override { return options_.shared_memory; }
  RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) override;
  RequestPtr irecv(int peer, Tag tag, std::span<std::byte> data) override;
  void progress(Deadline until) override;
  Status peerStatus(int peer) const override;
  uint64_t failureCount() const override { return failure_count_.load(); }
  double progressBusySeconds() const override { return 1e-9 * double(busy_ns_.load(std::memory_order_relaxed)); }
  void failPeer(int peer, const Status& why) override;
  Status reconnect(int peer, Deadline deadline) override;

  // A peer this rank does not talk to unless asked: it reads as lost until reconnect() reaches it.
  void leaveUnconnected(int peer) {
    MutexLock lock(worker_mu_);
    markFailed(peer, Status::peerLost(peer, "ucx: rank " + std::to_string(peer) + " not connected; reconnect() to reach it"),
               /*routine=*/true);
  }
  void cancelOp(const OpPtr& op) CHAOSBED_EXCLUDES(worker_mu_);
  // UCX still holds the operation (its buffer), although its request may have completed.
  bool held(const Op& op) CHAOSBED_EXCLUDES(worker_mu_) {
    MutexLock lock(worker_mu_);
    return op.ucx_req != nullptr && !op.ucx_done;
  }
  void onUcxDone(Op* op, void* req, ucs_status_t st, const ucp_tag_recv_info_t* info) CHAOSBED_REQUIRES(worker_mu_);

 private:
  struct Peer {
    std::atomic<uint64_t> incarnation{0};     // the incarnation the endpoint talks to; 0 before connect
    std::atomic<uint64_t> lost_incarnation{0};  // the last incarnation found dead (control mesh EOF, or
                                                // unreachable when connecting): reconnect() wants a later one
  };

  OpPtr makeOp(bool is_send, int peer, size_t capacity) {
    auto op = std::make_shared<Op>();
    op->transport = this;
    op->is_send = is_send;
    op->peer = peer;
    op->capacity = capacity;
    return op;
  }
  void finish(Op* op, Status status) {
    op->status = std::move(status);
    op->done.store(true, std::memory_order_release);
    completions_.fetch_add(1, std::memory_order_acq_rel);
  }
  RequestPtr completedRequest(OpPtr op, Status status) {
    finish(op.get(), std::move(status));
    return std::make_unique<UcxRequest>(std::move(op));
  }
  Status checkPost(int peer, Tag tag, bool allow_any) const;
  Status outcome(Op* op, ucs_status_t st, const ucp_tag_recv_info_t* info) CHAOSBED_REQUIRES(worker_mu_);
  void postedLocked(const OpPtr& op, ucs_status_ptr_t p, const ucp_tag_recv_info_t* info)
      CHAOSBED_REQUIRES(worker_mu_);
  // Progresses the worker until it is idle; whether anything advanced.
  bool progressLocked() CHAOSBED_REQUIRES(worker_mu_);
  // Sets the sticky failure (false when the peer had failed already); `routine` only lowers the log level.
  bool markFailed(int peer, const Status& why, bool routine = false) CHAOSBED_EXCLUDES(state_mu_);
  // Fails the peer's pending operations; a crashed peer (not an orderly close) also unsticks wildcard receives.
  void sweepLocked(int peer, bool crashed = true) CHAOSBED_REQUIRES(worker_mu_);
  void closeEndpointLocked(int peer) CHAOSBED_REQUIRES(worker_mu_);
  // The process that the peer's endpoint talks to is known to be gone (or was never reached).
  bool peerGone(int peer) const;
  void onControlLost(int peer, uint64_t incarnation, bool orderly);
  void wakeSleepers();
  void shutdown();

  Store& store_;  // the caller's; outlives the transport (reconnect reads replacements' records from it)
  const UcxOptions options_;
  const int rank_;
  const int size_;
  const uint64_t incarnation_;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string worker_address_;
  int worker_efd_ = -1;
  net::FileDescriptor epoll_fd_;
  net::FileDescriptor wake_fd_;  // failPeer wakes sleepers in progress() through it
  std::unique_ptr<ControlMesh> mesh_;

  // Lock order: worker_mu_, then state_mu_, then the control mesh's lock (ControlMesh::alive); the mesh
  // calls onControlLost with no lock of its own held. UCX callbacks run under worker_mu_ (inside
  // ucp_worker_progress) and take state_mu_ only.
  Mutex worker_mu_;  // serialises the UCP worker (UCS_THREAD_MODE_SERIALIZED)
  std::vector<Peer> peers_;
  std::vector<ucp_ep_h> eps_ CHAOSBED_GUARDED_BY(worker_mu_);                       // by peer; null when closed
  std::unordered_map<Op*, OpPtr> pending_ CHAOSBED_GUARDED_BY(worker_mu_);          // operations UCX holds
  std::vector<void*> closing_ CHAOSBED_GUARDED_BY(worker_mu_);                      // endpoint close requests
  // Endpoints to live peers replaced by reconnect(), kept open until shutdown: the peer's own endpoint still
  // names this one, and UCX answers that peer's rendezvous sends through it (closed, the receives of them
  // were cancelled).
  std::vector<ucp_ep_h> retired_eps_ CHAOSBED_GUARDED_BY(worker_mu_);
  std::vector<std::pair<int, Status>> deferred_fail_ CHAOSBED_GUARDED_BY(worker_mu_);  // seen in callbacks

  mutable Mutex state_mu_ CHAOSBED_ACQUIRED_AFTER(worker_mu_);
  std::vector<Status> failures_ CHAOSBED_GUARDED_BY(state_mu_);  // by peer: the sticky status, OK while usable
  std::atomic<uint64_t> failure_count_{0};
  std::atomic<uint64_t> completions_{0};
  std::atomic<bool> core_shared_{false};  // the last sched_yield in progress() ran another task
  std::atomic<int64_t> busy_ns_{0};        // time in ucp_worker_progress calls that advanced something
};

}  // namespace chaosbed::ucx
