// UcxTransport, part two: peer failures (sticky per-peer status, endpoint retirement, sweeping pending
// operations) and reconnecting to a peer's replacement. transport.h describes the failure model.

#include <glog/logging.h>
#include <unistd.h>

#include "transports/ucx/transport_impl.h"

namespace chaosbed::ucx {


Status UcxTransport::peerStatus(int peer) const {
  if (peer < 0 || peer >= size_) return Status::invalidArgument("ucx: peer " + std::to_string(peer) + " not in 0.." + std::to_string(size_ - 1));
  MutexLock lock(state_mu_);
  return failures_[size_t(peer)];
}

bool UcxTransport::markFailed(int peer, const Status& why, bool routine) {
  {
    MutexLock lock(state_mu_);
    if (!failures_[size_t(peer)].isOk()) return false;
    failures_[size_t(peer)] = why.isOk() ? Status::peerLost(peer, "declared failed") : why;
    failure_count_.fetch_add(1);
  }
  // An orderly exit of a peer is routine at the end of a job; anything else deserves a warning.
  if (routine) {
    VLOG(1) << "ucx rank " << rank_ << ": " << why.toString();
  } else {
    LOG(WARNING) << "ucx rank " << rank_ << ": rank " << peer << " failed: " << why.toString();
  }
  wakeSleepers();
  return true;
}

bool UcxTransport::peerGone(int peer) const {
  const Peer& p = peers_[peer];
  const uint64_t inc = p.incarnation.load();
  return inc == 0 || p.lost_incarnation.load() == inc || (peer != rank_ && !mesh_->alive(peer, inc));
}

void UcxTransport::closeEndpointLocked(int peer) {
  ucp_ep_h& ep = eps_[size_t(peer)];
  if (ep == nullptr) return;
  if (!peerGone(peer)) {  // a live peer may still send to us through its side of it: keep it (retired_eps_)
    retired_eps_.push_back(ep);
    ep = nullptr;
    return;
  }
  // Toward a gone peer the endpoint is left open and released with the worker (ucp_worker_destroy destroys
  // every endpoint it still has, without a flush). A flushing close there could never complete, and UCX
  // 1.13 can abort on it: once the endpoint fails (endpoint timeout), the TCP transport completes the flush
  // a second time (uct_iface.h assertion comp->count > 0). A forced close exists only in peer error mode,
  // which ours are not (see the header).
  ep = nullptr;
}

void UcxTransport::sweepLocked(int peer, bool crashed) {
  const Status sticky = peerStatus(peer);
  std::vector<OpPtr> ops;
  for (auto& [raw, op] : pending_)
    if (op->peer == peer && !op->done.load()) ops.push_back(op);
  for (auto& op : ops) {
    if (!op->forced) op->forced = sticky;
    if (!op->is_send && op->ucx_req != nullptr && !op->ucx_done) ucp_request_cancel(worker_, op->ucx_req);
  }
  closeEndpointLocked(peer);
  for (auto& op : ops)
    if (!op->done.load()) finish(op.get(), *op->forced);  // UCX still holds it: released when UCX finishes

  // A wildcard receive may already be matched to a message the dead peer was still sending; it would then
  // never complete. UCX does not say which peer a pending wildcard receive matched, so every pending one is
  // cancelled: an unmatched one completes with Cancelled at once; one that a progress pass does not finish
  // either is taken to be the dead peer's and completes with Aborted. Callers repost wildcard receives.
  if (!crashed) return;  // a peer that closed its transport finished its sends
  std::vector<OpPtr> wildcards;
  for (auto& [raw, op] : pending_)
    if (op->peer == kAnyPeer && !op->done.load() && op->ucx_req != nullptr && !op->ucx_done) wildcards.push_back(op);
  if (wildcards.empty()) return;
  for (auto& op : wildcards) ucp_request_cancel(worker_, op->ucx_req);
  progressLocked();
  for (auto& op : wildcards)
    if (!op->done.load())
      finish(op.get(), Status::aborted("ucx: wildcard receive matched a message of rank " + std::to_string(peer) +
                                       ", which failed; post it again", peer));
}

void UcxTransport::failPeer(int peer, const Status& why) {
  if (peer < 0 || peer >= size_) return;
  MutexLock lock(worker_mu_);
  if (markFailed(peer, why)) sweepLocked(peer);
}

void UcxTransport::onControlLost(int peer, uint64_t incarnation, bool orderly) {
  if (peer < 0 || peer >= size_ || peers_[peer].incarnation.load() != incarnation) return;  // an older process
  peers_[peer].lost_incarnation.store(incarnation);
  const std::string who = "rank " + std::to_string(peer) + " (incarnation " + std::to_string(incarnation) + ")";
  Status why = Status::peerLost(peer, orderly ? "ucx: " + who + " closed its transport"
                                             : "ucx: control connection to " + who + " lost: the process is gone");
  MutexLock lock(worker_mu_);
  progressLocked();  // messages the peer sent before it went may already sit in our queues: match them first
  if (markFailed(peer, why, /*routine=*/orderly)) sweepLocked(peer, /*crashed=*/!orderly);
}

void UcxTransport::wakeSleepers() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
  (void)n;
}

Status UcxTransport::reconnect(int peer, Deadline deadline) {
  if (peer < 0 || peer >= size_) return Status::invalidArgument("ucx: reconnect: peer " + std::to_string(peer) + " not in 0.." + std::to_string(size_ - 1));
  if (peer == rank_) return Status::invalidArgument("ucx: reconnect: rank " + std::to_string(peer) + " is this rank");
  Peer& p = peers_[peer];
  const uint64_t current = p.incarnation.load();
  const uint64_t lost = p.lost_incarnation.load();
  // The process we talked to may still be alive (failed by a cancel or the control plane): it may be
  // reconnected as it is. Otherwise wait for its replacement's record. A record whose process was found dead
  // (at start-up, or by an earlier attempt) is never used again: only a later incarnation will do.
  const bool gone = lost == current || !mesh_->alive(peer, current);
  const uint64_t wanted = std::max(gone ? current + 1 : current, lost + 1);
  CHAOSBED_RETURN_IF_ERROR(connectPeer(peer, wanted, deadline));
  {
    // The new incarnation may have died already; its loss then stands (onControlLost stores lost_incarnation
    // before it takes state_mu_ to mark the failure).
    MutexLock lock(state_mu_);
    if (p.lost_incarnation.load() == p.incarnation.load())
      return Status::peerLost(peer, "ucx: rank " + std::to_string(peer) + " (incarnation " +
                                        std::to_string(p.incarnation.load()) + ") exited while reconnecting");
    failures_[size_t(peer)] = Status::ok();
  }
  LOG(INFO) << "ucx rank " << rank_ << ": reconnected to rank " << peer << " (incarnation "
            << peers_[peer].incarnation.load() << ")";
  return Status::ok();
}

}  // namespace chaosbed::ucx
