// The mirrored strategy on the in-process loopback transport, one thread per rank, with a fake controller
// (the test) publishing memberships into an in-memory Store: equivalence with one process, idle accounting,
// restart and elastic recovery, checkpoint on notice, backup workers, stop, snapshots and checkpoints.

#include "core/strategies/mirrored.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/checkpoint/checkpoint.h"
#include "core/data/batches.h"
#include "core/model/mlp.h"
#include "core/optim/sgd.h"
#include "core/runtime/control.h"
#include "core/strategies/tags.h"
#include "tests/testing/loopback_transport.h"
#include "tests/testing/memory_store.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

using testing::MemoryStore;

constexpr char kRun[] = "run";

data::Dataset syntheticTrain() {
  data::SyntheticOptions o;
  o.dims = 16;
  o.num_classes = 4;
  o.train_size = 1024;
  o.test_size = 64;
  o.seed = 7;
  auto splits = data::makeSynthetic(o);
  EXPECT_TRUE(splits.isOk()) << splits.status().toString();
  return std::move(splits).value().train;
}

TrainingConfig tinyConfig(int batch_per_worker, int64_t max_steps) {
  TrainingConfig c;
  c.layers = {16, 32, 4};
  c.dataset = "synthetic";
  c.batch_per_worker = batch_per_worker;
  c.learning_rate = 0.05;
  c.momentum = 0.9;
  c.seed = 11;
  c.time_limit_s = 60;
  c.eval_interval_s = 1e6;
  c.checkpoint_interval_s = 1e6;
  c.collective_timeout_s = 20;
  c.max_steps = max_steps;
  return c;
}

// One process training with the whole global batch: the trajectory mirrored must follow.
std::vector<float> referenceParameters(const TrainingConfig& c, const data::Dataset& train, size_t global_batch,
                                       int64_t steps) {
  std::vector<size_t> layers(c.layers.begin(), c.layers.end());
  auto model = model::Mlp::create(layers, global_batch);
  EXPECT_TRUE(model.isOk());
  model->initialize(c.seed);
  auto sgd = optim::Sgd::create({float(c.learning_rate), float(c.momentum), float(c.weight_decay)},
                                model->numParameters());
  EXPECT_TRUE(sgd.isOk());
  std::vector<float> images(global_batch * train.dims);
  std::vector<uint8_t> labels(global_batch);
  uint64_t epoch = 0;
  size_t cursor = 0;
  auto order = data::shardOrder(train.size(), {0, 1}, c.seed, epoch).value();
  for (int64_t s = 0; s < steps; ++s) {
    if (cursor + global_batch > train.size()) {
      order = data::shardOrder(train.size(), {0, 1}, c.seed, ++epoch).value();
      cursor = 0;
    }
    for (size_t i = 0; i < global_batch; ++i) {
      const uint32_t idx = order[cursor + i];
      std::copy_n(train.images.begin() + std::ptrdiff_t(idx * train.dims), train.dims,
                  images.begin() + std::ptrdiff_t(i * train.dims));
      labels[i] = train.labels[idx];
    }
    EXPECT_TRUE(model->computeGradients(images, labels).isOk());
    EXPECT_TRUE(sgd->apply(model->parameters(), model->gradients()).isOk());
    cursor += global_batch;
  }
  return {model->parameters().begin(), model->parameters().end()};
}

void expectNear(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0f, std::abs(b[i])));
  EXPECT_LT(worst, 2e-5f) << what;
}

// `incarnations`: one per member, as the controller publishes them (empty: all first incarnations).
Membership membership(int64_t generation, std::vector<int> workers, bool rollback = false, std::vector<int> joined = {},
                      std::vector<int> incarnations = {}) {
  Membership m;
  m.generation = generation;
  m.workers = std::move(workers);
  m.rollback = rollback;
  m.joined = std::move(joined);
  m.incarnations = std::move(incarnations);
  return m;
}

// A worker node: transport, control channel, accounting and context, trained on its own thread.
struct Node {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<ControlChannel> control;
  Accounting accounting;
  std::atomic<bool> notice{false};
  std::unique_ptr<NodeContext> ctx;
  MirroredHooks hooks;
  std::thread thread;
  std::optional<Result<MirroredOutcome>> result;
};

// The fake controller: a loopback hub for `ranks` ranks, the first `workers` of them mirrored workers.
class Cluster {
 public:
  Cluster(int workers, TrainingConfig config, StrategyOptions strategy, int ranks = 0)
      : hub(ranks > 0 ? ranks : workers), workers_(workers), config_(std::move(config)), strategy_(std::move(strategy)),
        train_(syntheticTrain()) {
    static std::atomic<int> counter{0};
    dir_ = std::filesystem::temp_directory_path() /
           ("mirrored-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(dir_);
    EXPECT_TRUE(store.set(std::string(kRun) + "/start", std::to_string(realtimeNs())).isOk());
    nodes_.resize(size_t(workers));
    std::vector<int> all;
    for (int r = 0; r < workers; ++r) all.push_back(r);
    publish(membership(0, all));  // as the controller does before training starts
  }
  ~Cluster() {
    for (auto& n : all_)
      if (n->thread.joinable()) n->thread.join();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void start(int rank, int incarnation = 0, MirroredHooks hooks = {}) {
    auto node = std::make_unique<Node>();
    node->transport = hub.transport(rank);
    node->control =
        std::make_unique<ControlChannel>(store, kRun, "worker-" + std::to_string(rank), incarnation, workers_);
    EXPECT_TRUE(node->control->waitStart(deadlineIn(5s)).isOk());
    Accounting* acct = &node->accounting;
    node->control->startBackground([acct] { return acct->snapshot(); }, 100ms);
    node->ctx.reset(new NodeContext{*node->transport, *node->control, node->accounting, config_, strategy_, rank,
                                    workers_, 0, dir_.string(), &node->notice});
    node->hooks = std::move(hooks);
    Node* n = node.get();
    node->thread = std::thread([this, n] {
      n->result = runMirrored(*n->ctx, train_, n->hooks);
      n->control->stopBackground();
    });
    nodes_[size_t(rank)] = node.get();
    all_.push_back(std::move(node));
  }
  void startAll(std::map<int, MirroredHooks> hooks = {}) {
    for (int r = 0; r < workers_; ++r) start(r, 0, hooks.count(r) ? hooks[r] : MirroredHooks{});
  }
  Node& node(int rank) { return *nodes_[size_t(rank)]; }
  void join(int rank) {
    if (node(rank).thread.joinable()) node(rank).thread.join();
  }
  void joinAll() {
    for (auto& n : all_)
      if (n->thread.joinable()) n->thread.join();
  }
  void publish(const Membership& m) {
    EXPECT_TRUE(store.set(std::string(kRun) + "/membership/" + std::to_string(m.generation), m.toJson().dump()).isOk());
  }
  const MirroredOutcome& outcome(int rank) {
    auto& r = node(rank).result;
    EXPECT_TRUE(r.has_value());
    EXPECT_TRUE(r->isOk()) << "rank " << rank << ": " << r->status().toString();
    return r->value();
  }
  // Stats summed over every incarnation that ran.
  NodeStats totals() {
    NodeStats t;
    for (auto& n : all_) t.merge(n->accounting.snapshot());
    return t;
  }
  std::vector<nlohmann::json> events(const std::string& type) {
    std::vector<nlohmann::json> out;
    for (auto& e : store.events(kRun))
      if (e["type"] == type) out.push_back(e);
    return out;
  }
  const data::Dataset& train() const { return train_; }
  const TrainingConfig& config() const { return config_; }
  const std::filesystem::path& dir() const { return dir_; }

  testing::LoopbackHub hub;
  MemoryStore store;

 private:
  int workers_;
  TrainingConfig config_;
  StrategyOptions strategy_;
  data::Dataset train_;
  std::filesystem::path dir_;
  std::vector<Node*> nodes_;
  std::vector<std::unique_ptr<Node>> all_;
};

StrategyOptions mirrored(bool elastic = false) {
  StrategyOptions o;
  o.kind = StrategyKind::kMirrored;
  o.label = "mirrored";
  o.elastic = elastic;
  return o;
}

// Starts every rank, kills `rank` after its gradient of step `kill_at` in generation 0, starts its
// replacement and publishes the generation `next` it recovers in.
void killAndReplace(Cluster& c, int rank, int64_t kill_at, const Membership& next) {
  MirroredHooks killer;
  killer.after_gradient = [&c, rank, kill_at](int64_t step, int64_t generation) {
    if (generation == 0 && step == kill_at) c.hub.kill(rank);
  };
  c.startAll({{rank, killer}});
  c.join(rank);
  c.hub.restart(rank);
  c.start(rank, /*incarnation=*/1);
  c.publish(next);
}

TEST(MirroredTest, WorkersFollowTheTrajectoryOfOneProcessWithTheGlobalBatch) {
  constexpr int kGlobalBatch = 32;
  constexpr int64_t kSteps = 40;  // more than one epoch of 1024 samples
  std::vector<float> reference;
  for (int n : {1, 2, 4}) {
    Cluster c(n, tinyConfig(kGlobalBatch / n, kSteps), mirrored());
    if (reference.empty()) reference = referenceParameters(c.config(), c.train(), kGlobalBatch, kSteps);
    c.startAll();
    c.joinAll();
    for (int r = 0; r < n; ++r) {
      const MirroredOutcome& o = c.outcome(r);
      EXPECT_EQ(o.step, kSteps);
      expectNear(o.parameters, reference, std::to_string(n) + " workers, rank " + std::to_string(r));
      EXPECT_EQ(o.parameters, c.outcome(0).parameters) << "ranks must hold identical parameters";
      const NodeStats s = c.node(r).accounting.snapshot();
      EXPECT_EQ(s.steps, kSteps);
      EXPECT_EQ(s.samples, kSteps * (kGlobalBatch / n));
      EXPECT_GT(s.seconds[int(TimeCategory::kCompute)], 0.0);
    }
  }
}

TEST(MirroredTest, APeerHeldBackShowsUpAsPeerIdleOnTheOthers) {
  static constexpr double kDelay = 0.05;
  Cluster c(3, tinyConfig(8, 12), mirrored());
  std::atomic<double> slept{0};  // what the injected sleeps really took (a loaded machine oversleeps)
  MirroredHooks slow;
  slow.after_gradient = [&slept](int64_t step, int64_t) {
    if (step % 4 != 1) return;
    const auto t0 = SteadyClock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(kDelay));  // injected slowness
    slept = slept + std::chrono::duration<double>(SteadyClock::now() - t0).count();
  };
  c.startAll({{2, slow}});
  c.joinAll();
  EXPECT_GE(slept.load(), 3 * kDelay);
  for (int r : {0, 1}) {
    (void)c.outcome(r);
    const double idle = c.node(r).accounting.snapshot().seconds[int(TimeCategory::kIdlePeer)];
    EXPECT_GT(idle, slept * 0.9) << "rank " << r;
    EXPECT_LT(idle, slept + 0.15) << "rank " << r;
  }
  const NodeStats slow_stats = c.node(2).accounting.snapshot();
  EXPECT_LT(slow_stats.seconds[int(TimeCategory::kIdlePeer)], 0.05);
  EXPECT_GT(slow_stats.seconds[int(TimeCategory::kCompute)], slept * 0.9);
}

// Restart policy: a worker dies, the controller brings it back, everybody rolls back. With no checkpoint
// yet, everyone restarts from the seed and loses every sample so far; the result equals a run without the
// fault.
TEST(MirroredTest, RestartRollsEveryoneBackAndReplaysExactly) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 20, kKillAt = 5;
  Cluster c(3, tinyConfig(kBatch, kSteps), mirrored());
  MirroredHooks killer;
  killer.after_gradient = [&c](int64_t step, int64_t generation) {
    if (generation == 0 && step == kKillAt) c.hub.kill(2);
  };
  c.startAll({{2, killer}});
  c.join(2);
  ASSERT_TRUE(c.node(2).result.has_value());
  EXPECT_EQ(c.node(2).result->status().code(), StatusCode::kCancelled);
  c.hub.restart(2);
  c.start(2, /*incarnation=*/1);
  c.publish(membership(1, {0, 1, 2}, /*rollback=*/true, {2}, {0, 0, 1}));
  c.joinAll();

  const std::vector<float> reference = referenceParameters(c.config(), c.train(), 3 * kBatch, kSteps);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.outcome(r).step, kSteps);
    EXPECT_EQ(c.outcome(r).generation, 1);
    expectNear(c.outcome(r).parameters, reference, "rank " + std::to_string(r));
  }
  for (int r : {0, 1}) {
    const NodeStats s = c.node(r).accounting.snapshot();
    // A survivor may have lost the step in flight when the failure struck (the all-reduce aborts on every
    // member when any member dies), so it lost kKillAt or kKillAt - 1 steps of its slices.
    EXPECT_TRUE(s.samples_lost == kKillAt * kBatch || s.samples_lost == (kKillAt - 1) * kBatch)
        << "rank " << r << " lost " << s.samples_lost;
    EXPECT_EQ(s.samples - s.samples_lost, kSteps * kBatch) << "rank " << r;
    EXPECT_EQ(s.recoveries, 1) << "rank " << r;
    EXPECT_GT(s.seconds[int(TimeCategory::kIdleRecovery)], 0.0);
  }
  // The replacement accounts its predecessor's lost share: the totals are right, every surviving sample is
  // in the final model exactly once.
  EXPECT_EQ(c.node(2).accounting.snapshot().samples_lost, kKillAt * kBatch);
  EXPECT_EQ(c.totals().samples - c.totals().samples_lost, 3 * kSteps * kBatch);
  EXPECT_GE(c.events("failure_detected").size(), 2u);
  EXPECT_EQ(c.events("recovered").size(), 3u);
  EXPECT_EQ(c.events("failure_detected").front()["lost_rank"], 2);
}

// Restart from a checkpoint: with a checkpoint every step, the rollback goes back to the newest one.
TEST(MirroredTest, RestartRestoresTheLatestCheckpoint) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 12, kKillAt = 6;
  TrainingConfig config = tinyConfig(kBatch, kSteps);
  config.checkpoint_interval_s = 0;
  Cluster c(2, config, mirrored());
  killAndReplace(c, 1, kKillAt, membership(1, {0, 1}, true, {1}, {0, 1}));
  c.joinAll();
  const std::vector<float> reference = referenceParameters(c.config(), c.train(), 2 * kBatch, kSteps);
  for (int r = 0; r < 2; ++r) expectNear(c.outcome(r).parameters, reference, "rank " + std::to_string(r));
  // Checkpoint of step kKillAt was written after step kKillAt-1: nothing is lost.
  EXPECT_EQ(c.node(0).accounting.snapshot().samples_lost, 0);
  EXPECT_EQ(c.totals().samples_lost, 0);
  auto rollbacks = c.events("rollback");
  ASSERT_FALSE(rollbacks.empty());
  EXPECT_EQ(rollbacks.front()["step"], kKillAt);
  EXPECT_GE(c.node(0).accounting.snapshot().checkpoints_written, kSteps - 1);
}

// checkpoint_on_notice: the noticed rank leaves after the agreed step, the lowest other member saved it, and
// the restart rolls back to exactly that step.
TEST(MirroredTest, CheckpointOnNoticeLosesNothing) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 16, kNoticeAt = 5;
  StrategyOptions strategy = mirrored();
  strategy.checkpoint_on_notice = true;
  Cluster c(3, tinyConfig(kBatch, kSteps), strategy);
  MirroredHooks preempted;
  preempted.after_gradient = [&c](int64_t step, int64_t generation) {
    if (generation == 0 && step == kNoticeAt) c.node(1).notice = true;  // what the SIGTERM handler does
  };
  c.startAll({{1, preempted}});
  c.join(1);
  const MirroredOutcome& left = c.outcome(1);
  EXPECT_TRUE(left.left_on_notice);
  EXPECT_EQ(left.step, kNoticeAt + 1);
  c.hub.kill(1, "exited after notice");  // the process is gone
  c.hub.restart(1);
  c.start(1, 1);
  c.publish(membership(1, {0, 1, 2}, true, {1}, {0, 1, 0}));
  c.joinAll();
  const std::vector<float> reference = referenceParameters(c.config(), c.train(), 3 * kBatch, kSteps);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.outcome(r).step, kSteps);
    expectNear(c.outcome(r).parameters, reference, "rank " + std::to_string(r));
  }
  EXPECT_EQ(c.totals().samples_lost, 0);
  auto checkpoints = c.events("checkpoint");
  ASSERT_EQ(checkpoints.size(), 1u);
  EXPECT_EQ(checkpoints[0]["step"], kNoticeAt + 1);
  EXPECT_EQ(checkpoints[0]["node"], "worker-0");
  auto rollbacks = c.events("rollback");
  ASSERT_FALSE(rollbacks.empty());
  for (auto& r : rollbacks) EXPECT_EQ(r["step"], kNoticeAt + 1);
}

// Elastic: the survivors go on without the dead rank; its replacement joins a later generation at a step
// boundary and receives the state by broadcast.
TEST(MirroredTest, ElasticShrinksAndRegrows) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 200, kKillAt = 4, kRegrowAt = 10;
  Cluster c(3, tinyConfig(kBatch, kSteps), mirrored(/*elastic=*/true));
  std::mutex mu;
  std::condition_variable cv;
  bool shrunk_and_running = false;
  MirroredHooks killer;
  killer.after_gradient = [&c](int64_t step, int64_t generation) {
    if (generation == 0 && step == kKillAt) c.hub.kill(2);
  };
  MirroredHooks observer;  // rank 0: tells the controller the shrunk group trains, then awaits the regrow
  observer.after_gradient = [&](int64_t step, int64_t generation) {
    if (generation != 1 || step != kRegrowAt) return;
    {
      std::lock_guard lock(mu);
      shrunk_and_running = true;
    }
    cv.notify_all();
    EXPECT_TRUE(c.node(0).control->waitMembershipAfter(1, deadlineIn(10s)).isOk());
  };
  c.startAll({{0, observer}, {2, killer}});
  c.join(2);
  c.publish(membership(1, {0, 1}));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return shrunk_and_running; }));
  }
  c.hub.restart(2);
  c.start(2, 1);
  c.publish(membership(2, {0, 1, 2}, false, {2}, {0, 0, 1}));
  c.joinAll();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.outcome(r).step, kSteps);
    EXPECT_EQ(c.outcome(r).generation, 2);
    EXPECT_EQ(c.outcome(r).parameters, c.outcome(0).parameters) << "rank " << r;
    EXPECT_EQ(c.outcome(r).velocity, c.outcome(0).velocity) << "rank " << r;
  }
  for (int r : {0, 1}) {
    const NodeStats s = c.node(r).accounting.snapshot();
    EXPECT_EQ(s.samples_lost, 0);
    EXPECT_EQ(s.recoveries, 1);
  }
  EXPECT_EQ(c.events("membership_changed").size(), 2u);  // both survivors entered generation 2
  // The replacement trained from where the others were, not from the seed.
  EXPECT_LT(c.node(2).accounting.snapshot().steps, kSteps - kRegrowAt);
}

// A replacement that starts slowly may first see a generation published after the one that joined it (at
// 64 workers, more replacements joined one by one): that generation lists it among the workers, no longer
// among the joined, and names its incarnation. It must enter it: waiting for a generation that joins it
// again held every member in the rendezvous until the time limit.
TEST(MirroredTest, AReplacementEntersAGenerationPublishedAfterTheOneThatJoinedIt) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 60, kKillAt = 4;
  Cluster c(3, tinyConfig(kBatch, kSteps), mirrored(/*elastic=*/true));
  MirroredHooks killer;
  killer.after_gradient = [&c](int64_t step, int64_t generation) {
    if (generation == 0 && step == kKillAt) c.hub.kill(2);
  };
  // The survivors stay in generation 1 until generations 2 and 3 are out: else, with the test's thread
  // descheduled (a loaded machine), they could finish every step between them and never meet the replacement.
  std::promise<void> published;
  std::shared_future<void> out = published.get_future().share();
  MirroredHooks survivor;
  survivor.after_gradient = [out](int64_t, int64_t generation) {
    if (generation == 1) out.wait();
  };
  c.startAll({{0, survivor}, {1, survivor}, {2, killer}});
  c.join(2);
  c.publish(membership(1, {0, 1}));
  c.hub.restart(2);
  c.publish(membership(2, {0, 1, 2}, false, {2}, {0, 0, 1}));
  c.publish(membership(3, {0, 1, 2}, false, {}, {0, 0, 1}));
  published.set_value();
  c.start(2, 1);
  c.joinAll();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.outcome(r).step, kSteps) << "rank " << r;
    EXPECT_EQ(c.outcome(r).generation, 3) << "rank " << r;
    EXPECT_EQ(c.outcome(r).parameters, c.outcome(0).parameters) << "rank " << r;
  }
}

// Backup workers: a step applies the first N-b gradients; a rank that stalls does not hold the others back
// and still ends with the same parameters.
TEST(MirroredTest, BackupWorkersDoNotWaitForAStraggler) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 40;
  static constexpr double kStall = 0.3;
  StrategyOptions strategy = mirrored();
  strategy.backup_workers = 1;
  Cluster c(4, tinyConfig(kBatch, kSteps), strategy);
  // The first non-coordinator to compute a gradient of step 3 or later stalls (a member that is behind
  // skips computing the steps it is already left out of, so which rank computes a given step varies).
  std::atomic<int> straggler{-1};
  std::map<int, MirroredHooks> hooks;
  for (int r = 1; r < 4; ++r) {
    hooks[r].after_gradient = [r, &straggler](int64_t step, int64_t) {
      int none = -1;
      if (step >= 3 && straggler.compare_exchange_strong(none, r))
        std::this_thread::sleep_for(std::chrono::duration<double>(kStall));  // injected slowness
    };
  }
  c.startAll(hooks);
  c.joinAll();
  const int slow = straggler.load();
  ASSERT_GE(slow, 1);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(c.outcome(r).step, kSteps);
    EXPECT_EQ(c.outcome(r).parameters, c.outcome(0).parameters) << "rank " << r;
  }
  // No step of the others waited for the stall (without backups one step of each takes >= kStall).
  for (int r = 0; r < 4; ++r) {
    if (r == slow) continue;
    const Histogram& h = c.node(r).accounting.snapshot().step_seconds;
    const size_t i = size_t(std::find(h.bounds.begin(), h.bounds.end(), 0.25) - h.bounds.begin());
    ASSERT_LT(i, h.bounds.size());
    EXPECT_EQ(h.count - h.counts[i], 0u) << "rank " << r << " had steps longer than 0.25 s";
  }
  EXPECT_GT(c.node(slow).accounting.snapshot().seconds[int(TimeCategory::kCompute)], kStall);
  // The straggler's gradients were dropped while it was behind.
  EXPECT_LT(c.node(slow).accounting.snapshot().samples, kSteps * kBatch);
  // Three gradients per step entered the model.
  int64_t samples = 0;
  for (int r = 0; r < 4; ++r) samples += c.node(r).accounting.snapshot().samples;
  EXPECT_EQ(samples, kSteps * 3 * kBatch);
}

TEST(MirroredTest, AStopRequestStopsEveryoneAfterTheSameStep) {
  Cluster c(3, tinyConfig(8, /*max_steps=*/0), mirrored());
  MirroredHooks stopper;
  stopper.after_gradient = [&c](int64_t step, int64_t) {
    if (step == 7) {
      EXPECT_TRUE(c.store.set(std::string(kRun) + "/stop", "test").isOk());
    }
  };
  c.startAll({{1, stopper}});
  c.joinAll();
  const int64_t step = c.outcome(0).step;
  EXPECT_GE(step, 8);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(c.outcome(r).step, step);
    EXPECT_EQ(c.outcome(r).parameters, c.outcome(0).parameters);
  }
}

// The lowest member sends snapshots (tags.h format) to the evaluator rank and writes checkpoints.
TEST(MirroredTest, SnapshotsReachTheEvaluatorAndCheckpointsAreWritten) {
  constexpr int64_t kSteps = 10;
  TrainingConfig config = tinyConfig(8, kSteps);
  config.eval_interval_s = 0;
  config.checkpoint_interval_s = 0;
  Cluster c(2, config, mirrored(), /*ranks=*/3);
  auto evaluator = c.hub.transport(2);
  const size_t params = model::Mlp::create({16, 32, 4}, 1)->numParameters();
  std::vector<int64_t> steps;
  std::vector<float> last;
  std::thread eval([&] {
    std::vector<std::byte> buffer(snapshotMessageBytes(params));
    for (;;) {
      auto r = evaluator->irecv(kAnyPeer, kSnapshotTag, buffer);
      ASSERT_TRUE(wait(*evaluator, r, deadlineIn(20s)).isOk());
      EXPECT_EQ(r->source(), 0);
      ASSERT_EQ(r->receivedBytes(), buffer.size());
      SnapshotHeader h;
      std::memcpy(&h, buffer.data(), sizeof(h));
      EXPECT_EQ(h.param_count, int64_t(params));
      EXPECT_GT(h.realtime_ns, 0);
      steps.push_back(h.step);
      if (h.step == 2 * kSteps) {  // a snapshot counts gradients: two per step of two workers
        last.resize(params);
        std::memcpy(last.data(), buffer.data() + sizeof(h), params * sizeof(float));
        return;
      }
    }
  });
  c.startAll();
  c.joinAll();
  eval.join();
  ASSERT_FALSE(steps.empty());
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  EXPECT_EQ(last, c.outcome(0).parameters);
  auto dir = CheckpointDir::open(c.dir().string(), 3);
  ASSERT_TRUE(dir.isOk());
  auto latest = dir->loadLatestGood();
  ASSERT_TRUE(latest.isOk()) << latest.status().toString();
  EXPECT_EQ(latest->state.step, uint64_t(kSteps));
  EXPECT_EQ(latest->state.params, c.outcome(0).parameters);
  EXPECT_EQ(c.node(0).accounting.snapshot().checkpoints_written, kSteps);
  EXPECT_EQ(c.node(1).accounting.snapshot().checkpoints_written, 0);
}

// By steps, a snapshot goes every N gradients (three workers: one per step at N = 3), and a rollback moves
// the count back: snapshots go on from the restored step rather than waiting until training passes the
// step it had reached before.
TEST(MirroredTest, SnapshotsByStepsGoOnFromARollback) {
  constexpr int kBatch = 8;
  constexpr int64_t kSteps = 20, kKillAt = 5;
  TrainingConfig config = tinyConfig(kBatch, kSteps);
  config.eval_interval_steps = 3;
  Cluster c(3, config, mirrored(), /*ranks=*/4);
  auto evaluator = c.hub.transport(3);
  const size_t params = model::Mlp::create({16, 32, 4}, 1)->numParameters();
  std::vector<int64_t> steps;  // gradients in each snapshot, as they arrive
  std::thread eval([&] {
    std::vector<std::byte> buffer(snapshotMessageBytes(params));
    for (;;) {
      auto r = evaluator->irecv(kAnyPeer, kSnapshotTag, buffer);
      ASSERT_TRUE(wait(*evaluator, r, deadlineIn(20s)).isOk());
      SnapshotHeader h;
      std::memcpy(&h, buffer.data(), sizeof(h));
      steps.push_back(h.step);
      if (h.step == 3 * kSteps) return;
    }
  });
  killAndReplace(c, 2, kKillAt, membership(1, {0, 1, 2}, /*rollback=*/true, {2}, {0, 0, 1}));
  c.joinAll();
  eval.join();
  ASSERT_FALSE(steps.empty());
  // Without a checkpoint the rollback goes to the start: the first snapshot after it has fewer gradients
  // than the one before it, and far fewer than the kKillAt steps reached before the failure.
  auto back = std::adjacent_find(steps.begin(), steps.end(), [](int64_t a, int64_t b) { return b < a; });
  ASSERT_NE(back, steps.end()) << "no snapshot went back with the rollback";
  EXPECT_LT(*(back + 1), 3 * kKillAt) << "snapshots resumed only once training passed the failed step";
  EXPECT_EQ(steps.back(), 3 * kSteps);
}

TEST(MirroredTest, BadInputIsRefusedWithAClearError) {
  TrainingConfig config = tinyConfig(8, 1);
  config.layers = {20, 4};  // the synthetic set is made from the layers; the dataset option decides
  config.dataset = "imagenet";
  auto r = loadTrainingData(config);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("imagenet"), std::string::npos) << r.status().toString();

  config = tinyConfig(600, 1);  // 2 x 600 samples do not fit in 1024
  Cluster c(2, config, mirrored());
  c.startAll();
  c.joinAll();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(c.node(rank).result.has_value());
    EXPECT_EQ(c.node(rank).result->status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.node(rank).result->status().message().find("global batch"), std::string::npos);
  }
}

}  // namespace
}  // namespace chaosbed
