// A parameter-server worker that dies mid-push takes only its own request with it: the other workers'
// requests, whose transfers were under way at the same moment, are served, and every survivor keeps
// pushing. With wildcard receives the server's transport aborted every receive still moving data when a
// worker died (it cannot tell whose message a wildcard had matched), and a live worker then waited for a
// reply that never came, for the rest of the run (two of four workers, in 2 of 3 default-size runs).

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/testing/command.h"

namespace chaosbed {
namespace {

// Requests of 0.5 MB (32-2048-32-4 over two shards: 0.26 MB each): well above the eager threshold, so each is a rendezvous
// whose transfer spans several of the server's progress passes, as the default model's do.
constexpr char kSpec[] = R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: ps-worker-loss}
seed: 5
cluster: {workers: 4, servers: 2}
model: {kind: mlp, layers: [32, 2048, 32, 4]}
data: {dataset: synthetic, samples: 4096}
training: {batch_per_worker: 32, learning_rate: 0.01, target_accuracy: 0.999, time_limit_s: 6, eval_interval_s: 1,
           sustained_evals: 100}
strategies:
  - {name: parameter_server}
chaos:
  faults:
    - {name: kill-1, action: kill, target: {role: worker, index: 1}, at_s: 1, restart_after: {fixed_s: 1}}
    - {name: kill-3, action: kill, target: {role: worker, index: 3}, at_s: 2.5, restart_after: {fixed_s: 1}}
metrics:
  listen: 127.0.0.1:0
)";

TEST(PsWorkerLoss, EverySurvivorKeepsPushingAfterAnotherWorkerDiesMidPush) {
  const std::string dir = testing::makeTempDir("ps-worker-loss");
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/spec.yaml") << kSpec;
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + dir + "/r",
                        "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(std::chrono::seconds(120)));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();

  // Each survivor's compute seconds over time, from the stats the controller records about once a second.
  std::map<std::string, std::vector<std::pair<double, double>>> compute;
  std::istringstream csv(testing::readFile(dir + "/r/node_timeseries.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(csv, line));
  ASSERT_EQ(line.rfind("time_s,strategy,node,wall_s,compute_s,", 0), 0u) << line;
  while (std::getline(csv, line)) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, ',');) f.push_back(x);
    ASSERT_GE(f.size(), 5u) << line;
    if (f[2] == "worker-0" || f[2] == "worker-2") compute[f[2]].emplace_back(std::stod(f[0]), std::stod(f[4]));
  }
  for (const char* survivor : {"worker-0", "worker-2"}) {
    SCOPED_TRACE(survivor);
    const auto& series = compute[survivor];
    ASSERT_GE(series.size(), 5u) << "fewer than 5 records of the survivor's stats";
    // Every record after the first kill shows more compute than the one before: a worker waiting for a lost
    // request's reply computes nothing until the run ends.
    for (size_t i = 1; i < series.size(); ++i)
      if (series[i].first > 1.5) {
        EXPECT_GT(series[i].second, series[i - 1].second)
            << "no compute from " << series[i - 1].first << " s to " << series[i].first << " s";
      }
  }
}

}  // namespace
}  // namespace chaosbed
