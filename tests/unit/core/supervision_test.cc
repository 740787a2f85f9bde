// The controller's decisions (core/control/supervision.h), driven without processes: what counts as a
// failure, restarts and their backoff, membership generations under restart and elastic, job restart,
// recovery episodes of synchronous and asynchronous training, and when a run is over.

#include "core/control/supervision.h"

#include <gtest/gtest.h>

namespace chaosbed::control {
namespace {

const NodeId kWorker0{Role::kWorker, 0}, kWorker1{Role::kWorker, 1}, kWorker2{Role::kWorker, 2};
const NodeId kServer0{Role::kServer, 0}, kEvaluator{Role::kEvaluator, 0};

NodeExit killed(NodeId n, bool by_chaos = true, double lifetime_s = 100) {
  NodeExit e;
  e.node = n;
  e.by_chaos = by_chaos;
  e.lifetime_s = lifetime_s;
  return e;
}

std::vector<Membership> published(const std::vector<Action>& actions) {
  std::vector<Membership> out;
  for (const Action& a : actions)
    if (a.kind == Action::Kind::kPublishMembership) out.push_back(a.membership);
  return out;
}

std::vector<double> recoveries(const std::vector<Action>& actions) {
  std::vector<double> out;
  for (const Action& a : actions)
    if (a.kind == Action::Kind::kRecovery) out.push_back(a.seconds);
  return out;
}

TEST(NodeIdTest, ParsesNamesAndRefusesEverythingElse) {
  EXPECT_EQ(NodeId::parse("worker-12"), (NodeId{Role::kWorker, 12}));
  EXPECT_EQ(NodeId::parse("ps-0"), kServer0);
  EXPECT_EQ(NodeId::parse("evaluator-0")->name(), "evaluator-0");
  for (const char* bad : {"", "worker", "worker-", "worker--1", "worker-1x", "wrkr-1", "-1", "worker-99999999999"})
    EXPECT_FALSE(NodeId::parse(bad).has_value()) << bad;
}

TEST(SupervisionTest, StartPublishesGenerationZeroOfEveryWorker) {
  Supervision s({.workers = 3, .synchronous = true});
  auto m = published(s.start());
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].generation, 0);
  EXPECT_EQ(m[0].workers, (std::vector<int>{0, 1, 2}));
  EXPECT_FALSE(m[0].rollback);
}

TEST(SupervisionTest, RestartPolicyWaitsForEveryLostWorkerThenRollsBackTogether) {
  Supervision s({.workers = 3, .synchronous = true});
  s.start();
  EXPECT_TRUE(s.onExit(killed(kWorker1), 5, 100).empty()) << "restart: nobody moves on without the lost worker";
  EXPECT_TRUE(s.onExit(killed(kWorker2), 6, 100).empty());
  EXPECT_EQ(s.failures(), 2);
  EXPECT_TRUE(s.restartsDue(100).empty()) << "chaos decides about the replacement of what chaos killed";
  s.onRestarted(kWorker1, 1);
  s.onRestarted(kWorker2, 1);
  EXPECT_EQ(s.awaitedIncarnation(kWorker1), 1);
  EXPECT_TRUE(published(s.onReady({kWorker1})).empty()) << "worker 2 is still down";
  auto m = published(s.onReady({kWorker2}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].generation, 1);
  EXPECT_EQ(m[0].workers, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(m[0].rollback);
  EXPECT_EQ(m[0].joined, (std::vector<int>{1, 2})) << "both replacements join (worker 1 was ready first)";
  EXPECT_EQ(m[0].incarnations, (std::vector<int>{0, 1, 1}));
  // The first step after the fault closes both episodes, each from its own start.
  EXPECT_EQ(recoveries(s.onRecoveredEvent(9)), (std::vector<double>{4, 3}));
  EXPECT_TRUE(recoveries(s.onRecoveredEvent(10)).empty());
}

TEST(SupervisionTest, ElasticShrinksAtOnceAndGrowsWhenTheReplacementIsReady) {
  Supervision s({.workers = 3, .synchronous = true, .elastic = true});
  s.start();
  auto shrink = published(s.onExit(killed(kWorker1, /*by_chaos=*/false), 5, 100));
  ASSERT_EQ(shrink.size(), 1u);
  EXPECT_EQ(shrink[0].workers, (std::vector<int>{0, 2}));
  EXPECT_FALSE(shrink[0].rollback);
  // A crash (not chaos) is restarted by the supervisor itself.
  EXPECT_EQ(s.restartsDue(5), (std::vector<NodeId>{kWorker1}));
  s.onRestarted(kWorker1, 1);
  EXPECT_TRUE(s.restartsDue(5).empty());
  auto grow = published(s.onReady({kWorker1}));
  ASSERT_EQ(grow.size(), 1u);
  EXPECT_EQ(grow[0].generation, 2);
  EXPECT_EQ(grow[0].workers, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(grow[0].joined, (std::vector<int>{1}));
  EXPECT_EQ(grow[0].incarnations, (std::vector<int>{0, 1, 0}));
  // Later generations still name the replacement's incarnation, no longer as joined.
  auto again = published(s.onExit(killed(kWorker2, /*by_chaos=*/false), 6, 100));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(again[0].joined.empty());
  EXPECT_EQ(again[0].incarnations, (std::vector<int>{0, 1}));
}

// A collective failure that no process exit explains (a member frozen past the timeout, a partition) still
// gets a new generation: the members would otherwise wait for one forever.
TEST(SupervisionTest, ACollectiveFailureWithoutAnExitGetsANewGenerationAfterTheGrace) {
  for (const bool elastic : {false, true}) {
    SCOPED_TRACE(elastic ? "elastic" : "restart");
    Supervision s({.workers = 3, .synchronous = true, .elastic = elastic});
    s.start();
    s.onCollectiveFailure(kWorker0, 0, 10, "step: timeout");
    s.onCollectiveFailure(kWorker2, 0, 10.2, "step: timeout");
    EXPECT_TRUE(s.onTick(10.5).empty()) << "an exit that caused it may not have been seen yet";
    auto m = published(s.onTick(10 + Supervision::kExitGraceS));
    ASSERT_EQ(m.size(), 1u);
    EXPECT_EQ(m[0].generation, 1);
    EXPECT_EQ(m[0].workers, (std::vector<int>{0, 1, 2})) << "the same members: nobody is known to be gone";
    EXPECT_EQ(m[0].rollback, !elastic) << "restart rolls back together, elastic goes on";
    EXPECT_EQ(s.failures(), 1);
    EXPECT_TRUE(s.onTick(20).empty()) << "answered once";
    // Still frozen: entering generation 1 times out too. Another generation, not another episode.
    s.onCollectiveFailure(kWorker1, 1, 30, "entering generation 1 failed: timeout");
    ASSERT_EQ(published(s.onTick(31)).size(), 1u);
    EXPECT_EQ(s.failures(), 1);
    auto closed = s.onRecoveredEvent(35);
    ASSERT_EQ(closed.size(), 1u);
    EXPECT_EQ(closed[0].seconds, 25) << "from the first report";
    EXPECT_NE(closed[0].cause.find("collective failure"), std::string::npos) << closed[0].cause;
    EXPECT_NE(closed[0].cause.find("worker-0"), std::string::npos) << closed[0].cause;
  }
}

TEST(SupervisionTest, ACollectiveFailureThatAnExitExplainsIsLeftToTheExit) {
  Supervision s({.workers = 3, .synchronous = true});
  s.start();
  s.onCollectiveFailure(kWorker0, 0, 10, "step: peer lost");
  EXPECT_TRUE(s.onExit(killed(kWorker1), 10.1, 100).empty());
  EXPECT_TRUE(s.onTick(20).empty()) << "worker 1 is down: its replacement's generation answers the members";
  EXPECT_EQ(s.failures(), 1) << "one failure: the exit";
  // Reports about a superseded generation, or from a strategy that does not move in generations, are moot.
  s.onCollectiveFailure(kWorker0, 7, 30, "stale");
  EXPECT_TRUE(s.onTick(40).empty());
  Supervision async({.workers = 2});
  async.start();
  async.onCollectiveFailure(kWorker0, 0, 1, "x");
  EXPECT_TRUE(async.onTick(10).empty());
}

TEST(SupervisionTest, EveryRecoveryNamesItsCause) {
  Supervision s({.workers = 3, .synchronous = true, .elastic = true});
  s.start();
  s.onExit(killed(kWorker1), 5, 100);
  auto closed = s.onRecoveredEvent(6);
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0].cause, "worker-1 exited");
}

TEST(SupervisionTest, ElasticNeverPublishesAnEmptyGeneration) {
  Supervision s({.workers = 1, .synchronous = true, .elastic = true});
  s.start();
  EXPECT_TRUE(published(s.onExit(killed(kWorker0), 1, 0)).empty());
}

TEST(SupervisionTest, NodesThatKeepDyingYoungBackOffExponentially) {
  Supervision s({.workers = 2, .restart_after_crash_s = 0});
  s.start();
  double t = 10;
  std::vector<double> delays;
  for (int i = 0; i < 5; ++i) {
    s.onExit(killed(kServer0, /*by_chaos=*/false, /*lifetime_s=*/0.5), t, 0);
    double delay = 0;
    while (s.restartsDue(t + delay).empty()) delay += 0.125;
    delays.push_back(delay);
    s.onRestarted(kServer0, i + 1);
    t += 20;
  }
  EXPECT_EQ(delays, (std::vector<double>{0.5, 1, 2, 4, 8}));
  // A process that lived long resets the backoff.
  s.onExit(killed(kServer0, false, 60), t, 0);
  EXPECT_EQ(s.restartsDue(t), (std::vector<NodeId>{kServer0}));
}

TEST(SupervisionTest, AsynchronousTrainingRecoversWhenTheSurvivorsStepPastTheLoss) {
  Supervision s({.workers = 2});
  s.start();
  s.onExit(killed(kWorker1), 4, 1000);
  EXPECT_TRUE(recoveries(s.onProgress(1000, 4.5)).empty()) << "no step since the loss";
  EXPECT_EQ(recoveries(s.onProgress(1001, 4.75)), (std::vector<double>{0.75}));
  EXPECT_TRUE(recoveries(s.onProgress(2000, 9)).empty()) << "closed once";
}

TEST(SupervisionTest, AfterTheStopEpisodesCloseAtTheStopTime) {
  Supervision s({.workers = 2});
  s.start();
  s.onExit(killed(kWorker1), 4, 1000);
  s.onStop(6);
  EXPECT_EQ(recoveries(s.onProgress(1001, 30)), (std::vector<double>{2}));
  EXPECT_TRUE(s.onExit(killed(kWorker0), 7, 1001).empty()) << "exits after the stop are not failures";
  EXPECT_EQ(s.failures(), 1);
}

TEST(SupervisionTest, JobRestartRestartsEveryRunningNodeAndTheServer) {
  Supervision s({.workers = 2, .job_restart = true});
  s.start();
  auto actions = s.onExit(killed(kServer0, /*by_chaos=*/false), 3, 10);
  std::vector<NodeId> restarted;
  for (const Action& a : actions) {
    ASSERT_EQ(a.kind, Action::Kind::kRestart);
    EXPECT_TRUE(a.only_if_running);
    restarted.push_back(a.node);
  }
  EXPECT_EQ(restarted, (std::vector<NodeId>{kWorker0, kWorker1, kEvaluator}));
  EXPECT_EQ(s.restartsDue(3), (std::vector<NodeId>{kServer0}));
}

TEST(SupervisionTest, FinishedWorkersAndEvaluatorExitsAreNotFailures) {
  Supervision s({.workers = 2});
  s.start();
  NodeExit finished;
  finished.node = kWorker0;
  finished.clean = true;
  EXPECT_TRUE(s.onExit(finished, 9, 10).empty());
  s.onExit(killed(kEvaluator, false), 9, 10);
  EXPECT_EQ(s.failures(), 0);
  EXPECT_FALSE(s.isDown(kWorker0));
  EXPECT_TRUE(s.isDown(kEvaluator)) << "the evaluator is still restarted";
  NodeExit stopped;
  stopped.node = kWorker1;
  stopped.requested = true;
  EXPECT_TRUE(s.onExit(stopped, 9, 10).empty());
}

TEST(SupervisionTest, TheRunEndsWhenNoWorkerRunsAndNoneAwaitsAReplacement) {
  Supervision s({.workers = 2});
  s.start();
  EXPECT_FALSE(s.workersEnded({1}));
  s.onExit(killed(kWorker1), 5, 10);
  EXPECT_FALSE(s.workersEnded({})) << "worker 1 is down and will be replaced";
  s.onRestarted(kWorker1, 1);
  s.onReady({kWorker1});
  EXPECT_EQ(s.workersEnded({}), "workers_ended");
  s.onStop(6);
  EXPECT_FALSE(s.workersEnded({})) << "already stopped";
}

}  // namespace
}  // namespace chaosbed::control
