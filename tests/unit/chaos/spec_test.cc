#include "chaos/model/spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "chaos/schedule/schedule.h"
#include "tests/unit/chaos/chaos_test_util.h"

namespace chaosbed::chaos {
namespace {

using testing::parseChaosYaml;
using testing::parseOk;

// Parses and returns the diagnostics text ("" when none).
std::string errorsOf(const std::string& yaml) {
  config::Diagnostics diags;
  parseChaosYaml(yaml, &diags);
  return diags.toString();
}

// traitsOf indexes the table by the enum's value, and names must round-trip.
TEST(FaultKinds, EveryKindHasItsOwnRowInEnumOrderAndANameThatParsesBack) {
  std::set<std::string> names;
  for (size_t i = 0; i < faultKinds().size(); ++i) {
    const FaultKindTraits& t = faultKinds()[i];
    EXPECT_EQ(static_cast<size_t>(t.kind), i) << t.name;
    EXPECT_TRUE(names.insert(t.name).second) << t.name << " named twice";
    EXPECT_EQ(parseFaultKind(t.name), t.kind);
    EXPECT_EQ(&traitsOf(t.kind), &t);
    EXPECT_FALSE(t.lasting && t.ends_node) << t.name << ": a kind that ends its nodes cannot be reverted";
    EXPECT_TRUE(!t.lasting || t.reverted_at_stop) << t.name << ": a lasting fault is undone when the run stops";
    EXPECT_TRUE(!t.ends_node || t.takes_node_down) << t.name;
  }
  EXPECT_EQ(parseFaultKind("explode"), std::nullopt);
}

// The spec accepts exactly the table's kinds, and a kind's params exactly its row's keys.
TEST(FaultKinds, TheSpecAcceptsEachKindByNameAndOnlyItsOwnParams) {
  for (const FaultKindTraits& t : faultKinds()) {
    const std::string target = t.between_groups ? "{between: [{role: worker, index: 0}, {role: worker, index: 1}]}"
                                                : "{role: worker, index: 0}";
    const std::string yaml = std::string("chaos:\n  faults:\n    - {name: f, action: ") + t.name + ", at_s: 1, target: " + target +
                             ", params: {not_a_param: 1}}\n";
    const std::string errors = errorsOf(yaml);
    EXPECT_EQ(errors.find("is not one of"), std::string::npos) << t.name << ": " << errors;
    if (t.params.empty())
      EXPECT_NE(errors.find("takes no params"), std::string::npos) << t.name << ": " << errors;
    else
      EXPECT_NE(errors.find("not_a_param"), std::string::npos) << t.name << ": " << errors;
  }
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: f, action: explode, at_s: 1, target: {role: worker, index: 0}}\n")
                .find("'explode' is not one of: kill, preempt, pause, slow, link, vanish, transport_error"),
            std::string::npos);
}

TEST(ChaosSpec, ExampleSpecParsesUnchanged) {
  const std::string path = "/work/shared/examples/spot-preemption.yaml";
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "example spec not present: " << path;
  config::Diagnostics diags;
  std::optional<YAML::Node> doc = config::loadYamlFile(path, &diags);
  ASSERT_TRUE(doc.has_value()) << diags.toString();
  config::ConfigNode root(*doc, path, &diags);
  ChaosSpec spec = parseChaosSpec(root.child("chaos"));
  ASSERT_TRUE(diags.empty()) << diags.toString();
  EXPECT_DOUBLE_EQ(spec.time_scale, 60);
  ASSERT_EQ(spec.faults.size(), 3u);
  EXPECT_EQ(spec.faults[0].kind, FaultKind::kPreempt);
  EXPECT_EQ(spec.faults[0].profile, "aws");
  EXPECT_EQ(spec.faults[0].schedule.kind, ScheduleSpec::Kind::kPoisson);
  EXPECT_DOUBLE_EQ(spec.faults[0].schedule.rate_per_node_hour, 0.6);
  EXPECT_EQ(spec.faults[0].restart.kind, RestartPolicy::Kind::kExponential);
  EXPECT_DOUBLE_EQ(spec.faults[0].restart.cloud_s, 120);
  EXPECT_EQ(spec.faults[1].kind, FaultKind::kSlow);
  EXPECT_EQ(spec.faults[1].groups[0].indices, std::vector<int>{3});
  EXPECT_DOUBLE_EQ(*spec.faults[1].duration_s, 30);
  EXPECT_DOUBLE_EQ(spec.faults[1].params.cpu_fraction, 0.25);
  EXPECT_TRUE(spec.faults[2].between);
  EXPECT_EQ(spec.faults[2].groups[1].role, "ps");
  EXPECT_DOUBLE_EQ(spec.faults[2].params.bandwidth_mbps, 100);
  EXPECT_DOUBLE_EQ(spec.faults[2].params.latency_ms, 5);
  // And it draws a plan for the example's cluster (4 workers, 1 ps, 300 s).
  Result<Plan> plan = drawPlan(spec, makeNodes({{"worker", 4}, {"ps", 1}}), 42, 300);
  EXPECT_TRUE(plan.isOk()) << plan.status().toString();
}

TEST(ChaosSpec, AbsentSectionHasNoFaults) {
  ChaosSpec spec = parseOk("seed: 1\n");
  EXPECT_TRUE(spec.faults.empty());
  EXPECT_DOUBLE_EQ(spec.time_scale, 1);
}

TEST(ChaosSpec, UnknownKeyWithDidYouMean) {
  const std::string e = errorsOf("chaos:\n  faults:\n    - name: a\n      acton: kill\n      target: {role: worker}\n      at_s: 1\n");
  EXPECT_NE(e.find("spec.yaml:4:7: chaos.faults[0].acton: unknown field (did you mean 'action'?)"), std::string::npos) << e;
  EXPECT_NE(e.find("spec.yaml:3:7: chaos.faults[0].action: missing required field"), std::string::npos) << e;
}

TEST(ChaosSpec, BadValuesAreLocated) {
  const std::string e = errorsOf(R"(chaos:
  time_scale: -1
  faults:
    - name: a
      action: explode
      target: {role: worker, fraction: 1.5}
      at_s: 1
)");
  EXPECT_NE(e.find("spec.yaml:2:15: chaos.time_scale:"), std::string::npos) << e;
  EXPECT_NE(e.find("spec.yaml:5:15: chaos.faults[0].action: 'explode' is not one of"), std::string::npos) << e;
  EXPECT_NE(e.find("chaos.faults[0].target.fraction:"), std::string::npos) << e;
}

TEST(ChaosSpec, KindSpecificRules) {
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: kill, target: {role: worker}, at_s: 1, duration_s: 3}\n")
                .find("chaos.faults[0].duration_s: a kill is instantaneous"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: preempt, target: {role: worker}, at_s: 1}\n")
                .find("needs profile"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: slow, target: {role: worker}, at_s: 1}\n")
                .find("needs exactly one of params.cpu_fraction, params.slowdown"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: link, target: {role: worker}, at_s: 1, params: {partition: true}}\n")
                .find("a link fault needs target: {between"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: pause, target: {role: worker}, at_s: 1, "
                     "restart_after: {fixed_s: 1}}\n")
                .find("restart_after applies to kill, preempt and vanish faults only"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: transport_error, target: {role: worker}, at_s: 1, "
                     "params: {error: break_peer}}\n")
                .find("break_peer needs target: {between"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: transport_error, target: {role: worker}, at_s: 1, "
                     "params: {error: drop, count: 2}}\n")
                .find("count does not apply"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: transport_error, target: {role: worker}, at_s: 1, "
                     "params: {error: explode}}\n")
                .find("'explode' is not one of: fail_send, fail_recv, drop, break_peer, abort_collective"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: kill, target: {role: worker}, "
                     "schedule: {poisson: {rate_per_node_hour: 1, expected_per_run: 2}}}\n")
                .find("needs exactly one of rate_per_node_hour"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: pause, target: {role: worker}}\n")
                .find("missing when to inject"),
            std::string::npos);
  EXPECT_NE(errorsOf("chaos:\n  faults:\n    - {name: a, action: pause, target: {role: worker}, at_s: 1}\n"
                     "    - {name: a, action: pause, target: {role: worker}, at_s: 2}\n")
                .find("chaos.faults[1].name: duplicate fault name 'a'"),
            std::string::npos);
}

TEST(ChaosSpec, TraceErrorsNameTheTraceFile) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "chaos_bad_trace.csv").lexically_normal().string();
  {
    std::ofstream out(path);
    out << "1,worker-0,kill\n2,worker-1,explode\n";
  }
  const std::string e = errorsOf("chaos:\n  faults:\n    - {name: t, schedule: {trace: {path: " + path + "}}}\n");
  EXPECT_NE(e.find(path + ":2: fault 'explode' is not one of kill, preempt, vanish, pause, slow"), std::string::npos) << e;
  EXPECT_NE(e.find("chaos.faults[0].schedule.trace.path"), std::string::npos) << e;
}

TEST(ChaosSpec, AllScheduleForms) {
  ChaosSpec spec = parseOk(R"(
chaos:
  time_scale: 30
  allow_full_outage: true
  pause_mode: signal
  faults:
    - {name: a, action: kill, target: {nodes: [worker-1, ps-0]}, at_s: [5, 10], restart_after: {fixed_s: 60}}
    - {name: b, action: pause, target: {role: worker, count: 2}, duration_s: 3, schedule: {wave: {fraction: 0.5, rate_per_hour: 2}}}
    - {name: c, action: preempt, profile: gcp, target: {role: worker}, when: {epoch: 2}}
    - {name: d, action: slow, target: {role: worker}, at_s: 1, params: {slowdown: {lognormal: {median: 2, sigma: 0.3}}}}
    - {name: e, action: link, target: {between: [{role: worker, index: [0, 1]}, {nodes: [ps-0]}]}, at_s: 2, params: {partition: true}}
    - {name: f, action: preempt, target: {role: worker}, schedule: {poisson: {rate_per_node_hour: 1}}, params: {grace_s: 0.5}, restart_after: never}
)");
  ASSERT_EQ(spec.faults.size(), 6u);
  EXPECT_EQ(spec.pause_mode, PauseMode::kSignal);
  EXPECT_EQ(spec.faults[0].groups[0].nodes, (std::vector<std::string>{"worker-1", "ps-0"}));
  EXPECT_EQ(spec.faults[0].schedule.at_s, (std::vector<double>{5, 10}));
  EXPECT_EQ(spec.faults[1].schedule.kind, ScheduleSpec::Kind::kWave);
  EXPECT_EQ(spec.faults[2].schedule.kind, ScheduleSpec::Kind::kTrigger);
  EXPECT_EQ(spec.faults[2].schedule.trigger.unit, ProgressTrigger::Unit::kEpoch);
  EXPECT_EQ(spec.faults[3].slowdown.kind, SlowdownSpec::Kind::kLognormal);
  EXPECT_TRUE(spec.faults[4].params.partition);
  EXPECT_TRUE(spec.faults[5].grace_given);
  EXPECT_EQ(spec.faults[5].restart.kind, RestartPolicy::Kind::kNever);
}

}  // namespace
}  // namespace chaosbed::chaos
