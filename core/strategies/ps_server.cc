// The parameter server's side of the protocol in ps_protocol.h: one shard of the parameters, the workers'
// requests served round robin, replies held for the staleness bound or the synchronous round, snapshots
// for the evaluator, checkpoints and their restore.

#include "core/strategies/parameter_server.h"

#include <glog/logging.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "core/checkpoint/checkpoint.h"
#include "core/config/json_fields.h"
#include "core/model/model.h"
#include "core/optim/sgd.h"
#include "core/strategies/ps_protocol.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using optim::Sgd;
using optim::SgdOptions;

// A request whose worker process cannot be reached (PsServer::retryUnreached): how often to look for its
// process again, and when to drop it.
constexpr auto kRetryUnreached = 100ms;
constexpr auto kGiveUpUnreached = 5s;

// ---------------------------------------------------------------------------------------------- server

class PsServer {
 public:
  PsServer(NodeContext& ctx, int shard, ShardRange range, Sgd sgd, std::vector<float> params)
      : ctx_(ctx), shard_(shard), range_(range), sgd_(std::move(sgd)), params_(std::move(params)),
        round_sum_(range.count, 0.0f), clocks_(size_t(ctx.workers), 0), incarnations_(size_t(ctx.workers), 0),
        pulled_(size_t(ctx.workers), 0), replies_(size_t(ctx.workers)), reply_ops_(size_t(ctx.workers)), snapshot_(sizeof(ShardSnapshotHeader) + range.count * sizeof(float)) {}

  Status run();

 private:
  struct Pending {
    int worker = 0;
    int64_t seq = 0;
    int64_t pulled_version = 0;
    int64_t arrived_ns = 0;   // monotonic
  int64_t queued_ns = 0;    // before arrived_ns, since the worker sent it
    int64_t applied_version = 0;
    int64_t bound_since_ns = 0;  // when it started waiting for peers
    int64_t clock = 0;           // the worker's clock after this request
  };

  Status restore();
  void onRequest(int worker, std::span<const std::byte> msg);
  void retryUnreached();
  bool live(int worker) const { return ctx_.transport.peerStatus(worker).isOk(); }
  int64_t minLiveClock() const;
  void releaseReady();
  void reply(const Pending& p, int64_t bound_wait_ns);
  void applyRound();
  void maybeSnapshot();
  void maybeCheckpoint(bool force);
  void onNotice();
  void publishApplied();

  NodeContext& ctx_;
  const int shard_;
  const ShardRange range_;
  Sgd sgd_;
  std::vector<float> params_;
  // One receive per worker, posted for that worker alone and posted again as soon as it is served: while one
  // request is applied, the others' rendezvous transfers go on. Never a wildcard: when a worker dies, the
  // transport cannot tell which pending wildcard receive its message had matched and aborts every one still
  // moving data, so a live worker's request was dropped with the dead one's and that worker waited for a
  // reply that never came (two of four workers stuck for the rest of the run, the others' pushes at half
  // speed). A dead worker's receive fails with it; its successor's is posted once it is reached (a first
  // request that comes meanwhile waits in UCX's queue).
  struct Receive {
    std::vector<std::byte> buf;
    RequestPtr op;  // null while the worker's process is down
    SteadyClock::time_point next_try{};
  };
  std::vector<Receive> receives_;  // by worker
  size_t next_served_ = 0;         // round robin: the worker served first in the next pass
  void postReceive(int worker);
  bool anyReceived() const {
    return std::any_of(receives_.begin(), receives_.end(), [](const Receive& r) { return r.op && r.op->isComplete(); });
  }
  void repostReached();
  void serveReceived();
  int64_t version_ = 0;
  int64_t checkpoint_version_ = 0;
  int64_t gradients_applied_ = 0;  // workers' gradients in version_ (a synchronous round holds several)
  std::vector<float> round_sum_;  // synchronous mode: gradients of the current round
  int round_contributions_ = 0;
  int64_t round_samples_ = 0;
  std::vector<int64_t> clocks_;        // pushes received from each worker by this incarnation
  std::vector<uint32_t> incarnations_; // the newest incarnation seen per worker
  std::vector<int64_t> pulled_;
  // One reply buffer per worker, alive as long as the transport: a reply cancelled mid-way to a paused worker
  // may still be read when that worker wakes (transport.h, Request::cancel).
  std::vector<std::vector<std::byte>> replies_;
  // The reply in flight to each worker: sent without waiting, so the server goes on to the next request while
  // it travels. Its buffer is written again only once it has completed (or been given up).
  std::vector<RequestPtr> reply_ops_;
  std::vector<std::vector<std::byte>> abandoned_;  // buffers of replies and receives given up mid-way (Request::cancel)
  void reapReplies();
  std::deque<Pending> held_;           // replies waiting for the staleness bound / the round
  // The first request of a worker process this server could not reach yet, by worker (retryUnreached).
  struct Unreached {
    std::vector<std::byte> request;
    SteadyClock::time_point next_try;
    SteadyClock::time_point give_up;
  };
  std::map<int, Unreached> unreached_;
  uint64_t failures_seen_ = 0;
  std::vector<std::byte> snapshot_;
  RequestPtr snapshot_req_;
  SteadyClock::time_point snapshot_sent_{};
  int64_t last_tick_ = -1;
  std::optional<CheckpointDir> checkpoints_;
  std::unique_ptr<AsyncCheckpointWriter> writer_;
  void reportCheckpoints();
  SteadyClock::time_point next_checkpoint_;
  SteadyClock::time_point next_publish_;
  bool acted_on_notice_ = false;
};

Status PsServer::restore() {
  CHAOSBED_ASSIGN_OR_RETURN(CheckpointDir dir, CheckpointDir::open(ctx_.checkpoint_dir + "/ps-" + std::to_string(shard_), 3));
  checkpoints_ = dir;
  writer_ = std::make_unique<AsyncCheckpointWriter>(*checkpoints_);
  // A shard's first process starts from the initial parameters: a checkpoint it finds is not its own.
  if (ctx_.control.incarnation() == 0) return Status::ok();
  auto loaded = dir.loadLatestGood();
  if (!loaded.isOk() && loaded.status().code() != StatusCode::kNotFound) return loaded.status();
  if (loaded.isOk()) {
    const TrainingState& st = loaded->state;
    if (st.params.size() != range_.count || st.optimizer.size() != 1 || st.optimizer[0].size() != range_.count)
      return Status::dataLoss(loaded->path + ": checkpoint does not fit shard " + std::to_string(shard_));
    params_ = st.params;
    std::copy(st.optimizer[0].begin(), st.optimizer[0].end(), sgd_.velocity().begin());
    version_ = checkpoint_version_ = int64_t(st.step);
    // A synchronous round held one gradient per worker (fewer if one was down: this counts it full).
    gradients_applied_ = version_ * (ctx_.strategy.max_staleness == 0 ? ctx_.workers : 1);
    for (const auto& skipped : loaded->skipped) LOG(WARNING) << "ps-" << shard_ << ": skipped " << skipped;
    ctx_.control.record(events::ShardRestored{.shard = shard_, .version = version_, .path = loaded->path});
  }
  // Updates the previous incarnation applied after this checkpoint (all of them, without one) are lost.
  const std::string applied_key = "ps/" + std::to_string(shard_) + "/applied";
  auto applied = ctx_.control.store().get(ctx_.control.key(applied_key), deadlineIn(1s));
  if (!applied.isOk()) return Status::ok();
  // Written by the predecessor as a decimal version; anything else is ignored (no rollback is counted).
  // The bound keeps lost_updates * batch_per_worker far from overflow.
  constexpr int64_t kMaxVersion = int64_t{1} << 40;
  int64_t applied_version = 0;
  const char* end = applied->data() + applied->size();
  auto [p, ec] = std::from_chars(applied->data(), end, applied_version);
  if (ec != std::errc() || p != end || applied_version < 0 || applied_version > kMaxVersion) {
    LOG(WARNING) << "ps-" << shard_ << ": ignoring malformed " << applied_key << ": \""
                 << config::excerpt(*applied, 40) << "\"";
    return Status::ok();
  }
  const int64_t lost_updates = std::max<int64_t>(0, applied_version - version_);
  const int64_t lost = lost_updates * ctx_.config.batch_per_worker / std::max(1, ctx_.servers);
  ctx_.accounting.rollback(lost);
  ctx_.control.record(events::ShardRollback{
      .shard = shard_, .version = version_, .lost_updates = lost_updates, .samples_lost = lost});
  return Status::ok();
}

int64_t PsServer::minLiveClock() const {
  int64_t m = std::numeric_limits<int64_t>::max();
  for (int w = 0; w < ctx_.workers; ++w)
    if (live(w) && incarnations_[size_t(w)] > 0) m = std::min(m, clocks_[size_t(w)]);
  return m;
}

void PsServer::reply(const Pending& p, int64_t bound_wait_ns) {
  PsReplyHeader h;
  h.version = version_;
  h.staleness = std::max<int64_t>(0, p.applied_version - p.pulled_version);
  h.bound_wait_ns = bound_wait_ns;
  h.service_ns = std::max<int64_t>(0, monoNs() - p.arrived_ns - bound_wait_ns);
  h.queued_ns = p.queued_ns;
  h.count = int64_t(range_.count);
  RequestPtr& previous = reply_ops_[size_t(p.worker)];
  if (previous) {
    // The worker asks again only after the previous reply reached it, so this is at most its last bytes'
    // completion; a worker paused mid-transfer holds it up to the deadline, and is given up.
    (void)wait(ctx_.transport, previous, deadlineIn(5s));  // done or not, it is given up below
    previous->cancel();
    if (previous->bufferInUse()) abandoned_.push_back(std::exchange(replies_[size_t(p.worker)], {}));
    previous.reset();
  }
  std::vector<std::byte>& msg = replies_[size_t(p.worker)];
  msg.resize(sizeof h + range_.count * sizeof(float));
  std::memcpy(msg.data(), &h, sizeof h);
  std::memcpy(msg.data() + sizeof h, params_.data(), range_.count * sizeof(float));
  pulled_[size_t(p.worker)] = version_;
  // A dead worker's reply fails and is dropped (reapReplies).
  previous = ctx_.transport.isend(p.worker, psReplyTag(p.seq), msg);
}

void PsServer::reapReplies() {
  for (size_t w = 0; w < reply_ops_.size(); ++w) {
    RequestPtr& op = reply_ops_[w];
    if (!op || !op->isComplete()) continue;
    if (!op->status().isOk()) VLOG(1) << "ps-" << shard_ << ": reply to worker " << w << ": " << op->status().toString();
    if (op->bufferInUse()) abandoned_.push_back(std::exchange(replies_[w], {}));
    op.reset();
  }
}

void PsServer::postReceive(int worker) {
  Receive& r = receives_[size_t(worker)];
  // A receive that failed mid-transfer may still be written by the transport: its buffer is left to it.
  if (r.op && r.op->bufferInUse()) abandoned_.push_back(std::exchange(r.buf, std::vector<std::byte>(r.buf.size())));
  r.op = ctx_.transport.irecv(worker, kPsRequestTag, r.buf);
}

void PsServer::serveReceived() {
  // Every worker with a request gets one served per pass, starting after the last pass's first.
  const size_t workers = receives_.size();
  for (size_t n = 0; n < workers; ++n) {
    const int w = int((next_served_ + n) % workers);
    Receive& r = receives_[size_t(w)];
    if (!r.op || !r.op->isComplete()) continue;
    if (r.op->status().isOk()) {
      onRequest(w, std::span(r.buf.data(), r.op->receivedBytes()));
      postReceive(w);
    } else if (live(w)) {
      postReceive(w);  // cancelled or refused, the worker still there
    } else {
      r.op.reset();  // down: repostReached() posts again once its process (or successor) is reached
      r.next_try = SteadyClock::now();
    }
  }
  next_served_ = (next_served_ + 1) % std::max<size_t>(1, workers);
}

// A worker that was down is reached again through its successor's record, one cheap look per
// kRetryUnreached, so that serving the others is not held up.
void PsServer::repostReached() {
  const auto now = SteadyClock::now();
  for (int w = 0; w < int(receives_.size()); ++w) {
    Receive& r = receives_[size_t(w)];
    if (r.op || now < r.next_try) continue;
    if (live(w) || ctx_.transport.reconnect(w, now).isOk()) {
      postReceive(w);
    } else {
      r.next_try = now + kRetryUnreached;
    }
  }
}

void PsServer::applyRound() {
  if (round_contributions_ == 0) return;
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
  const Status applied = sgd_.apply(params_, round_sum_, 1.0f / float(round_contributions_));
  CHECK(applied.isOk()) << applied.toString();  // the shard's sizes are fixed at set-up
  std::fill(round_sum_.begin(), round_sum_.end(), 0.0f);
  ctx_.accounting.step(round_samples_, 0);
  gradients_applied_ += round_contributions_;
  round_contributions_ = 0;
  round_samples_ = 0;
  ++version_;
}

void PsServer::releaseReady() {
  const auto& bound = ctx_.strategy.max_staleness;
  if (!bound) return;
  if (*bound == 0) {
    // Synchronous: the round is complete when every live worker has pushed it (a worker that died mid-round
    // leaves it; the round completes with the others). A live worker not heard from yet (still starting)
    // holds the round too, or the first rounds would apply the early workers' gradients alone.
    if (held_.empty()) return;
    const int64_t round = held_.front().clock;
    bool complete = true;
    for (int w = 0; w < ctx_.workers; ++w)
      if (live(w) && (incarnations_[size_t(w)] == 0 || clocks_[size_t(w)] < round)) complete = false;
    if (!complete) return;
    applyRound();
    const int64_t now = monoNs();
    for (auto& p : held_) {
      p.applied_version = version_ - 1;
      reply(p, now - p.bound_since_ns);
    }
    held_.clear();
    return;
  }
  const int64_t min_clock = minLiveClock();
  const int64_t now = monoNs();
  for (auto it = held_.begin(); it != held_.end();) {
    if (!live(it->worker)) {
      it = held_.erase(it);
    } else if (it->clock - min_clock <= *bound) {
      reply(*it, now - it->bound_since_ns);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
}

void PsServer::onRequest(int worker, std::span<const std::byte> msg) {
  const int64_t arrived = monoNs();
  PsRequestHeader h;
  if (msg.size() >= sizeof h) std::memcpy(&h, msg.data(), sizeof h);
  const size_t expected = h.op == uint32_t(PsOp::kPushPull) ? range_.count : 0;
  if (worker < 0 || worker >= ctx_.workers || size_t(h.count) != expected ||
      msg.size() != sizeof h + expected * sizeof(float)) {
    LOG(WARNING) << "ps-" << shard_ << ": malformed request from rank " << worker << " (op " << h.op << ", "
                 << h.count << " floats, " << msg.size() << " bytes)";
    return;
  }
  // A dead predecessor's request met after its successor's: nobody waits for the reply.
  if (h.incarnation < incarnations_[size_t(worker)]) return;
  if (h.incarnation > incarnations_[size_t(worker)]) {
    // A new (or replacement) worker: talk to its current process, and let it start level with the others.
    // One whose predecessor this server saw die is reached through its record, published before it sent
    // this: one look suffices. Nothing newer published means the sender itself has died since (its
    // successor may be seconds away): the request is set aside, and the others are served meanwhile.
    if (!ctx_.transport.peerStatus(worker).isOk() && !ctx_.transport.reconnect(worker, SteadyClock::now()).isOk()) {
      const auto now = SteadyClock::now();
      unreached_[worker] = {std::vector<std::byte>(msg.begin(), msg.end()), now + kRetryUnreached, now + kGiveUpUnreached};
      return;
    }
    incarnations_[size_t(worker)] = h.incarnation;
    int64_t level = 0;
    bool any = false;
    for (int w = 0; w < ctx_.workers; ++w)
      if (w != worker && live(w) && incarnations_[size_t(w)] > 0) {
        level = any ? std::min(level, clocks_[size_t(w)]) : clocks_[size_t(w)];
        any = true;
      }
    // Synchronous: it joins the round in progress (version_ rounds are complete); the others' clocks may
    // already count their pushes to that round.
    const bool sync = ctx_.strategy.max_staleness && *ctx_.strategy.max_staleness == 0;
    clocks_[size_t(worker)] = sync ? version_ : any ? level : 0;
  }
  Pending p;
  p.worker = worker;
  p.seq = h.seq;
  p.pulled_version = h.pulled_version;
  p.arrived_ns = arrived;
  // The sender's clock is read from the network: only a plausible delay (under an hour) counts.
  if (h.sent_ns > 0 && h.sent_ns <= arrived && arrived - h.sent_ns < int64_t(3600) * 1'000'000'000) p.queued_ns = arrived - h.sent_ns;
  p.bound_since_ns = arrived;
  p.applied_version = version_;
  if (h.op == uint32_t(PsOp::kPushPull)) {
    std::span<const float> grad(reinterpret_cast<const float*>(msg.data() + sizeof h), range_.count);
    const auto& bound = ctx_.strategy.max_staleness;
    if (bound && *bound == 0) {
      Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
      for (size_t i = 0; i < range_.count; ++i) round_sum_[i] += grad[i];
      ++round_contributions_;
      round_samples_ += h.samples;
    } else {
      Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
      // Each push moves the model by 1/workers of a step: W pushes of batch b then make the progress of one
      // synchronous step over W x b samples, so both strategies train with the same learning rate per sample.
      const Status applied = sgd_.apply(params_, grad, 1.0f / float(ctx_.workers));
      CHECK(applied.isOk()) << applied.toString();  // the request's size was checked on arrival
      ++version_;
      ++gradients_applied_;
      ctx_.accounting.step(h.samples, 0);
    }
    ++clocks_[size_t(worker)];
  }
  p.clock = clocks_[size_t(worker)];
  if (!ctx_.strategy.max_staleness || h.op == uint32_t(PsOp::kPull)) {
    reply(p, 0);
    return;
  }
  held_.push_back(p);
  releaseReady();
}

// A set-aside request is served once its worker's current process is reached (its successor came up, or a
// look at a slow store succeeds now), and dropped when nobody came for kGiveUpUnreached: its sender is gone.
void PsServer::retryUnreached() {
  const auto now = SteadyClock::now();
  for (auto it = unreached_.begin(); it != unreached_.end();) {
    const int worker = it->first;
    Unreached& u = it->second;
    if (!ctx_.transport.peerStatus(worker).isOk() && now < u.next_try) {
      ++it;
      continue;
    }
    if (ctx_.transport.peerStatus(worker).isOk() || ctx_.transport.reconnect(worker, now).isOk()) {
      const std::vector<std::byte> request = std::move(u.request);
      it = unreached_.erase(it);
      onRequest(worker, request);
    } else if (now >= u.give_up) {
      LOG(INFO) << "ps-" << shard_ << ": dropped a request of worker " << worker << ", whose process is gone";
      it = unreached_.erase(it);
    } else {
      u.next_try = now + kRetryUnreached;
      ++it;
    }
  }
}

void PsServer::maybeSnapshot() {
  // Every shard sees every worker's gradient, so its count of them ticks in step with the other shards'.
  const int64_t every = ctx_.config.eval_interval_steps;
  const int64_t tick = every > 0 ? gradients_applied_ / every : int64_t(ctx_.control.elapsed() / ctx_.config.eval_interval_s);
  if (tick <= last_tick_) return;
  if (snapshot_req_ && !snapshot_req_->isComplete()) {
    // A snapshot the evaluator has not taken for seconds is stuck (sent while a replaced evaluator still held
    // this server's predecessor): abandon it, which fails the evaluator peer until it is reconnected below.
    if (SteadyClock::now() - snapshot_sent_ < 2s) return;
    snapshot_req_->cancel();
  }
  last_tick_ = tick;
  // A failed evaluator stays failed on this transport: one replaced since (job_restart, a crash), or whose
  // stale record this server met at start-up, is reached again through its new incarnation. Until that is up,
  // ticks are skipped, and each tries once, briefly, so that serving workers is not held up.
  const int evaluator = ctx_.evaluatorRank();
  if (!ctx_.transport.peerStatus(evaluator).isOk() && !ctx_.transport.reconnect(evaluator, deadlineIn(100ms)).isOk())
    return;
  ShardSnapshotHeader h;
  h.realtime_ns = realtimeNs();
  h.offset = int64_t(range_.offset);
  h.count = int64_t(range_.count);
  h.updates = version_;
  std::memcpy(snapshot_.data(), &h, sizeof h);
  std::memcpy(snapshot_.data() + sizeof h, params_.data(), range_.count * sizeof(float));
  snapshot_req_ = ctx_.transport.isend(evaluator, kShardSnapshotTag, snapshot_);
  snapshot_sent_ = SteadyClock::now();
}

void PsServer::publishApplied() {
  // Best effort: a missed value is only a late one (the next publication replaces it).
  (void)ctx_.control.store().set(ctx_.control.key("ps/" + std::to_string(shard_) + "/applied"), std::to_string(version_));
}

void PsServer::maybeCheckpoint(bool force) {
  reportCheckpoints();
  const auto now = SteadyClock::now();
  if (now >= next_publish_) {
    publishApplied();
    next_publish_ = now + 250ms;
  }
  if (!force && now < next_checkpoint_) return;
  next_checkpoint_ = now + std::chrono::duration_cast<SteadyClock::duration>(
                               std::chrono::duration<double>(ctx_.config.checkpoint_interval_s));
  if (version_ == checkpoint_version_ && !force) return;
  Accounting::Timer t(ctx_.accounting, TimeCategory::kCheckpoint);  // the copy; the writer saves it meanwhile
  TrainingState st;
  st.params = params_;
  st.optimizer.emplace_back(sgd_.velocity().begin(), sgd_.velocity().end());
  st.step = uint64_t(version_);
  st.metadata = {{"strategy", "parameter_server"}, {"shard", std::to_string(shard_)},
                 {"offset", std::to_string(range_.offset)}};
  writer_->submit(std::move(st));
  checkpoint_version_ = version_;
}

// A checkpoint counts, and is announced, when the writer has saved it (or failed to), not when it is handed
// to it: a replacement restores only what is on disk, and a full disk must show as failures.
void PsServer::reportCheckpoints() {
  for (const AsyncCheckpointWriter::Completed& c : writer_->takeCompleted()) {
    ctx_.accounting.checkpoint(c.status.isOk());
    if (c.status.isOk()) {
      ctx_.control.record(events::ShardCheckpoint{.shard = shard_, .version = int64_t(c.step)});
    } else {
      LOG(WARNING) << "ps-" << shard_ << ": checkpoint of version " << c.step << " failed: " << c.status.toString();
      ctx_.control.record(events::ShardCheckpointFailed{
          .shard = shard_, .version = int64_t(c.step), .error = c.status.toString()});
    }
  }
}

void PsServer::onNotice() {
  acted_on_notice_ = true;
  maybeCheckpoint(true);
  Status saved;
  {
    Accounting::Timer t(ctx_.accounting, TimeCategory::kCheckpoint);
    saved = writer_->flush(deadlineIn(10s));
  }
  reportCheckpoints();
  ctx_.control.record(events::ShardNoticeCheckpoint{
      .shard = shard_, .version = version_, .saved = saved.isOk(), .error = saved.isOk() ? "" : saved.toString()});
}

Status PsServer::run() {
  {
    // Restoring the shard is a replacement's recovery; a first server's start-up (and its receive buffers:
    // 10 ms of page faults for 4 workers' 0.9 MB requests) is its own compute.
    Accounting::Frame starting(ctx_.accounting, ctx_.setUpCategory());
    CHAOSBED_RETURN_IF_ERROR(restore());
    next_checkpoint_ = SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(
                                                std::chrono::duration<double>(ctx_.config.checkpoint_interval_s));
    receives_.resize(size_t(ctx_.workers));
    for (int w = 0; w < ctx_.workers; ++w) {
      receives_[size_t(w)].buf.resize(sizeof(PsRequestHeader) + range_.count * sizeof(float));
      postReceive(w);
    }
  }
  for (;;) {
    // Waiting in progress() for the workers' requests is peer idle; handling them books itself. The frame
    // holds the loop's test too: every instant between two iterations is booked.
    Accounting::Frame iteration(ctx_.accounting, TimeCategory::kIdlePeer);
    if (ctx_.control.stopRequested()) break;
    // A receive posted while other workers' requests wait in UCX's unexpected queue completes inside irecv(),
    // before progress() starts counting completions: progress() would sleep through it (every request after
    // the first waited out its epoll slice, and two workers made 1% of one worker's pushes). Wait only when
    // nothing is ready.
    if (!anyReceived()) {
      // progress() both waits for requests (peer idle) and moves their bytes in and the replies' out: that
      // work is the server's transfer (booked as the call's last stretch), or a busy server looks idle.
      const double busy_before = ctx_.transport.progressBusySeconds();
      ctx_.transport.progress(deadlineIn(20ms));
      if (const double moved = ctx_.transport.progressBusySeconds() - busy_before; moved > 0)
        ctx_.accounting.add(TimeCategory::kTransfer, moved);
    }
    serveReceived();
    repostReached();
    reapReplies();
    if (uint64_t f = ctx_.transport.failureCount(); f != failures_seen_) {
      failures_seen_ = f;
      releaseReady();  // a dead worker no longer holds the others back
    }
    retryUnreached();
    maybeSnapshot();
    maybeCheckpoint(false);
    if (ctx_.strategy.checkpoint_on_notice && !acted_on_notice_ && ctx_.noticeReceived()) onNotice();
  }
  {
    // A request already matched is let finish (up to 100 ms each), and replies under way their last bytes:
    // waiting for the workers.
    Accounting::Frame cancelling(ctx_.accounting, TimeCategory::kIdlePeer);
    for (Receive& r : receives_)
      if (r.op) r.op->cancel();
    const Deadline until = deadlineIn(100ms);
    for (RequestPtr& op : reply_ops_) {
      if (!op) continue;
      (void)wait(ctx_.transport, op, until);  // done or not, it is given up next
      op->cancel();  // here, in the frame, not in the destructor
    }
  }
  Accounting::Frame leaving(ctx_.accounting, TimeCategory::kCheckpoint);  // the last checkpoint, on disk
  maybeCheckpoint(true);
  publishApplied();
  Status flushed = writer_->flush(deadlineIn(10s));
  reportCheckpoints();
  return flushed;
}

}  // namespace

std::vector<ShardRange> shardRanges(size_t params, int shards) {
  std::vector<ShardRange> r(static_cast<size_t>(shards));
  size_t offset = 0;
  for (int s = 0; s < shards; ++s) {
    size_t count = params / size_t(shards) + (size_t(s) < params % size_t(shards) ? 1 : 0);
    r[size_t(s)] = {offset, count};
    offset += count;
  }
  return r;
}

Status runPsServer(NodeContext& ctx) {
  const int shard = ctx.rank - ctx.workers;
  if (shard < 0 || shard >= ctx.servers) return Status::invalidArgument("rank " + std::to_string(ctx.rank) + " is not a server");
  std::optional<Accounting::Frame> setting_up(std::in_place, ctx.accounting, ctx.setUpCategory(),
                                              SourcePlace());
  CHAOSBED_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, makeModel(ctx.config, 1));
  const ShardRange range = shardRanges(model->numParameters(), ctx.servers)[size_t(shard)];
  SgdOptions o;
  o.lr = float(ctx.config.learning_rate);
  o.momentum = float(ctx.config.momentum);
  o.weight_decay = float(ctx.config.weight_decay);
  CHAOSBED_ASSIGN_OR_RETURN(Sgd sgd, Sgd::create(o, range.count));
  std::vector<float> params(model->parameters().begin() + long(range.offset),
                            model->parameters().begin() + long(range.offset + range.count));
  PsServer server(ctx, shard, range, std::move(sgd), std::move(params));
  setting_up.reset();
  Status served = server.run();
  ctx.accounting.finish();  // the role's work is done; tearing its objects down is not part of it
  return served;
}

}  // namespace chaosbed
