#include "transports/ucx/transport.h"

#include <glog/logging.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "transports/ucx/transport_impl.h"

namespace chaosbed::ucx {
namespace {

// What a peer's record in the store holds.
struct PeerRecord {
  uint64_t incarnation = 0;
  net::HostPort control;
  std::string worker_address;
};

std::string encodeRecord(const PeerRecord& r) {
  std::string out;
  net::appendU64(out, r.incarnation);
  net::appendU32(out, r.control.port);
  net::appendU32(out, static_cast<uint32_t>(r.control.host.size()));
  out += r.control.host;
  net::appendU32(out, static_cast<uint32_t>(r.worker_address.size()));
  out += r.worker_address;
  return out;
}

Result<PeerRecord> decodeRecord(const std::string& key, const std::string& in) {
  auto bad = [&] { return Status::dataLoss("store key '" + key + "': malformed ucx peer record"); };
  if (in.size() < 16) return bad();
  PeerRecord r;
  r.incarnation = net::loadU64(in.data());
  r.control.port = static_cast<uint16_t>(net::loadU32(in.data() + 8));
  size_t host_len = net::loadU32(in.data() + 12);
  if (in.size() < 16 + host_len + 4) return bad();
  r.control.host = in.substr(16, host_len);
  size_t addr_len = net::loadU32(in.data() + 16 + host_len);
  if (in.size() != 20 + host_len + addr_len) return bad();
  r.worker_address = in.substr(20 + host_len);
  return r;
}

}  // namespace

bool UcxRequest::bufferInUse() const { return !isComplete() || op_->transport->held(*op_); }

void UcxRequest::cancel() {
  if (op_->done.load(std::memory_order_acquire)) return;
  op_->transport->cancelOp(op_);
}

// UCX runs these inside ucp_worker_progress or a *_nbx call, where the transport holds worker_mu_; the
// analysis cannot see through UCX, hence the opt-out.
void onSendDone(void* req, ucs_status_t st, void* user) CHAOSBED_NO_THREAD_SAFETY_ANALYSIS {
  auto* op = static_cast<Op*>(user);
  op->transport->onUcxDone(op, req, st, nullptr);
}

void onRecvDone(void* req, ucs_status_t st, const ucp_tag_recv_info_t* info, void* user)
    CHAOSBED_NO_THREAD_SAFETY_ANALYSIS {
  auto* op = static_cast<Op*>(user);
  op->transport->onUcxDone(op, req, st, info);
}

// ---------------------------------------------------------------------------------------------------------
// Set-up and tear-down

Status UcxTransport::init() {
  ucp_config_t* config = nullptr;
  if (ucs_status_t st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return Status::unavailable("ucx: ucp_config_read: " + ucsText(st));
  const char* user_tls = std::getenv("UCX_TLS");
  std::string tls = user_tls == nullptr ? "" : user_tls;
  if (!options_.shared_memory) {
    tls = tlsWithoutSharedMemory(tls);
    if (tls.empty()) {
      ucp_config_release(config);
      return Status::invalidArgument(std::string("ucx: UCX_TLS=") + user_tls +
                                     " names only shared-memory transports, which this transport does not use "
                                     "(UcxOptions::shared_memory); name a network transport such as tcp");
    }
    if (ucs_status_t st = ucp_config_modify(config, "TLS", tls.c_str()); st != UCS_OK) {
      ucp_config_release(config);
      return Status::invalidArgument("ucx: UCX_TLS=" + tls + ": " + ucsText(st));
    }
  }
  // UCX 1.13's TCP transport handles a batch of epoll events in one go; when an event of the batch closes
  // an endpoint whose event comes later in it (a peer that dies while the connection is being set up), it
  // asserts and aborts the process: a survivor killed by its peer's death. One event per poll leaves no
  // stale event behind (the figures: docs/design.md 2.5). It wins over the environment, like NET_DEVICES. UCX 1.13
  // matches the key against each transport's own table: "MAX_POLL" (tcp's, and cuda_copy's and cuda_ipc's
  // event polls, which host-memory transfers do not use).
  if (tlsIncludesTcp(tls)) {
    // Each wins over the environment (UCX_TCP_<key>), which gets a warning when it asks for another value.
    struct Forced {
      const char* key;
      const char* value;
      const char* why;
    };
    // A second abort of the same kind: a PUT's acknowledgement that arrives after a peer failure has
    // purged the endpoint meets `ep->flags & UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK` cleared (tcp_ep.c:939) and
    // aborts the survivor (2 % of the killed-member runs beside two CPU hogs, none in 491 without PUT).
    // Without TCP's PUT zero-copy, rendezvous goes over active messages: 11-14 % less all-reduce bandwidth
    // over TCP at 1-16 MiB (docs/design.md 2.5), the price of survivors that survive.
    for (const Forced& f : {Forced{"MAX_POLL", "1", "this transport polls one TCP event at a time (UCX 1.13 "
                                                    "aborts on a stale event of a closed endpoint)"},
                            Forced{"PUT_ENABLE", "n", "this transport turns TCP's PUT zero-copy off (UCX 1.13 aborts "
                                                      "on a late PUT acknowledgement of a failed peer)"}}) {
      const std::string env = std::string("UCX_TCP_") + f.key;
      if (const char* user = std::getenv(env.c_str()); user != nullptr && std::string(user) != f.value)
        LOG(WARNING) << "ucx rank " << rank_ << ": ignoring " << env << "=" << user << ": " << f.why;
      if (ucs_status_t st = ucp_config_modify(config, f.key, f.value); st != UCS_OK) {
        ucp_config_release(config);
        return Status::invalidArgument(std::string("ucx: ") + f.key + "=" + f.value + ": " + ucsText(st));
      }
    }
  }
  if (tlsIncludesTcp(tls) && !options_.tcp_rx_segment.empty() && std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr) {
    if (ucs_status_t st = ucp_config_modify(config, "RX_SEG_SIZE", options_.tcp_rx_segment.c_str()); st != UCS_OK) {
      ucp_config_release(config);
      return Status::invalidArgument("ucx: RX_SEG_SIZE=" + options_.tcp_rx_segment + ": " + ucsText(st));
    }
  }
  if (!options_.rndv_thresh.empty() && std::getenv("UCX_RNDV_THRESH") == nullptr) {
    if (ucs_status_t st = ucp_config_modify(config, "RNDV_THRESH", options_.rndv_thresh.c_str()); st != UCS_OK) {
      ucp_config_release(config);
      return Status::invalidArgument("ucx: RNDV_THRESH=" + options_.rndv_thresh + ": " + ucsText(st));
    }
  }
  bool overridden = false;
  const char* user_devices = std::getenv("UCX_NET_DEVICES");
  if (const std::string devices = netDevicesFor(options_.net_devices, user_devices, &overridden); !devices.empty()) {
    if (overridden)
      LOG(WARNING) << "ucx rank " << rank_ << ": ignoring UCX_NET_DEVICES=" << user_devices << ": this transport uses "
                   << devices << " only (UcxOptions::net_devices)";
    if (ucs_status_t st = ucp_config_modify(config, "NET_DEVICES", devices.c_str()); st != UCS_OK) {
      ucp_config_release(config);
      return Status::invalidArgument("ucx: UCX_NET_DEVICES=" + devices + ": " + ucsText(st));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(size_);
  params.mt_workers_shared = 0;
  ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (st != UCS_OK) return Status::unavailable("ucx: ucp_init: " + ucsText(st));

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_EVENTS;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  wparams.events = UCP_WAKEUP_TAG_SEND | UCP_WAKEUP_TAG_RECV | UCP_WAKEUP_TX | UCP_WAKEUP_RX;
  if ((st = ucp_worker_create(context_, &wparams, &worker_)) != UCS_OK)
    return Status::unavailable("ucx: ucp_worker_create: " + ucsText(st));
  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  if ((st = ucp_worker_get_address(worker_, &address, &address_len)) != UCS_OK)
    return Status::unavailable("ucx: ucp_worker_get_address: " + ucsText(st));
  worker_address_.assign(reinterpret_cast<const char*>(address), address_len);
  ucp_worker_release_address(worker_, address);
  if ((st = ucp_worker_get_efd(worker_, &worker_efd_)) != UCS_OK)
    return Status::unavailable("ucx: ucp_worker_get_efd: " + ucsText(st));

  epoll_fd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_fd_.valid() || !wake_fd_.valid()) return Status::fromErrno("ucx: epoll/eventfd");
  for (int fd : {worker_efd_, wake_fd_.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return Status::fromErrno("ucx: epoll_ctl");
  }

  auto mesh = ControlMesh::start(rank_, incarnation_, options_.control_host, *options_.secret,
                                 [this](int peer, uint64_t inc, bool orderly) { onControlLost(peer, inc, orderly); });
  if (!mesh.isOk()) return mesh.status().withContext("ucx control mesh");
  mesh_ = std::move(mesh).value();
  return Status::ok();
}

std::string recordKey(const std::string& prefix, int rank) { return prefix + "/ucx/" + std::to_string(rank); }

Status UcxTransport::publish() {
  PeerRecord self{incarnation_, mesh_->address(), worker_address_};
  return store_.set(recordKey(options_.prefix, rank_), encodeRecord(self)).withContext("ucx: publish rank " + std::to_string(rank_));
}

Status UcxTransport::connectPeer(int peer, uint64_t min_incarnation, Deadline deadline, bool* published) {
  const std::string key = recordKey(options_.prefix, peer);
  PeerRecord record;
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    auto value = store_.get(key, deadline);
    if (!value.isOk()) {
      return value.status().withContext("ucx rank " + std::to_string(rank_) + ": looking up rank " + std::to_string(peer));
    }
    CHAOSBED_ASSIGN_OR_RETURN(record, decodeRecord(key, *value));
    if (record.incarnation >= min_incarnation) break;
    // The replacement has not published yet: poll the record again (bounded by the deadline).
    if (SteadyClock::now() + backoff >= deadline)
      return Status::timeout("ucx rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                             " published no incarnation >= " + std::to_string(min_incarnation) + " before the deadline");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(20));
  }
  if (published != nullptr) *published = true;
  uint64_t previous;
  {
    MutexLock lock(worker_mu_);
    closeEndpointLocked(peer);
    Peer& p = peers_[peer];
    ucp_ep_params_t ep_params{};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(record.worker_address.data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;  // see the header: peer loss comes from the control mesh
    if (ucs_status_t st = ucp_ep_create(worker_, &ep_params, &eps_[size_t(peer)]); st != UCS_OK) {
      // A dead process's record: its shared-memory segments are gone (shmat fails), its sockets refuse.
      eps_[size_t(peer)] = nullptr;
      p.lost_incarnation.store(record.incarnation);
      return Status::peerLost(peer, "ucx: ucp_ep_create to rank " + std::to_string(peer) + " (incarnation " +
                                        std::to_string(record.incarnation) + "): " + ucsText(st));
    }
    // Before the dial: a loss the watcher reports from now on is matched to this incarnation.
    previous = p.incarnation.exchange(record.incarnation);
  }
  if (peer == rank_) return Status::ok();
  // The record is there: a caller's short deadline (one look, no waiting for a successor) must not turn
  // the local connect into a verdict on the peer.
  Status dialled = mesh_->dial(peer, record.incarnation, record.control, std::max(deadline, deadlineIn(kMinDial)));
  // A process that died before or during the dial (its EOF may have been reported before the incarnation was
  // stored, and ignored) is marked lost, so that reconnect() waits for its successor instead of reusing it.
  if (dialled.isOk() && !mesh_->alive(peer, record.incarnation))
    dialled = Status::peerLost(peer, "ucx: rank " + std::to_string(peer) + " (incarnation " +
                                         std::to_string(record.incarnation) + ") exited while connecting");
  if (!dialled.isOk()) {
    // Lost: never this incarnation again. A dial that ran out of time leaves it for the next attempt.
    if (dialled.code() == StatusCode::kPeerLost) {
      peers_[peer].lost_incarnation.store(record.incarnation);
    } else {
      peers_[peer].incarnation.store(previous);
    }
    MutexLock lock(worker_mu_);
    closeEndpointLocked(peer);
    return dialled;
  }
  return Status::ok();
}

void UcxTransport::shutdown() {
  if (mesh_) mesh_->stop();  // our own teardown must not be reported as peer failures
  // Operations UCX still holds stay alive until the worker is gone: destroying it may complete them.
  std::vector<OpPtr> held_until_destroyed;
  if (worker_ != nullptr) {
    MutexLock lock(worker_mu_);
    std::vector<OpPtr> ops;
    for (auto& [raw, op] : pending_) ops.push_back(op);
    for (auto& op : ops) {
      if (op->done) continue;
      op->forced = Status::cancelled("ucx transport of rank " + std::to_string(rank_) + " destroyed");
      if (!op->is_send && op->ucx_req != nullptr) ucp_request_cancel(worker_, op->ucx_req);
    }
    // Flush every endpoint so that sends already completed locally reach their peers, bounded in time: a
    // paused peer must not hold up the teardown.
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = 0;
    for (int peer = 0; peer < size_; ++peer)
      if (peerGone(peer)) closeEndpointLocked(peer);  // no flush toward a gone peer
    eps_.insert(eps_.end(), retired_eps_.begin(), retired_eps_.end());
    retired_eps_.clear();
    for (ucp_ep_h& ep : eps_) {
      if (ep == nullptr) continue;
      void* req = ucp_ep_close_nbx(ep, &close);
      if (UCS_PTR_IS_PTR(req)) closing_.push_back(req);
      ep = nullptr;
    }
    // An operation UCX still holds although its request has completed (a receive cancelled or failed
    // mid-transfer, a send abandoned to a live peer) would be written or read by further progress, and its
    // owner may have freed the buffer since: then skip the flush. Losing our last in-flight sends to peers
    // is better than touching freed memory.
    bool orphan_held = false;
    for (auto& op : ops) orphan_held |= op->ucx_req != nullptr && !op->ucx_done && (op->done || !op->is_send);
    Deadline flush_deadline = deadlineIn(std::chrono::seconds(1));
    while (!orphan_held) {
      ucp_worker_progress(worker_);
      std::erase_if(closing_, [](void* req) {
        if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
        ucp_request_free(req);
        return true;
      });
      if (closing_.empty() || SteadyClock::now() >= flush_deadline) break;
    }
    for (void* req : closing_) ucp_request_free(req);
    closing_.clear();
    for (auto& op : ops)
      if (!op->done) finish(op.get(), *op->forced);
    pending_.clear();  // UCX frees its remaining requests with the worker
    lock.unlock();
    held_until_destroyed = std::move(ops);
  }
  if (mesh_) mesh_->sayGoodbye();
  mesh_.reset();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  held_until_destroyed.clear();
  if (context_ != nullptr) ucp_cleanup(context_);
  worker_ = nullptr;
  context_ = nullptr;
}

// ---------------------------------------------------------------------------------------------------------
// Operations

Status UcxTransport::checkPost(int peer, Tag tag, bool allow_any) const {
  if (tag > kMaxUserTag)
    return Status::invalidArgument("ucx: tag " + std::to_string(tag) + " exceeds " + std::to_string(kUserTagBits) + " bits");
  if ((peer < 0 || peer >= size_) && !(allow_any && peer == kAnyPeer))
    return Status::invalidArgument("ucx: peer " + std::to_string(peer) + " not in 0.." + std::to_string(size_ - 1));
  return Status::ok();
}

RequestPtr UcxTransport::isend(int peer, Tag tag, std::span<const std::byte> data) {
  OpPtr op = makeOp(true, peer, data.size());
  if (Status s = checkPost(peer, tag, /*allow_any=*/false); !s.isOk()) return completedRequest(op, s);
  MutexLock lock(worker_mu_);
  if (Status s = peerStatus(peer); !s.isOk()) return completedRequest(op, s);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = onSendDone;
  param.user_data = op.get();
  param.datatype = ucp_dt_make_contig(1);
  ucs_status_ptr_t p = ucp_tag_send_nbx(eps_[size_t(peer)], data.data(), data.size(),
                                        (ucp_tag_t(rank_) << kRankShift) | tag, &param);
  postedLocked(op, p, nullptr);
  return std::make_unique<UcxRequest>(std::move(op));
}

RequestPtr UcxTransport::irecv(int peer, Tag tag, std::span<std::byte> data) {
  OpPtr op = makeOp(false, peer, data.size());
  if (Status s = checkPost(peer, tag, /*allow_any=*/true); !s.isOk()) return completedRequest(op, s);
  MutexLock lock(worker_mu_);
  if (peer != kAnyPeer)
    if (Status s = peerStatus(peer); !s.isOk()) return completedRequest(op, s);
  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                       UCP_OP_ATTR_FIELD_RECV_INFO |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // UCX 1.13 leaves recv_info empty on immediate completion
  param.cb.recv = onRecvDone;
  param.user_data = op.get();
  param.datatype = ucp_dt_make_contig(1);
  param.recv_info.tag_info = &info;
  ucp_tag_t ucp_tag = peer == kAnyPeer ? tag : (ucp_tag_t(peer) << kRankShift) | tag;
  ucs_status_ptr_t p = ucp_tag_recv_nbx(worker_, data.data(), data.size(), ucp_tag,
                                        peer == kAnyPeer ? kAnySourceMask : kExactMask, &param);
  postedLocked(op, p, &info);
  return std::make_unique<UcxRequest>(std::move(op));
}

void UcxTransport::postedLocked(const OpPtr& op, ucs_status_ptr_t p, const ucp_tag_recv_info_t* info) {
  op->posted = true;
  if (p == nullptr) {  // completed at once
    finish(op.get(), outcome(op.get(), UCS_OK, info));
  } else if (UCS_PTR_IS_ERR(p)) {
    finish(op.get(), outcome(op.get(), UCS_PTR_STATUS(p), nullptr));
  } else if (op->ucx_done) {  // the callback already ran inside the call
    ucp_request_free(p);
  } else {
    op->ucx_req = p;
    pending_.emplace(op.get(), op);
  }
}

Status UcxTransport::outcome(Op* op, ucs_status_t st, const ucp_tag_recv_info_t* info) {
  if (st == UCS_OK) {
    if (!op->is_send && info != nullptr) {
      op->source = static_cast<int>(info->sender_tag >> kRankShift);
      op->received = info->length;
    }
    if (op->is_send) op->source = rank_;
    return Status::ok();
  }
  if (op->forced) return *op->forced;
  if (st == UCS_ERR_MESSAGE_TRUNCATED)
    return Status::invalidArgument("ucx: message " + std::string(op->peer == kAnyPeer ? "" : "from rank " + std::to_string(op->peer) + " ") +
                                   "longer than the " + std::to_string(op->capacity) + "-byte receive buffer");
  if (op->peer != kAnyPeer) {
    MutexLock lock(state_mu_);
    if (!failures_[size_t(op->peer)].isOk()) return failures_[size_t(op->peer)];
  }
  // Our own cancels (cancel(), a sweep, the destructor) set op->forced; a wildcard receive is cancelled only
  // by a sweep. An operation with one peer that UCX cancelled by itself had its endpoint discarded.
  if (st == UCS_ERR_CANCELED && op->peer == kAnyPeer) return Status::cancelled("ucx: operation cancelled");
  if (op->peer != kAnyPeer) {
    // A transport-level error on the data path (a discarded endpoint's cancel included): the endpoint is
    // unusable, so the peer reads as failed.
    Status lost = Status::peerLost(op->peer, "ucx: " + ucsText(st));
    deferred_fail_.emplace_back(op->peer, lost);
    return lost;
  }
  return Status::ioError("ucx: receive failed: " + ucsText(st));
}

void UcxTransport::onUcxDone(Op* op, void* req, ucs_status_t st, const ucp_tag_recv_info_t* info) {
  // Runs inside a UCP call, with worker_mu_ held.
  op->ucx_done = true;
  if (!op->done.load(std::memory_order_relaxed)) finish(op, outcome(op, st, info));
  if (!op->posted) return;  // the poster frees the request when the call returns
  ucp_request_free(req);
  op->ucx_req = nullptr;
  pending_.erase(op);  // may destroy op: last
}

void UcxTransport::cancelOp(const OpPtr& op) {
  MutexLock lock(worker_mu_);
  if (op->done.load()) return;
  op->forced = Status::cancelled("ucx: " + std::string(op->is_send ? "send to" : "receive from") + " " +
                                 (op->peer == kAnyPeer ? std::string("any rank") : "rank " + std::to_string(op->peer)) +
                                 " cancelled");
  if (!op->is_send) {
    ucp_request_cancel(worker_, op->ucx_req);  // an unmatched receive completes here
    if (op->done.load()) return;
  }
  // A matched receive, or a send: the data may be in flight, with a live peer waiting on it. Let the
  // transfer finish briefly rather than abandon the endpoint with UCX still moving it: if the peer then
  // exits, UCX 1.13 fails the endpoint and can complete the transfer twice (an assertion abort). Only while
  // something moves: a paused peer, or one that never matched the send, is not waited for.
  auto peer_alive = [&] { return op->peer == kAnyPeer || !peerGone(op->peer); };
  const Deadline limit = deadlineIn(std::chrono::milliseconds(100));
  Deadline still_until = deadlineIn(std::chrono::milliseconds(25));
  while (!op->done.load() && peer_alive()) {
    const auto now = SteadyClock::now();
    if (now >= limit || now >= still_until) break;
    if (progressLocked()) still_until = now + std::chrono::milliseconds(25);
  }
  if (op->done.load()) return;
  if (op->peer != kAnyPeer) {
    // A send cannot be recalled once UCX has started it: abandon the endpoint (the peer then reads as
    // failed until reconnect). The endpoint is retired with a flush (closeEndpointLocked), so a live peer
    // may still take the message and UCX may still read the send's buffer (transport.h).
    if (markFailed(op->peer, Status::peerLost(op->peer, "ucx: endpoint to rank " + std::to_string(op->peer) +
                                                            " abandoned after a cancelled operation; reconnect() to use it again")))
      sweepLocked(op->peer, /*crashed=*/peerGone(op->peer));  // a live peer finishes what it was sending
  }
  if (!op->done.load()) finish(op.get(), *op->forced);  // UCX releases its request when it finishes with it
}

// ---------------------------------------------------------------------------------------------------------
// Progress

bool UcxTransport::progressLocked() {
  const auto start = SteadyClock::now();
  bool advanced = false;
  while (ucp_worker_progress(worker_) != 0) advanced = true;
  if (advanced)
    busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count(),
                       std::memory_order_relaxed);
  while (!deferred_fail_.empty()) {
    auto [peer, why] = deferred_fail_.back();
    deferred_fail_.pop_back();
    if (markFailed(peer, why)) sweepLocked(peer);
  }
  if (!closing_.empty()) {
    std::erase_if(closing_, [](void* req) {
      if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
      ucp_request_free(req);
      return true;
    });
  }
  return advanced;
}

void UcxTransport::progress(Deadline until) {
  const uint64_t completions = completions_.load(std::memory_order_acquire);
  const uint64_t failures = failure_count_.load();
  auto changed = [&] {
    return completions_.load(std::memory_order_acquire) != completions || failure_count_.load() != failures;
  };
  const Deadline start = SteadyClock::now();
  const Deadline spin_end = start + options_.spin;
  const auto busy = core_shared_.load(std::memory_order_relaxed) ? std::chrono::microseconds(0) : kBusySpin;
  const Deadline busy_end = start + std::min<std::chrono::microseconds>(options_.spin, busy);
  for (;;) {
    {
      MutexLock lock(worker_mu_);
      progressLocked();
    }
    if (changed()) return;
    Deadline now = SteadyClock::now();
    if (now >= until) return;
    if (now < busy_end) continue;
    if (now < spin_end) {
      // Hand the core to a rank that has work (several ranks often share a core); cheap when none waits.
      sched_yield();
      core_shared_.store(SteadyClock::now() - now > kYieldRanAnother, std::memory_order_relaxed);
      continue;
    }
    ucs_status_t armed;
    {
      MutexLock lock(worker_mu_);
      progressLocked();
      if (changed()) return;
      armed = ucp_worker_arm(worker_);
    }
    if (armed == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress them
    if (armed != UCS_OK) {
      LOG_FIRST_N(ERROR, 1) << "ucx: ucp_worker_arm: " << ucsText(armed) << "; progress() polls instead";
      return;
    }
    Deadline wake_at = std::min(until, SteadyClock::now() + kMaxSleep);
    epoll_event events[2];
    int n = ::epoll_wait(epoll_fd_.get(), events, 2, net::pollTimeoutMs(wake_at));
    // A slice passed quietly: return so that the caller re-checks its requests. Completions are counted
    // from this call's start, so one that happened just before it (on another thread, or inside a
    // decorator's isend) would otherwise go unnoticed until an unrelated event or `until`.
    if (n == 0) return;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_fd_.get()) {
        uint64_t count;
        ssize_t r = ::read(wake_fd_.get(), &count, sizeof(count));
        (void)r;
      }
    }
  }
}

}  // namespace chaosbed::ucx

namespace chaosbed {

using ucx::UcxTransport;
using ucx::kMaxRanks;
using ucx::recordKey;

std::string netDevicesFor(const std::string& option, const char* user, bool* overridden) {
  *overridden = !option.empty() && user != nullptr && option != user;
  return option;
}

namespace {

// A UCX_TLS value as UCX reads it: an exclusion list ("^a,b"; also the default, empty or "all", which
// excludes nothing) or the names it allows.
struct TlsList {
  bool exclude = false;
  std::vector<std::string> names;
};

TlsList parseTls(const std::string& tls) {
  TlsList list;
  list.exclude = tls.empty() || tls == "all" || tls[0] == '^';
  for (size_t begin = !tls.empty() && tls[0] == '^' ? 1 : 0; begin < tls.size() && tls != "all";) {
    const size_t end = std::min(tls.find(',', begin), tls.size());
    if (end > begin) list.names.push_back(tls.substr(begin, end - begin));
    begin = end + 1;
  }
  return list;
}

}  // namespace

std::string tlsWithoutSharedMemory(const std::string& tls) {
  // UCX 1.13's shared-memory transports; the aliases "mm", "sm" and "shm" name only these.
  static const std::vector<std::string> kShared = {"posix", "sysv", "xpmem", "knem", "cma"};
  auto shared = [](const std::string& n) {
    return n == "mm" || n == "sm" || n == "shm" || std::find(kShared.begin(), kShared.end(), n) != kShared.end();
  };
  TlsList list = parseTls(tls);
  std::erase_if(list.names, shared);
  // Excluded by the alias "sm" (all of them): naming a transport this UCX was built without (xpmem, knem
  // here) makes every process print a warning, on stdout, at start-up.
  if (list.exclude) list.names.push_back("sm");
  if (list.names.empty() ||
      (!list.exclude && std::all_of(list.names.begin(), list.names.end(), [](auto& n) { return n == "self"; })))
    return "";
  std::string out = list.exclude ? "^" : "";
  for (size_t i = 0; i < list.names.size(); ++i) out += (i > 0 ? "," : "") + list.names[i];
  return out;
}

bool tlsIncludesTcp(const std::string& tls) {
  const TlsList list = parseTls(tls);
  const bool named = std::any_of(list.names.begin(), list.names.end(), [](auto& n) { return n == "tcp" || n == "all"; });
  return list.exclude ? !named : named;
}

Result<std::unique_ptr<Transport>> createUcxTransport(Store& store, const UcxOptions& options) {
  if (options.size < 1 || options.size > kMaxRanks)
    return Status::invalidArgument("ucx: size " + std::to_string(options.size) + " not in 1.." + std::to_string(kMaxRanks));
  if (options.rank < 0 || options.rank >= options.size)
    return Status::invalidArgument("ucx: rank " + std::to_string(options.rank) + " not in 0.." + std::to_string(options.size - 1));
  if (options.prefix.empty()) return Status::invalidArgument("ucx: empty store key prefix");
  if (!options.secret) return Status::invalidArgument("ucx: no secret (the control mesh authenticates every connection)");
  const Deadline deadline = deadlineIn(options.connect_timeout);
  uint64_t incarnation;
  if (options.incarnation >= 0) {
    incarnation = static_cast<uint64_t>(options.incarnation) + 1;  // 0 means "not connected" internally
  } else {
    CHAOSBED_ASSIGN_OR_RETURN(int64_t drawn, store.add(recordKey(options.prefix, options.rank) + "/incarnation", 1));
    incarnation = static_cast<uint64_t>(drawn);
  }
  auto transport = std::make_unique<UcxTransport>(store, options, incarnation);
  CHAOSBED_RETURN_IF_ERROR(transport->init());
  CHAOSBED_RETURN_IF_ERROR(transport->publish());
  std::vector<bool> eager(size_t(options.size), options.peers.empty());
  for (int peer : options.peers)
    if (peer >= 0 && peer < options.size) eager[size_t(peer)] = true;
  eager[size_t(options.rank)] = true;
  for (int peer = 0; peer < options.size; ++peer) {
    if (!eager[size_t(peer)]) {
      transport->leaveUnconnected(peer);
      continue;
    }
    bool published = false;
    Status s = transport->connectPeer(peer, 0, deadline, &published);
    if (s.isOk()) continue;
    // A peer that never published is a set-up failure. One that published but is unreachable died (a
    // replacement starts while another node is down): it reads as lost until it is replaced (reconnect).
    if (peer == options.rank || !published || s.code() == StatusCode::kInvalidArgument ||
        s.code() == StatusCode::kDataLoss)
      return s;
    transport->failPeer(peer, s.code() == StatusCode::kPeerLost ? s : Status::peerLost(peer, s.toString()));
  }
  return std::unique_ptr<Transport>(std::move(transport));
}

}  // namespace chaosbed
