#include "tests/testing/loopback_transport.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <glog/logging.h>

namespace chaosbed::testing {
namespace {

// One posted send or receive. Guarded by State::mu.
struct Op {
  bool is_send = false;
  int owner = -1;  // the rank that posted it
  int peer = -1;   // destination of a send; source filter of a receive (may be kAnyPeer)
  Tag tag = 0;
  // A send's payload: the caller's buffer (rendezvous) or `eager` (copied at posting).
  const std::byte* send_data = nullptr;
  size_t send_size = 0;
  std::vector<std::byte> eager;
  bool copied = false;  // the payload is in `eager`
  // A receive's buffer.
  std::byte* recv_data = nullptr;
  size_t recv_capacity = 0;

  bool complete = false;
  Status status;
  int source = -1;
  size_t received = 0;
};
using OpPtr = std::shared_ptr<Op>;

struct RankState {
  bool dead = false;
  std::deque<OpPtr> posted_recvs;  // receives posted by this rank, posting order
  std::deque<OpPtr> unexpected;    // sends addressed to this rank that no receive has taken, arrival order
  std::vector<Status> peer_status;  // this rank's (sticky) view of every peer
  uint64_t failure_count = 0;
  uint64_t events = 0;  // completions and failures seen by this rank
  std::unordered_map<std::thread::id, uint64_t> seen_events;  // per progress() caller
  std::condition_variable cv;
};

}  // namespace

struct LoopbackHub::State {
  LoopbackOptions options;
  std::mutex mu;
  std::vector<std::unique_ptr<RankState>> ranks;

  RankState& at(int rank) { return *ranks[static_cast<size_t>(rank)]; }

  void notify(int rank) {
    RankState& r = at(rank);
    ++r.events;
    r.cv.notify_all();
  }

  void complete(Op& op, Status status) {
    if (op.complete) return;
    op.complete = true;
    op.status = std::move(status);
    notify(op.owner);
  }

  // Hands a send's payload to a receive; completes both.
  void deliver(Op& send, Op& recv) {
    if (send.send_size > recv.recv_capacity) {
      complete(recv, Status::invalidArgument("loopback: message of " + std::to_string(send.send_size) +
                                             " bytes from rank " + std::to_string(send.owner) + " tag " +
                                             std::to_string(send.tag) + " exceeds the receive buffer of " +
                                             std::to_string(recv.recv_capacity) + " bytes"));
    } else {
      const std::byte* src = send.copied ? send.eager.data() : send.send_data;
      if (send.send_size > 0) std::memcpy(recv.recv_data, src, send.send_size);
      recv.source = send.owner;
      recv.received = send.send_size;
      complete(recv, Status::ok());
    }
    complete(send, Status::ok());
  }

  // `rank` stops talking to `peer`: its operations with peer fail with `why`, peer's undelivered messages
  // to it are dropped.
  void failPeerLocked(int rank, int peer, const Status& why) {
    RankState& r = at(rank);
    if (!r.peer_status[static_cast<size_t>(peer)].isOk()) return;
    r.peer_status[static_cast<size_t>(peer)] = why;
    ++r.failure_count;
    for (auto it = r.posted_recvs.begin(); it != r.posted_recvs.end();) {
      if ((*it)->peer == peer) {
        complete(**it, why);
        it = r.posted_recvs.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = r.unexpected.begin(); it != r.unexpected.end();) {
      if ((*it)->owner == peer) {
        it = r.unexpected.erase(it);  // the sender's request is failed from its own side, if at all
      } else {
        ++it;
      }
    }
    RankState& p = at(peer);
    for (auto it = p.unexpected.begin(); it != p.unexpected.end();) {
      if ((*it)->owner == rank && !(*it)->complete) {  // a rendezvous send of ours still waiting
        complete(**it, why);
        it = p.unexpected.erase(it);
      } else {
        ++it;
      }
    }
    notify(rank);
  }

  // The operations that `rank` itself posted fail with `why`.
  void cancelAllOf(int rank, const Status& why) {
    RankState& r = at(rank);
    for (auto& op : r.posted_recvs) complete(*op, why);
    r.posted_recvs.clear();
    for (auto& other : ranks) {
      for (auto it = other->unexpected.begin(); it != other->unexpected.end();) {
        if ((*it)->owner == rank) {
          complete(**it, why);
          it = other->unexpected.erase(it);
        } else {
          ++it;
        }
      }
    }
    notify(rank);
  }
};

namespace {

using State = LoopbackHub::State;

class LoopbackRequest final : public Request {
 public:
  LoopbackRequest(std::shared_ptr<State> state, OpPtr op) : state_(std::move(state)), op_(std::move(op)) {}
  ~LoopbackRequest() override { cancel(); }  // the caller's buffer may go away with the request

  bool isComplete() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return op_->complete;
  }
  Status status() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return op_->status;
  }
  int peer() const override { return op_->peer; }
  int source() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return op_->source;
  }
  size_t receivedBytes() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return op_->received;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (op_->complete) return;
    auto& queue = op_->is_send ? state_->at(op_->peer).unexpected : state_->at(op_->owner).posted_recvs;
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      if (it->get() == op_.get()) {
        queue.erase(it);
        break;
      }
    }
    state_->complete(*op_, Status::cancelled("loopback: request cancelled"));
  }

 private:
  std::shared_ptr<State> state_;
  OpPtr op_;
};

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<State> state, int rank) : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(state_->ranks.size()); }
  std::string name() const override { return "loopback"; }

  RequestPtr isend(int peer, Tag tag, std::span<const std::byte> data) override {
    auto op = std::make_shared<Op>();
    op->is_send = true;
    op->owner = rank_;
    op->peer = peer;
    op->tag = tag;
    op->send_data = data.data();
    op->send_size = data.size();
    std::lock_guard<std::mutex> lock(state_->mu);
    if (Status s = checkPost(peer, tag, /*allow_any=*/false); !s.isOk()) {
      state_->complete(*op, s);
      return wrap(op);
    }
    RankState& dst = state_->at(peer);
    if (dst.dead) {
      state_->complete(*op, Status::peerLost(peer, "loopback: rank " + std::to_string(peer) + " is dead"));
      return wrap(op);
    }
    if (!dst.peer_status[static_cast<size_t>(rank_)].isOk()) {
      state_->complete(*op, Status::peerLost(peer, "loopback: rank " + std::to_string(peer) +
                                                       " has closed its endpoint to this rank"));
      return wrap(op);
    }
    for (auto it = dst.posted_recvs.begin(); it != dst.posted_recvs.end(); ++it) {
      Op& recv = **it;
      if ((recv.peer == rank_ || recv.peer == kAnyPeer) && recv.tag == tag) {
        OpPtr keep = *it;
        dst.posted_recvs.erase(it);
        state_->deliver(*op, *keep);
        return wrap(op);
      }
    }
    if (data.size() <= state_->options.eager_limit) {
      op->eager.assign(data.begin(), data.end());
      op->copied = true;
      state_->complete(*op, Status::ok());
    }
    dst.unexpected.push_back(op);
    return wrap(op);
  }

  RequestPtr irecv(int peer, Tag tag, std::span<std::byte> data) override {
    auto op = std::make_shared<Op>();
    op->owner = rank_;
    op->peer = peer;
    op->tag = tag;
    op->recv_data = data.data();
    op->recv_capacity = data.size();
    std::lock_guard<std::mutex> lock(state_->mu);
    if (Status s = checkPost(peer, tag, /*allow_any=*/true); !s.isOk()) {
      state_->complete(*op, s);
      return wrap(op);
    }
    RankState& me = state_->at(rank_);
    for (auto it = me.unexpected.begin(); it != me.unexpected.end(); ++it) {
      Op& send = **it;
      if ((peer == kAnyPeer || send.owner == peer) && send.tag == tag) {
        OpPtr keep = *it;
        me.unexpected.erase(it);
        state_->deliver(*keep, *op);
        return wrap(op);
      }
    }
    me.posted_recvs.push_back(op);
    return wrap(op);
  }

  void progress(Deadline until) override {
    std::unique_lock<std::mutex> lock(state_->mu);
    RankState& me = state_->at(rank_);
    uint64_t& seen = me.seen_events[std::this_thread::get_id()];
    me.cv.wait_until(lock, until, [&] { return me.events != seen; });
    seen = me.events;
  }

  Status peerStatus(int peer) const override {
    if (peer < 0 || peer >= size())
      return Status::invalidArgument("loopback: peer " + std::to_string(peer) + " out of range");
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->at(rank_).peer_status[static_cast<size_t>(peer)];
  }

  uint64_t failureCount() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->at(rank_).failure_count;
  }

  void failPeer(int peer, const Status& why) override {
    if (peer < 0 || peer >= size() || peer == rank_ || why.isOk()) return;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->failPeerLocked(rank_, peer, why);
  }

  Status reconnect(int peer, Deadline) override {
    if (peer < 0 || peer >= size())
      return Status::invalidArgument("loopback: reconnect: peer " + std::to_string(peer) + " out of range");
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->at(peer).dead)
      return Status::peerLost(peer, "loopback: reconnect: rank " + std::to_string(peer) + " is dead");
    state_->at(rank_).peer_status[static_cast<size_t>(peer)] = Status::ok();
    return Status::ok();
  }

 private:
  RequestPtr wrap(OpPtr op) { return std::make_unique<LoopbackRequest>(state_, std::move(op)); }

  // Status a new operation completes with at once, or OK. Requires state_->mu.
  Status checkPost(int peer, Tag tag, bool allow_any) {
    if (state_->at(rank_).dead) return Status::cancelled("loopback: this rank was killed");
    if (tag > kMaxUserTag) return Status::invalidArgument("loopback: tag " + std::to_string(tag) + " exceeds 48 bits");
    if (allow_any && peer == kAnyPeer) return Status::ok();
    if (peer < 0 || peer >= size())
      return Status::invalidArgument("loopback: peer " + std::to_string(peer) + " out of range [0, " +
                                     std::to_string(size()) + ")");
    return state_->at(rank_).peer_status[static_cast<size_t>(peer)];
  }

  std::shared_ptr<State> state_;
  int rank_;
};

}  // namespace

LoopbackHub::LoopbackHub(int size, LoopbackOptions options) : state_(std::make_shared<State>()) {
  CHECK_GT(size, 0) << "LoopbackHub needs at least one rank";
  state_->options = options;
  for (int i = 0; i < size; ++i) {
    auto r = std::make_unique<RankState>();
    r->peer_status.assign(static_cast<size_t>(size), Status::ok());
    state_->ranks.push_back(std::move(r));
  }
}

LoopbackHub::~LoopbackHub() = default;

int LoopbackHub::size() const { return static_cast<int>(state_->ranks.size()); }

std::unique_ptr<Transport> LoopbackHub::transport(int rank) {
  CHECK(rank >= 0 && rank < size()) << "rank " << rank << " out of range";
  return std::make_unique<LoopbackTransport>(state_, rank);
}

std::vector<std::unique_ptr<Transport>> LoopbackHub::transports() {
  std::vector<std::unique_ptr<Transport>> all;
  for (int r = 0; r < size(); ++r) all.push_back(transport(r));
  return all;
}

void LoopbackHub::kill(int rank, const std::string& why) {
  CHECK(rank >= 0 && rank < size()) << "rank " << rank << " out of range";
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->at(rank).dead) return;
  state_->at(rank).dead = true;
  state_->cancelAllOf(rank, Status::cancelled("loopback: this rank was killed"));
  for (int other = 0; other < size(); ++other)
    if (other != rank) state_->failPeerLocked(other, rank, Status::peerLost(rank, why));
  state_->at(rank).unexpected.clear();  // what is left was sent eagerly and has completed
}

void LoopbackHub::restart(int rank) {
  CHECK(rank >= 0 && rank < size()) << "rank " << rank << " out of range";
  std::lock_guard<std::mutex> lock(state_->mu);
  RankState& r = state_->at(rank);
  r.dead = false;
  r.posted_recvs.clear();
  r.unexpected.clear();
  r.peer_status.assign(static_cast<size_t>(size()), Status::ok());
  state_->notify(rank);
}

}  // namespace chaosbed::testing
