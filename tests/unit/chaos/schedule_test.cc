#include "chaos/schedule/schedule.h"

#include <gtest/gtest.h>

#include <tuple>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "tests/unit/chaos/chaos_test_util.h"

namespace chaosbed::chaos {
namespace {

using testing::parseOk;

std::string tempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).lexically_normal().string();
}

const std::vector<NodeInfo> kNodes = makeNodes({{"worker", 4}, {"ps", 1}});

// The chaos section of shared/examples/spot-preemption.yaml.
const char* kExampleChaos = R"(
chaos:
  time_scale: 60
  faults:
    - name: spot-reclaims
      action: preempt
      profile: aws
      target: {role: worker}
      schedule: {poisson: {rate_per_node_hour: 0.6}}
      restart_after: {exponential: {mean_s: 120}}
    - name: slow-worker
      action: slow
      target: {role: worker, index: 3}
      at_s: 20
      duration_s: 30
      params: {cpu_fraction: 0.25}
    - name: congested-link
      action: link
      target: {between: [{role: worker}, {role: ps}]}
      at_s: 60
      duration_s: 20
      params: {bandwidth_mbps: 100, latency_ms: 5}
)";

Plan drawOk(const ChaosSpec& spec, uint64_t seed, double horizon = 300, const std::vector<NodeInfo>& nodes = kNodes) {
  Result<Plan> p = drawPlan(spec, nodes, seed, horizon);
  EXPECT_TRUE(p.isOk()) << p.status().toString();
  return p.isOk() ? *p : Plan{};
}

TEST(ChaosSchedule, SameSeedGivesByteIdenticalPlan) {
  ChaosSpec spec = parseOk(kExampleChaos);
  const std::string a = formatPlanJsonLines(drawOk(spec, 42)) + formatPlanTable(drawOk(spec, 42));
  const std::string b = formatPlanJsonLines(drawOk(spec, 42)) + formatPlanTable(drawOk(spec, 42));
  EXPECT_EQ(a, b);
  EXPECT_NE(formatPlanJsonLines(drawOk(spec, 42)), formatPlanJsonLines(drawOk(spec, 43)));
}

TEST(ChaosSchedule, ExamplePlanHasExpectedShape) {
  Plan p = drawOk(parseOk(kExampleChaos), 42);
  int preempt_applies = 0, escalates = 0, link_applies = 0;
  for (const Action& a : p.actions) {
    const Fault& f = p.fault(a.fault_id);
    if (f.kind == FaultKind::kPreempt && a.type == ActionType::kApply) ++preempt_applies;
    if (a.type == ActionType::kEscalate) ++escalates;
    if (f.kind == FaultKind::kLink && a.type == ActionType::kApply) ++link_applies;
    if (f.kind == FaultKind::kPreempt) {
      EXPECT_DOUBLE_EQ(f.params.grace_s, 2.0);  // 120 s / 60
    }
  }
  EXPECT_EQ(preempt_applies, escalates);
  EXPECT_EQ(link_applies, 5);  // 4 workers towards ps-0, ps-0 towards the 4 workers
  // Sorted by time.
  for (size_t i = 1; i < p.actions.size(); ++i) EXPECT_LE(p.actions[i - 1].at_s, p.actions[i].at_s);
}

TEST(ChaosSchedule, AddingAFaultDoesNotReshuffleOthers) {
  ChaosSpec spec = parseOk(kExampleChaos);
  Plan before = drawOk(spec, 7);
  ChaosSpec more = spec;
  FaultSpec extra = spec.faults[1];
  extra.name = "extra";
  more.faults.push_back(extra);
  Plan after = drawOk(more, 7);
  auto poissonTimes = [](const Plan& p) {
    std::vector<std::pair<double, std::string>> v;
    for (const Action& a : p.actions)
      if (p.fault(a.fault_id).name == "spot-reclaims") v.push_back({a.at_s, a.node});
    return v;
  };
  EXPECT_EQ(poissonTimes(before), poissonTimes(after));
  EXPECT_FALSE(poissonTimes(before).empty());
}

// A vanish ends its node like a kill: an apply, no revert, and a replacement after restart_after; it takes
// params and duration_s no more than a kill does.
TEST(ChaosSchedule, AVanishIsApplyThenReplaceWithNoRevert) {
  ChaosSpec spec = parseOk(R"(
chaos:
  faults:
    - {name: v, action: vanish, target: {role: worker, index: 1}, at_s: 10, restart_after: {fixed_s: 5}}
)");
  Plan p = drawOk(spec, 1, 300);
  ASSERT_EQ(p.faults.size(), 1u);
  EXPECT_EQ(p.faults[0].kind, FaultKind::kVanish);
  std::vector<std::pair<ActionType, double>> actions;
  for (const Action& a : p.actions) actions.emplace_back(a.type, a.at_s);
  EXPECT_EQ(actions, (std::vector<std::pair<ActionType, double>>{{ActionType::kApply, 10}, {ActionType::kReplace, 15}}));
  config::Diagnostics diags;
  testing::parseChaosYaml("chaos:\n  faults:\n    - {name: v, action: vanish, target: {role: worker}, at_s: 1, duration_s: 2}\n",
                          &diags);
  EXPECT_NE(diags.toString().find("a vanish is instantaneous; it has no duration"), std::string::npos) << diags.toString();
}

// A transport error happens in group A's transports only (a link is shaped from both sides).
TEST(ChaosSchedule, ATransportErrorActsOnItsFirstGroupOnly) {
  ChaosSpec spec = parseOk(R"(
chaos:
  faults:
    - {name: e, action: transport_error, target: {between: [{nodes: [worker-0]}, {nodes: [worker-1, ps-0]}]},
       at_s: 3, duration_s: 2, params: {error: drop}}
)");
  Plan p = drawOk(spec, 1, 300);
  ASSERT_EQ(p.faults.size(), 1u);
  EXPECT_EQ(p.faults[0].peers, (std::vector<std::string>{"worker-1", "ps-0"}));
  std::vector<std::tuple<ActionType, double, std::string>> actions;
  for (const Action& a : p.actions) actions.emplace_back(a.type, a.at_s, a.node);
  EXPECT_EQ(actions, (std::vector<std::tuple<ActionType, double, std::string>>{
                         {ActionType::kApply, 3, "worker-0"}, {ActionType::kRevert, 5, "worker-0"}}));
  EXPECT_EQ(p.faults[0].params.error, "drop");
}

// A Poisson rate given as the failures a run expects is the same process whatever the time scale, and
// every rate-driven fault states its expected count and mean time between failures.
TEST(ChaosSchedule, ExpectedPerRunFixesTheCountAndEveryRateIsStatedThreeWays) {
  ChaosSpec spec = parseOk(R"(
chaos:
  time_scale: 60
  allow_full_outage: true
  faults:
    - {name: p, action: kill, target: {role: worker}, schedule: {poisson: {expected_per_run: 6}},
       restart_after: {fixed_s: 0}}
)");
  const double horizon = 300;
  const int runs = 2000;
  double sum = 0;
  for (int seed = 0; seed < runs; ++seed) sum += double(drawOk(spec, uint64_t(seed), horizon).faults.size());
  EXPECT_NEAR(sum / runs, 6.0, 4 * std::sqrt(6.0 / runs));
  const Plan p = drawOk(spec, 1, horizon);
  ASSERT_EQ(p.rates.size(), 1u);
  EXPECT_EQ(p.rates[0].schedule, "poisson");
  EXPECT_EQ(p.rates[0].targets, 4);
  EXPECT_NEAR(p.rates[0].expected_per_run, 6.0, 1e-9);
  EXPECT_NEAR(p.rates[0].mtbf_s, horizon / 6, 1e-9);
  // 6 per 300 s over 4 nodes at 60 cloud seconds per run second: 6 / 4 / (300 * 60 / 3600) per node-hour.
  EXPECT_NEAR(p.rates[0].rate_per_hour, 6.0 / 4 / (300.0 * 60 / 3600), 1e-9);
  // And the other way round: 0.6 per node-hour at time_scale 60 over 4 nodes and 300 s expects 12.
  const Plan q = drawOk(parseOk(R"(
chaos:
  time_scale: 60
  allow_full_outage: true
  faults:
    - {name: r, action: kill, target: {role: worker}, schedule: {poisson: {rate_per_node_hour: 0.6}}}
)"), 1, horizon);
  ASSERT_EQ(q.rates.size(), 1u);
  EXPECT_NEAR(q.rates[0].expected_per_run, 12.0, 1e-9);
  EXPECT_NE(formatPlanTable(q).find("12.000 expected per run, one per 25.0 s of the run"), std::string::npos)
      << formatPlanTable(q);
}

TEST(ChaosSchedule, PoissonCountsWithinFourSigma) {
  // Kill with instant replacement keeps the arrival process a pure Poisson process per node.
  ChaosSpec spec = parseOk(R"(
chaos:
  time_scale: 60
  allow_full_outage: true
  faults:
    - {name: p, action: kill, target: {role: worker}, schedule: {poisson: {rate_per_node_hour: 0.6}},
       restart_after: {fixed_s: 0}}
)");
  const double horizon = 300;
  const double lambda = 4 * 0.6 / 3600 * 60 * horizon;  // 4 nodes: expected arrivals per run = 12
  const int runs = 2000;
  double sum = 0, sq = 0;
  for (int seed = 0; seed < runs; ++seed) {
    Plan p = drawOk(spec, static_cast<uint64_t>(seed), horizon);
    const double n = static_cast<double>(p.faults.size());
    sum += n;
    sq += n * n;
  }
  const double mean = sum / runs, var = sq / runs - mean * mean;
  EXPECT_NEAR(mean, lambda, 4 * std::sqrt(lambda / runs));
  // Poisson: variance equals the mean; the sample variance's sd is about sqrt((2*l^2 + l) / runs).
  EXPECT_NEAR(var, lambda, 4 * std::sqrt((2 * lambda * lambda + lambda) / runs));
}

TEST(ChaosSchedule, PoissonPreemptWaitsForReplacement) {
  ChaosSpec spec = parseOk(R"(
chaos:
  time_scale: 60
  faults:
    - {name: p, action: preempt, profile: gcp, target: {role: worker, index: 0},
       schedule: {poisson: {rate_per_node_hour: 30}}, restart_after: {fixed_s: 600}}
)");
  Plan p = drawOk(spec, 1, 600);
  ASSERT_GE(p.faults.size(), 2u);
  for (size_t i = 1; i < p.faults.size(); ++i)  // each next notice comes after the previous replacement
    EXPECT_GE(p.faults[i].at_s, p.faults[i - 1].at_s + 0.5 + 10.0 - 1e-9);
}

TEST(ChaosSchedule, WavesHitAFractionAtOnce) {
  ChaosSpec spec = parseOk(R"(
chaos:
  faults:
    - {name: w, action: pause, target: {role: worker}, duration_s: 5,
       schedule: {wave: {fraction: 0.5, at_s: [10, 40, 70]}}}
)");
  Plan p = drawOk(spec, 3, 100);
  ASSERT_EQ(p.faults.size(), 3u);
  for (const Fault& f : p.faults) {
    EXPECT_EQ(f.targets.size(), 2u);
    EXPECT_EQ(std::set<std::string>(f.targets.begin(), f.targets.end()).size(), 2u);
  }
  EXPECT_DOUBLE_EQ(p.faults[0].at_s, 10);
  EXPECT_DOUBLE_EQ(p.faults[2].at_s, 70);
}

TEST(ChaosSchedule, WavesAtARate) {
  ChaosSpec spec = parseOk(R"(
chaos:
  time_scale: 3600
  allow_full_outage: true
  faults:
    - {name: w, action: kill, target: {role: worker}, restart_after: {fixed_s: 3600},
       schedule: {wave: {count: 2, rate_per_hour: 1}}}
)");
  // One wave per cloud hour at 3600x: one per run second on average.
  double total = 0;
  for (int seed = 0; seed < 200; ++seed) total += static_cast<double>(drawOk(spec, seed, 100).faults.size());
  EXPECT_NEAR(total / 200, 100, 4 * std::sqrt(100.0 / 200));
}

TEST(ChaosSchedule, EventTraceIsReplayedExactly) {
  const std::string path = tempPath("chaos_events.csv");
  {
    std::ofstream out(path);
    out << "time_s,node,fault,duration_s\n# a comment\n5,worker-1,kill\n7.25,worker-2,pause,3\n9,worker-0,slow,2\n";
  }
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: t, profile: aws, params: {cpu_fraction: 0.5}, "
                           "schedule: {trace: {path: " + path + "}}}\n");
  Plan p = drawOk(spec, 1, 100);
  ASSERT_EQ(p.faults.size(), 3u);
  EXPECT_EQ(p.faults[0].kind, FaultKind::kKill);
  EXPECT_EQ(p.faults[0].targets, std::vector<std::string>{"worker-1"});
  EXPECT_DOUBLE_EQ(p.faults[0].at_s, 5);
  EXPECT_EQ(p.faults[1].kind, FaultKind::kPause);
  EXPECT_DOUBLE_EQ(p.faults[1].at_s, 7.25);
  EXPECT_DOUBLE_EQ(*p.faults[1].duration_s, 3);
  EXPECT_EQ(p.faults[2].kind, FaultKind::kSlow);
  EXPECT_DOUBLE_EQ(p.faults[2].params.cpu_fraction, 0.5);
}

TEST(ChaosSchedule, EventTraceWithUnknownNodeNamesTheLine) {
  const std::string path = tempPath("chaos_events_bad.csv");
  {
    std::ofstream out(path);
    out << "5,worker-1,kill\n6,worker-9,kill\n";
  }
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: t, schedule: {trace: {path: " + path + "}}}\n");
  Result<Plan> p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find(path + ":2: no node named 'worker-9'"), std::string::npos) << p.status().message();
}

TEST(ChaosSchedule, CapacityTraceMapsDropsToPreemptions) {
  const std::string path = "/work/shared/data/spot-traces/aws-g4dn-xlarge-us-east-1c-2020-11-20.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "spot trace not present: " << path;
  std::vector<NodeInfo> nodes = makeNodes({{"worker", 12}});
  ChaosSpec spec = parseOk("chaos:\n  time_scale: 600\n  allow_full_outage: true\n  faults:\n"
                           "    - {name: spot, action: kill, target: {role: worker}, schedule: {trace: {path: " +
                           path + ", format: capacity}}}\n");
  Result<std::vector<TraceRow>> rows = readTrace(path, TraceFormat::kCapacity, 1.0);
  ASSERT_TRUE(rows.isOk());
  // With 12 nodes and a fleet of 12, every unit drop after the first full fleet is one kill.
  int expected = 0, prev = -1, fleet = 0;
  for (const TraceRow& r : *rows) fleet = std::max(fleet, r.available);
  ASSERT_EQ(fleet, 12);
  double start = -1;
  for (const TraceRow& r : *rows) {
    if (start < 0 && r.available >= fleet) start = r.time_s;
    if (start < 0) continue;
    if (prev >= 0 && r.available < prev) expected += prev - r.available;
    prev = r.available;
  }
  Plan p = drawOk(spec, 9, 1e9, nodes);
  int killed = 0, replaced = 0;
  for (const Action& a : p.actions) {
    killed += a.type == ActionType::kApply;
    replaced += a.type == ActionType::kReplace;
  }
  EXPECT_EQ(killed, expected);
  EXPECT_GT(replaced, 0);
  EXPECT_LE(replaced, killed);
  // Correlated: at least one event takes several nodes at once.
  size_t most = 0;
  for (const Fault& f : p.faults) most = std::max(most, f.targets.size());
  EXPECT_GE(most, 2u);
}

TEST(ChaosSchedule, StragglerSlowdownsPerNode) {
  ChaosSpec spec = parseOk(R"(
chaos:
  faults:
    - {name: s, action: slow, target: {role: worker}, at_s: 1,
       params: {slowdown: {bimodal: {p_slow: 0.5, slow: 4}}}}
)");
  int slowed = 0, runs = 400;
  for (int seed = 0; seed < runs; ++seed) {
    Plan p = drawOk(spec, seed);
    for (const Fault& f : p.faults) {
      EXPECT_DOUBLE_EQ(f.params.cpu_fraction, 0.25);
      ++slowed;
    }
  }
  const double n = 4.0 * runs;  // Binomial(n, 0.5)
  EXPECT_NEAR(slowed, n / 2, 4 * std::sqrt(n / 4));
}

TEST(ChaosSchedule, RandomTargetsAreDrawnOnceAndSeeded) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: k, action: pause, target: {role: worker, count: 2}, "
                           "at_s: [1, 2], duration_s: 0.5}\n");
  Plan p = drawOk(spec, 11);
  ASSERT_EQ(p.faults.size(), 2u);
  EXPECT_EQ(p.faults[0].targets, p.faults[1].targets);
  EXPECT_EQ(p.faults[0].targets.size(), 2u);
}

TEST(ChaosSchedule, HorizonBoundsTheDrawing) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: k, action: pause, target: {role: worker, index: 0}, at_s: [1, 50, 500], duration_s: 100}\n");
  Plan p = drawOk(spec, 1, 100);
  EXPECT_EQ(p.faults.size(), 2u);
  for (const Action& a : p.actions) EXPECT_LT(a.at_s, 100);  // the revert at 150 is left to stop()
}

TEST(ChaosSchedule, BlastRadiusGuardRejectsFullOutage) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: all, action: kill, target: {role: worker}, at_s: 10}\n");
  Result<Plan> p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("spec.yaml:3:7: chaos.faults[0]: at t=10.000 s every node of role 'worker' (4 of 4)"),
            std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("allow_full_outage"), std::string::npos);
  spec.allow_full_outage = true;
  EXPECT_TRUE(drawPlan(spec, kNodes, 1, 100).isOk());
}

TEST(ChaosSchedule, BlastRadiusGuardSeesOverlapsAcrossFaults) {
  ChaosSpec spec = parseOk(R"(
chaos:
  faults:
    - {name: a, action: kill, target: {role: worker, index: [0, 1]}, at_s: 10, restart_after: {fixed_s: 10}}
    - {name: b, action: pause, target: {role: worker, index: [2, 3]}, at_s: 15, duration_s: 10}
)");
  Result<Plan> p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("at t=15.000 s"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("faults: a, b"), std::string::npos) << p.status().message();
  // Back before the pause: no outage.
  spec.faults[1].schedule.at_s = {20.0};
  EXPECT_TRUE(drawPlan(spec, kNodes, 1, 100).isOk());
}

TEST(ChaosSchedule, BlastRadiusGuardOnTriggers) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: t, action: kill, target: {role: ps}, when: {epoch: 1}}\n");
  Result<Plan> p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("every node of role 'ps'"), std::string::npos) << p.status().message();
}

TEST(ChaosSchedule, TriggeredFaultCarriesTrigger) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: t, action: pause, target: {role: worker, index: 1}, "
                           "when: {node: worker-2, step: 300, after_s: 1.5}, duration_s: 2}\n");
  Plan p = drawOk(spec, 1);
  ASSERT_EQ(p.actions.size(), 2u);
  ASSERT_TRUE(p.actions[0].trigger.has_value());
  EXPECT_EQ(p.actions[0].trigger->node, "worker-2");
  EXPECT_EQ(p.actions[0].trigger->value, 300);
  EXPECT_DOUBLE_EQ(p.actions[0].at_s, 1.5);
  EXPECT_DOUBLE_EQ(p.actions[1].at_s, 3.5);
}

TEST(ChaosSchedule, UnknownTargetsAreErrors) {
  ChaosSpec spec = parseOk("chaos:\n  faults:\n    - {name: k, action: kill, target: {role: worker, index: 7}, at_s: 1}\n");
  Result<Plan> p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("target.index: worker has no index 7"), std::string::npos) << p.status().message();
  spec = parseOk("chaos:\n  faults:\n    - {name: k, action: kill, target: {role: evaluator}, at_s: 1}\n");
  p = drawPlan(spec, kNodes, 1, 100);
  ASSERT_FALSE(p.isOk());
  EXPECT_NE(p.status().message().find("no nodes of role 'evaluator'"), std::string::npos);
}

}  // namespace
}  // namespace chaosbed::chaos
