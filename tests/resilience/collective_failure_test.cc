// Acceptance (#12, failure-driven membership): a mirrored collective that fails without any process exit (a
// member frozen for longer than the collective timeout, a partition between the members) ends in a new
// generation published by the controller, a recovery whose cause is the collective failure, and the target,
// under both `restart` and `elastic`. Before, the members waited for a generation that only an exit would
// have published, until the time limit.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct Case {
  const char* name;
  const char* on_failure;  // restart | elastic
  const char* fault;       // the chaos.faults entry
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // gtest's name for it, not its bytes

std::string specYaml(const Case& c) {
  std::ostringstream y;
  y << "apiVersion: chaosbed/v1alpha1\n"
       "kind: Experiment\n"
       "metadata: {name: collective-" << c.name << "}\n"
       "seed: 3\n"
       "cluster: {workers: 2, servers: 1, cpu_per_node: 0, transport: ucx, hosts: local}\n"
       "model: {kind: mlp, layers: [32, 32, 4]}\n"
       "data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}\n"
       // A learning rate low enough that an idle machine needs several seconds for the target: the fault at 0.2 s
       // always comes first.
       "training: {batch_per_worker: 32, learning_rate: 1.5e-5, momentum: 0.9, target_accuracy: 0.9,\n"
       "           time_limit_s: 120, eval_interval_s: 0.25, checkpoint_interval_s: 0.5,\n"
       "           collective_timeout_s: 1.5}\n"
       "strategies:\n"
       "  - {name: mirrored, on_failure: " << c.on_failure << "}\n"
       "chaos:\n"
       "  faults:\n"
       "    - " << c.fault << "\n"
       "metrics: {listen: 127.0.0.1:0}\n";
  return y.str();
}


class CollectiveFailure : public ::testing::TestWithParam<Case> {};

TEST_P(CollectiveFailure, EndsInANewGenerationARecoveryAndTheTarget) {
  if (!std::filesystem::exists(testing::chaosbedBinary())) GTEST_SKIP() << "no chaosbed binary";
  const Case& c = GetParam();
  const std::string dir = testing::makeTempDir(std::string("collective-") + c.name);
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/spec.yaml") << specYaml(c);
  const std::string out = dir + "/out";
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  auto code = run.wait(deadlineIn(200s));
  ASSERT_TRUE(code.has_value()) << "the run did not end in 200 s:\n" << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  EXPECT_TRUE(testing::processesMentioning(out).empty()) << "node processes outlived the run";

  const json summary = json::parse(testing::readFile(out + "/summary.json"), nullptr, false);
  ASSERT_TRUE(summary.is_object());
  const json& s = summary["strategies"]["mirrored"];
  SCOPED_TRACE(s.dump(2));
  EXPECT_EQ(s["stop_reason"], "target");
  EXPECT_EQ(s["chaos_leaks"].get<int64_t>(), 0);
  EXPECT_GE(s["faults_applied"].get<int>(), 1);  // a link fault is applied at both ends
  EXPECT_LE(s["accounting_residual"].get<double>(), 0.01) << s["accounting_residual_node"];

  std::vector<json> events;
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));
  std::istringstream lines(testing::readFile(out + "/events.jsonl"));
  for (std::string line; std::getline(lines, line);)
    if (json e = json::parse(line, nullptr, false); e.is_object()) events.push_back(std::move(e));
  double applied_t = -1;
  bool generation_after = false, failure_reported = false;
  for (const json& e : events) {
    const std::string type = e.value("type", "");
    EXPECT_NE(type, "node.exited") << "no process may die in this test: " << e.dump();
    if (type == "chaos.applied" && applied_t < 0) applied_t = e.value("t", 0.0);
    if (type == "failure_detected") failure_reported = true;
    if (type == "membership" && e["membership"].value("generation", 0) >= 1) {
      generation_after = true;
      EXPECT_EQ(e["membership"]["workers"], json::array({0, 1})) << "nobody is gone: the same members";
      EXPECT_EQ(e["membership"].value("rollback", false), std::string(c.on_failure) == "restart") << e.dump();
    }
  }
  ASSERT_GE(applied_t, 0) << "the fault was never applied";
  EXPECT_TRUE(failure_reported) << "no member saw the collective fail";
  EXPECT_TRUE(generation_after) << "the controller published no new generation";
  EXPECT_GT(s["tta_seconds"].get<double>(), applied_t) << "the target came after the fault";

  ASSERT_GE(s["recoveries"].get<int>(), 1);
  bool collective_cause = false;
  for (const json& r : s["recovery_episodes"]) {
    EXPECT_GT(r["seconds"].get<double>(), 0);
    collective_cause |= r["cause"].get<std::string>().find("collective failure") != std::string::npos;
  }
  EXPECT_TRUE(collective_cause) << "no recovery names the collective failure";
}

const Case kCases[] = {
    {"pause_restart", "restart",
     "{name: freeze, action: pause, target: {role: worker, index: 1}, at_s: 0.2, duration_s: 5}"},
    {"pause_elastic", "elastic",
     "{name: freeze, action: pause, target: {role: worker, index: 1}, at_s: 0.2, duration_s: 5}"},
    {"partition_restart", "restart",
     "{name: split, action: link, target: {between: [{role: worker, index: 0}, {role: worker, index: 1}]}, "
     "at_s: 0.2, duration_s: 30, params: {partition: true}}"},
    {"partition_elastic", "elastic",
     "{name: split, action: link, target: {between: [{role: worker, index: 0}, {role: worker, index: 1}]}, "
     "at_s: 0.2, duration_s: 30, params: {partition: true}}"},
};

INSTANTIATE_TEST_SUITE_P(Faults, CollectiveFailure, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace chaosbed
