#include "core/strategies/evaluator.h"

#include <glog/logging.h>

#include <cstring>

#include "core/eval/snapshot_evaluator.h"
#include "core/strategies/shard_assembly.h"
#include "core/strategies/snapshot_receiver.h"
#include "core/strategies/tags.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

class Evaluator {
 public:
  Evaluator(NodeContext& ctx, std::unique_ptr<eval::SnapshotEvaluator> evaluator, size_t params)
      : ctx_(ctx), evaluator_(std::move(evaluator)), params_(params), shards_(params) {}

  Status run() {
    {
      SnapshotReceiver whole(ctx_.transport, kSnapshotTag, snapshotMessageBytes(params_));
      SnapshotReceiver shard(ctx_.transport, kShardSnapshotTag, sizeof(ShardSnapshotHeader) + params_ * sizeof(float));
      while (!ctx_.control.stopRequested()) {
        ctx_.transport.progress(deadlineIn(100ms));
        whole.poll([this](std::span<const std::byte> m, const Request& r) { onWhole(m, r); });
        shard.poll([this](std::span<const std::byte> m, const Request& r) { onShard(m, r); });
        publish();
        reconnectLost();
      }
    }
    if (Status s = evaluator_->drain(deadlineIn(10s)); !s.isOk()) LOG(WARNING) << "evaluator: " << s.toString();
    publish();
    return Status::ok();
  }

 private:
  // A sender met dead at start-up (its stale record) or lost since stays failed on this transport, and a
  // message from its replacement may need this side's endpoint (rendezvous): reach every failed peer's
  // replacement again, once in a while and briefly, so that receiving is not held up.
  void reconnectLost() {
    const auto now = SteadyClock::now();
    if (now < next_reconnect_) return;
    next_reconnect_ = now + 250ms;
    for (int peer = 0; peer < ctx_.transport.size(); ++peer)
      if (peer != ctx_.rank && !ctx_.transport.peerStatus(peer).isOk())
        (void)ctx_.transport.reconnect(peer, deadlineIn(20ms));  // a peer still down is tried again in 250 ms
  }

  double secondsSinceStart(int64_t realtime_ns) const {
    return double(realtime_ns - ctx_.control.startNs()) * 1e-9;
  }

  void submit(double time_s, int64_t step, std::vector<float> params) {
    if (time_s <= last_time_s_) return;  // a late snapshot from a former lowest member
    last_time_s_ = time_s;
    if (Status s = evaluator_->submit(time_s, step, std::move(params)); !s.isOk())
      LOG(WARNING) << "evaluator: snapshot refused: " << s.toString();
  }

  void onWhole(std::span<const std::byte> whole, const Request& r) {
    SnapshotHeader h;
    std::memcpy(&h, whole.data(), sizeof h);
    if (size_t(h.param_count) != params_ || r.receivedBytes() != snapshotMessageBytes(params_)) {
      LOG(WARNING) << "evaluator: snapshot from rank " << r.source() << " has " << h.param_count
                   << " parameters, expected " << params_;
      return;
    }
    std::vector<float> params(params_);
    std::memcpy(params.data(), whole.data() + sizeof h, params_ * sizeof(float));
    submit(secondsSinceStart(h.realtime_ns), h.step, std::move(params));
  }

  void onShard(std::span<const std::byte> shard, const Request& r) {
    ShardSnapshotHeader h;
    std::memcpy(&h, shard.data(), sizeof h);
    if (h.offset < 0 || h.count <= 0 || h.count > int64_t(params_) || h.offset > int64_t(params_) - h.count ||
        r.receivedBytes() != sizeof h + size_t(h.count) * sizeof(float)) {
      LOG(WARNING) << "evaluator: malformed shard snapshot from rank " << r.source();
      return;
    }
    auto whole = shards_.add(h, shard.subspan(sizeof h));
    if (!whole) return;
    submit(secondsSinceStart(whole->realtime_ns), whole->updates, {whole->params.begin(), whole->params.end()});
  }

  void publish() {
    auto records = evaluator_->records();
    for (; published_ < records.size(); ++published_) {
      const auto& r = records[published_];
      ctx_.control.record(events::Eval{
          .snapshot_t = r.time_s, .step = r.step, .accuracy = r.accuracy, .loss = r.loss, .refined = r.refined});
    }
  }

  NodeContext& ctx_;
  std::unique_ptr<eval::SnapshotEvaluator> evaluator_;
  const size_t params_;
  ShardAssembly shards_;
  double last_time_s_ = -1;
  size_t published_ = 0;
  SteadyClock::time_point next_reconnect_{};
};

}  // namespace

Status runEvaluator(NodeContext& ctx) {
  if (!ctx.data) return Status::invalidArgument("evaluator: no test set loaded");
  std::vector<size_t> layers(ctx.config.layers.begin(), ctx.config.layers.end());
  eval::EvaluatorOptions options;
  options.target_accuracy = ctx.config.target_accuracy;
  CHAOSBED_ASSIGN_OR_RETURN(options.kind, model::parseKind(ctx.config.model));
  options.emulate = ctx.config.emulate;
  // By steps, snapshots come every N gradients, more often than the evaluator can keep up with: it evaluates
  // one every eval_interval_s and resolves each crossing of the target on the snapshots between.
  if (ctx.config.eval_interval_steps > 0) options.pace_s = ctx.config.eval_interval_s;
  CHAOSBED_ASSIGN_OR_RETURN(auto evaluator, eval::SnapshotEvaluator::create(layers, ctx.data->test, options));
  const size_t parameters = evaluator->numParameters();
  return Evaluator(ctx, std::move(evaluator), parameters).run();
}

}  // namespace chaosbed
