// The parameter server's workers, the other side of the protocol in ps_protocol.h: pull, compute on the
// worker's own data shard, push every server its slice and take the shard's fresh parameters in the reply.

#include "core/strategies/parameter_server.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "core/data/batches.h"
#include "core/model/model.h"
#include "core/strategies/ps_protocol.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

double seconds(int64_t ns) { return double(ns) * 1e-9; }

bool timeUp(const NodeContext& ctx) {
  return ctx.control.stopRequested() || ctx.control.elapsed() >= ctx.config.time_limit_s;
}

// ---------------------------------------------------------------------------------------------- worker

class PsWorker {
 public:
  PsWorker(NodeContext& ctx, std::unique_ptr<model::Model> model, std::vector<ShardRange> ranges,
           data::BatchIterator batches, EmulatedAccelerator accelerator)
      : ctx_(ctx), model_(std::move(model)), ranges_(std::move(ranges)), batches_(std::move(batches)),
        accelerator_(std::move(accelerator)), pulled_(ranges_.size(), 0) {
    for (const auto& r : ranges_) {
      requests_.emplace_back(sizeof(PsRequestHeader) + r.count * sizeof(float));
      replies_.emplace_back(sizeof(PsReplyHeader) + r.count * sizeof(float));
    }
  }

  Status run();

 private:
  // One round trip with every server; gradients when push. PeerLost of a server is returned.
  Status exchange(bool push, int64_t samples);
  // PeerLost of a server: wait for its replacement; Timeout (a paused or overloaded server): try again.
  Status awaitServer(const Status& why);
  static bool recoverable(const Status& s) {
    return s.code() == StatusCode::kPeerLost || s.code() == StatusCode::kTimeout || s.code() == StatusCode::kAborted;
  }

  NodeContext& ctx_;
  std::unique_ptr<model::Model> model_;
  std::vector<ShardRange> ranges_;
  data::BatchIterator batches_;
  EmulatedAccelerator accelerator_;  // workload.emulate's compute time
  std::vector<int64_t> pulled_;
  std::vector<std::vector<std::byte>> requests_, replies_;
  int64_t seq_ = 0;
  std::optional<double> recovering_since_;
};

Status PsWorker::exchange(bool push, int64_t samples) {
  const int shards = int(ranges_.size());
  std::vector<RequestPtr> ops;
  const int64_t seq = ++seq_;
  const auto start = SteadyClock::now();
  for (int s = 0; s < shards; ++s) {
    PsRequestHeader h;
    h.op = uint32_t(push ? PsOp::kPushPull : PsOp::kPull);
    h.incarnation = uint32_t(ctx_.control.incarnation() + 1);  // 0 means "not seen" on the server
    h.seq = seq;
    h.pulled_version = pulled_[size_t(s)];
    h.samples = push ? samples : 0;
    h.count = push ? int64_t(ranges_[size_t(s)].count) : 0;
    h.sent_ns = monoNs();
    auto& buf = requests_[size_t(s)];
    std::memcpy(buf.data(), &h, sizeof h);
    size_t bytes = sizeof h;
    if (push) {
      std::memcpy(buf.data() + sizeof h, model_->gradients().data() + ranges_[size_t(s)].offset,
                  ranges_[size_t(s)].count * sizeof(float));
      bytes += ranges_[size_t(s)].count * sizeof(float);
    }
    ops.push_back(ctx_.transport.irecv(ctx_.serverRank(s), psReplyTag(seq), replies_[size_t(s)]));
    ops.push_back(ctx_.transport.isend(ctx_.serverRank(s), kPsRequestTag, std::span(buf.data(), bytes)));
  }
  Status st = waitAll(ctx_.transport, ops, collectiveDeadline(ctx_.config));
  const double total = std::chrono::duration<double>(SteadyClock::now() - start).count();
  if (!st.isOk()) {
    ctx_.accounting.add(TimeCategory::kIdleServer, total);
    return st;
  }
  int64_t bound_ns = 0, service_ns = 0, queued_ns = 0, staleness = 0;
  for (int s = 0; s < shards; ++s) {
    PsReplyHeader h;
    std::memcpy(&h, replies_[size_t(s)].data(), sizeof h);
    if (size_t(h.count) != ranges_[size_t(s)].count)
      return Status::internal("ps-" + std::to_string(s) + " replied with " + std::to_string(h.count) + " parameters");
    std::memcpy(model_->parameters().data() + ranges_[size_t(s)].offset, replies_[size_t(s)].data() + sizeof h,
                ranges_[size_t(s)].count * sizeof(float));
    pulled_[size_t(s)] = h.version;
    bound_ns = std::max(bound_ns, h.bound_wait_ns);
    service_ns = std::max(service_ns, h.service_ns);
    queued_ns = std::max(queued_ns, h.queued_ns);
    staleness = std::max(staleness, h.staleness);
  }
  // Waiting behind other workers' requests is server idle. The request's own wire time (inside queued_ns)
  // is transfer: a push carries as many floats as its reply, whose wire time is what the server did not
  // account for; a pull's request is a header.
  const double idle_peer = std::min(total, seconds(bound_ns));
  const double reply_wire = std::max(0.0, total - seconds(bound_ns) - seconds(service_ns) - seconds(queued_ns));
  const double queueing = std::max(0.0, seconds(queued_ns) - (push ? reply_wire : 0.0));
  const double idle_server = std::min(total - idle_peer, seconds(service_ns) + queueing);
  ctx_.accounting.add({{TimeCategory::kIdlePeer, idle_peer},
                       {TimeCategory::kIdleServer, idle_server},
                       {TimeCategory::kTransfer, total - idle_peer - idle_server}});
  if (push) ctx_.accounting.staleness(staleness);
  return Status::ok();
}

// Waits (idle, reason server) until every lost shard's replacement is reachable.
Status PsWorker::awaitServer(const Status& why) {
  if (!recovering_since_) {
    recovering_since_ = ctx_.control.elapsed();
    ctx_.control.record(events::PsWorkerFailureDetected{.lost = why.peer(), .status = why.toString()});
  }
  Accounting::Timer t(ctx_.accounting, TimeCategory::kIdleServer);
  for (int s = 0; s < int(ranges_.size()); ++s) {
    const int rank = ctx_.serverRank(s);
    while (!ctx_.transport.peerStatus(rank).isOk()) {
      if (timeUp(ctx_)) return Status::cancelled("stopped while waiting for ps-" + std::to_string(s));
      const auto tried = SteadyClock::now();
      if (ctx_.transport.reconnect(rank, deadlineIn(1s)).isOk()) break;
      // No replacement published yet: look again shortly (the store answers at once).
      std::this_thread::sleep_until(tried + 100ms);
    }
  }
  return Status::ok();
}

Status PsWorker::run() {
  const bool replacement = ctx_.control.incarnation() > 0;
  if (replacement) recovering_since_ = ctx_.control.elapsed();
  // The first pull: the model as the servers hold it (the end of the set-up; the pull books its own wait).
  for (;;) {
    Accounting::Frame pulling(ctx_.accounting, ctx_.setUpCategory());
    if (timeUp(ctx_)) return Status::ok();
    Status s = exchange(false, 0);
    if (s.isOk()) break;
    if (!recoverable(s)) return s;
    if (!awaitServer(s).isOk()) return Status::ok();
  }
  data::Batch batch;
  int64_t steps = 0;
  for (;;) {
    // The step's own bookkeeping, the loop's tests included: every instant between two steps is booked.
    Accounting::Frame iteration(ctx_.accounting, TimeCategory::kCompute);
    if (timeUp(ctx_) || (ctx_.config.max_steps > 0 && steps >= ctx_.config.max_steps)) break;
    if (ctx_.strategy.checkpoint_on_notice && ctx_.noticeReceived()) {
      ctx_.control.record(events::PsWorkerLeftOnNotice{.step = steps});
      break;
    }
    const auto step_start = SteadyClock::now();
    {
      Accounting::Timer t(ctx_.accounting, TimeCategory::kCompute);
      const auto compute_started = SteadyClock::now();
      CHAOSBED_RETURN_IF_ERROR(batches_.next(batch));
      auto loss = model_->computeGradients(batch.images, batch.labels);
      if (!loss.isOk()) return loss.status();
      accelerator_.afterCompute(compute_started);
    }
    Status s = exchange(true, int64_t(batch.size));
    if (!s.isOk()) {
      // The step's gradient is lost for a shard that died; carry on with the model as the servers hold it.
      if (!recoverable(s)) return s;
      if (!awaitServer(s).isOk()) break;
      continue;
    }
    ++steps;
    ctx_.accounting.step(int64_t(batch.size), std::chrono::duration<double>(SteadyClock::now() - step_start).count());
    ctx_.accounting.epoch(int64_t(batches_.epoch()));
    if (recovering_since_) {
      const double took = ctx_.control.elapsed() - *recovering_since_;
      ctx_.accounting.recovery(took);
      ctx_.control.record(events::PsWorkerRecovered{.seconds = took});
      recovering_since_.reset();
    }
  }
  return Status::ok();
}

}  // namespace

Status runPsWorker(NodeContext& ctx) {
  if (!ctx.data) return Status::invalidArgument("ps worker: no training set loaded");
  if (ctx.servers < 1) return Status::invalidArgument("parameter_server needs at least one server");
  std::optional<Accounting::Frame> setting_up(std::in_place, ctx.accounting, ctx.setUpCategory(),
                                              SourcePlace());
  CHAOSBED_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                            makeModel(ctx.config, size_t(ctx.config.batch_per_worker)));
  auto ranges = shardRanges(model->numParameters(), ctx.servers);
  // Each worker walks its own disjoint shard of the data; a replacement starts a fresh pass over it.
  CHAOSBED_ASSIGN_OR_RETURN(
      data::BatchIterator batches,
      data::BatchIterator::create(ctx.data->train, {ctx.rank, ctx.workers},
                                  ctx.config.seed + uint64_t(ctx.control.incarnation()) * 7919,
                                  size_t(ctx.config.batch_per_worker)));
  CHAOSBED_ASSIGN_OR_RETURN(EmulatedAccelerator accelerator,
                            EmulatedAccelerator::create(ctx, model->realParameters(), /*allreduce=*/false));
  PsWorker worker(ctx, std::move(model), std::move(ranges), std::move(batches), std::move(accelerator));
  setting_up.reset();
  Status trained = worker.run();
  ctx.accounting.finish();  // the role's work is done; tearing its objects down is not part of it
  return trained;
}

}  // namespace chaosbed
