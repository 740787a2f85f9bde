// End to end: `chaosbed run` of the tiny synthetic scenario, as a user runs it.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "chaosbed/config.h"
#include "core/data/dataset.h"
#include "experiments/run/results.h"
#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string scenario(const std::string& name) {
  return std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/" + name;
}

using testing::readFile;

// A spec written to a file and run by `chaosbed run`, as a user runs it; what it wrote, read back.
struct SpecRun {
  std::string dir;  // the results directory
  nlohmann::json summary;
  std::map<std::string, std::vector<nlohmann::json>> events;  // by strategy
  // The first event of `type` about `node` in `strategy`'s run; null when there is none.
  nlohmann::json find(const std::string& strategy, const std::string& type, const std::string& node) const {
    auto it = events.find(strategy);
    if (it != events.end())
      for (const auto& e : it->second)
        if (e.value("type", "") == type && e.value("node", "") == node) return e;
    return nullptr;
  }
};

// Fails the calling test (use ASSERT_NO_FATAL_FAILURE) unless the run exits 0 within `limit`.
void runSpec(const std::string& tag, const std::string& yaml, SpecRun* out,
             std::chrono::seconds limit = std::chrono::seconds(180)) {
  const std::string dir = testing::makeTempDir(tag);
  ASSERT_FALSE(dir.empty());
  const std::string spec = dir + ".yaml";
  std::ofstream(spec) << yaml;
  testing::Command run({testing::chaosbedBinary(), "run", spec, "--out=" + dir + "/r", "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(limit));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  out->dir = dir + "/r";
  out->summary = nlohmann::json::parse(readFile(dir + "/r/summary.json"));
  EXPECT_TRUE(testing::EventsMatchSchema(dir + "/r/events.jsonl"));
  std::istringstream lines(readFile(dir + "/r/events.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object()) out->events[e.value("strategy", "")].push_back(e);
  }
}

TEST(RunExperiment, TinySyntheticProducesEveryResultFile) {
  const std::string out = testing::makeTempDir("run");
  ASSERT_FALSE(out.empty());
  testing::Command run({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"), "--out=" + out,
                        "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(180s));
  ASSERT_TRUE(code.has_value()) << "run did not finish in 180 s:\n" << run.output();
  ASSERT_EQ(*code, 0) << run.output();

  for (const char* f : {"spec.yaml", "events.jsonl", "timeseries.csv", "summary.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f << " missing in " << out;

  auto summary = nlohmann::json::parse(readFile(out + "/summary.json"));
  EXPECT_TRUE(summary["complete"].get<bool>());
  EXPECT_EQ(summary.value("summary_version", 0), run::kSummaryVersion);
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    ASSERT_TRUE(summary["strategies"].contains(label)) << summary.dump(2);
    const auto& s = summary["strategies"][label];
    ASSERT_FALSE(s["tta_seconds"].is_null()) << s.dump(2);
    EXPECT_GT(s["tta_seconds"].get<double>(), 0);
    EXPECT_GE(s["final_accuracy"].get<double>(), 0.8);
    EXPECT_GT(s["steps"].get<int64_t>(), 0);
    EXPECT_GT(s["goodput_samples_per_s"].get<double>(), 0);
    for (const char* reason : {"peer", "server", "recovery"}) EXPECT_TRUE(s["idle_seconds"].contains(reason));
    EXPECT_GE(s["idle_fraction"].get<double>(), 0);
    EXPECT_LE(s["idle_fraction"].get<double>(), 1);
    EXPECT_TRUE(s["recoveries"].is_number_integer());
  }
  const std::string series = readFile(out + "/timeseries.csv");
  EXPECT_EQ(series.rfind("time_s,strategy,accuracy,loss,samples,alive_nodes\n", 0), 0u);
  EXPECT_NE(series.find(",mirrored,"), std::string::npos);
  EXPECT_NE(series.find(",parameter_server,"), std::string::npos);
  {
    // One clock per row: samples are those at the row's time_s, so in time order they never fall (they did
    // when taken at the event's processing: a refined evaluation of an earlier snapshot, handled later,
    // carried more samples than the rows after it in time).
    std::map<std::string, std::vector<std::pair<double, long long>>> rows;
    std::istringstream lines(series.substr(series.find('\n') + 1));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream cells(line);
      std::string time, strategy, accuracy, loss, samples;
      std::getline(cells, time, ',');
      std::getline(cells, strategy, ',');
      std::getline(cells, accuracy, ',');
      std::getline(cells, loss, ',');
      std::getline(cells, samples, ',');
      rows[strategy].emplace_back(std::stod(time), std::stoll(samples));
    }
    for (auto& [strategy, points] : rows) {
      std::sort(points.begin(), points.end());
      for (size_t i = 1; i < points.size(); ++i)
        EXPECT_GE(points[i].second, points[i - 1].second)
            << strategy << ": samples fell from " << points[i - 1].first << " s to " << points[i].first << " s";
    }
  }
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));
  const std::string events = readFile(out + "/events.jsonl");
  EXPECT_NE(events.find("\"chaos.planned\""), std::string::npos) << "the scenario's pause was not planned";
  // The pause is planned at 0.05 s: a strategy that trained past it must have met it.
  bool ran_past_fault = false;
  for (const auto& [label, s] : summary["strategies"].items()) ran_past_fault |= s["wall_seconds"].get<double>() > 0.5;
  if (ran_past_fault) {
    EXPECT_NE(events.find("\"chaos.applied\""), std::string::npos) << "the pause was not applied";
  }
  EXPECT_NE(events.find("\"eval\""), std::string::npos);
  EXPECT_TRUE(testing::processesMentioning(out).empty()) << "node processes outlived the run";

  // The run stopped at the target sustained over 3 evaluations (the default): tta_sustained_seconds is the
  // first of 3 consecutive evaluations at or above 0.8, and tta_seconds the first one at all.
  for (const auto& [label, s] : summary["strategies"].items()) {
    SCOPED_TRACE(label);
    ASSERT_FALSE(s["tta_sustained_seconds"].is_null()) << s.dump(2);
    const double first = s["tta_seconds"].get<double>(), sustained = s["tta_sustained_seconds"].get<double>();
    EXPECT_GE(sustained, first);
    std::vector<std::pair<double, double>> evals;  // (snapshot_t, accuracy) of this strategy
    std::istringstream lines(events);
    for (std::string line; std::getline(lines, line);) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_object() && e.value("type", "") == "eval" && e.value("strategy", "") == label)
        evals.emplace_back(e["snapshot_t"].get<double>(), e["accuracy"].get<double>());
    }
    std::sort(evals.begin(), evals.end());
    size_t at = 0;
    while (at < evals.size() && evals[at].first != sustained) ++at;
    ASSERT_LE(at + 3, evals.size()) << "no 3 evaluations from " << sustained;
    for (size_t i = at; i < at + 3; ++i) EXPECT_GE(evals[i].second, 0.8) << "evaluation at " << evals[i].first;
    // The resolution is the distance to the evaluation before the streak (or to the start of training).
    const double before = at > 0 ? evals[at - 1].first : 0.0;
    EXPECT_NEAR(s["tta_resolution_s"].get<double>(), sustained - before, 1e-9);
    if (at > 0) {
      EXPECT_LT(evals[at - 1].second, 0.8) << "the streak began earlier";
    }
    auto crossing = std::find_if(evals.begin(), evals.end(), [](const auto& e) { return e.second >= 0.8; });
    ASSERT_NE(crossing, evals.end());
    EXPECT_EQ(crossing->first, first);
  }

  // A second run into the same directory is refused (usage, exit 2) and leaves the first one's files alone.
  std::map<std::string, std::string> before;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) before[e.path().string()] = readFile(e.path().string());
  testing::Command again({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"), "--out=" + out,
                          "--metrics_addr=127.0.0.1:0"});
  auto again_code = again.wait(deadlineIn(30s));
  ASSERT_TRUE(again_code.has_value()) << again.output();
  EXPECT_EQ(*again_code, 2) << again.output();
  EXPECT_NE(again.output().find("not empty"), std::string::npos) << again.output();
  std::map<std::string, std::string> after;
  for (const auto& e : fs::recursive_directory_iterator(out))
    if (e.is_regular_file()) after[e.path().string()] = readFile(e.path().string());
  EXPECT_TRUE(before == after) << "the refused run changed the first run's files";
}

// An empty --out of another user is refused: it would stay theirs, and they could replace the results; so is
// an output.dir base they own.
TEST(RunExperiment, AResultsDirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string out = testing::makeTempDir("run-foreign-out") + "/theirs";
  ASSERT_EQ(::mkdir(out.c_str(), 0777), 0);
  ASSERT_EQ(::chown(out.c_str(), 65534, 65534), 0);  // nobody
  testing::Command run({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"), "--out=" + out,
                        "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(30s));
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 2) << run.output();
  EXPECT_NE(run.output().find("owned by uid 65534"), std::string::npos) << run.output();
  EXPECT_TRUE(fs::is_empty(out)) << "the refused run wrote into it";

  // The same for output.dir (relative to where chaosbed runs): a base of another user gets nothing made in it.
  const std::string base = "foreign-results-" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
  ASSERT_EQ(::chown(base.c_str(), 65534, 65534), 0);
  testing::Command into_base({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"),
                              "--set=output.dir=" + base, "--metrics_addr=127.0.0.1:0"});
  auto base_code = into_base.wait(deadlineIn(30s));
  const bool untouched = fs::is_empty(base);
  fs::remove_all(base);
  ASSERT_TRUE(base_code.has_value()) << into_base.output();
  EXPECT_NE(*base_code, 0) << into_base.output();
  EXPECT_NE(into_base.output().find("owned by another user"), std::string::npos) << into_base.output();
  EXPECT_TRUE(untouched) << "the refused run made its directories in another user's";
}

// `run --set` changes the spec before it is checked and run: the results say what ran.
TEST(RunExperiment, SetOverridesSpecFields) {
  const std::string out = testing::makeTempDir("run-set");
  ASSERT_FALSE(out.empty());
  testing::Command run({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"), "--out=" + out,
                        "--metrics_addr=127.0.0.1:0", "--set", "cluster.workers=3", "--set",
                        "strategies=[{name: mirrored}]"});
  auto code = run.wait(deadlineIn(180s));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  auto summary = nlohmann::json::parse(readFile(out + "/summary.json"));
  EXPECT_EQ(summary["strategies"].size(), 1u) << summary["strategies"].dump(2);
  EXPECT_TRUE(summary["strategies"].contains("mirrored"));
  // Three workers, each alive for the strategy's whole run: three times its wall time in worker-seconds.
  const auto& m = summary["strategies"]["mirrored"];
  const double wall = m["wall_seconds"].get<double>();
  EXPECT_NEAR(m["node_seconds"]["workers"]["wall"].get<double>(), 3 * wall, 0.5 * wall) << m.dump(2);
  EXPECT_NE(readFile(out + "/spec.yaml").find("workers: 3"), std::string::npos);
}

// training.eval_interval_steps: snapshots every N mini-batch gradients (a synchronous step of 2 workers is 2
// of them; a parameter-server push is 1), evaluated once per eval_interval_s, and every one of them around
// the crossing of the target: the TTA is resolved to about N gradients, far finer than the pace.
TEST(RunExperiment, ATtaByStepsIsResolvedToTheSnapshotIntervalNotTheEvaluationPace) {
  constexpr int64_t kEvery = 200;
  constexpr double kPaceS = 2;
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-eval-steps", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: eval-steps}
seed: 7
cluster: {workers: 2, servers: 1, cpu_per_node: 0}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.8, time_limit_s: 20,
           eval_interval_steps: 200, eval_interval_s: 2, sustained_evals: 2}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
metrics: {listen: 127.0.0.1:0}
)",
                                  &r));
  for (const std::string label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = r.summary["strategies"][label];
    ASSERT_FALSE(s["tta_steps"].is_null()) << s.dump(2);
    // Snapshots go at the first step boundary at or after each multiple of N that finds the last one sent.
    const int64_t resolution = s["tta_resolution_steps"].get<int64_t>();
    EXPECT_GT(resolution, 0);
    EXPECT_LE(resolution, 2 * kEvery) << s.dump(2);
    EXPECT_GT(s["tta_resolution_s"].get<double>(), 0);
    EXPECT_LT(s["tta_resolution_s"].get<double>(), kPaceS / 2) << "resolved no finer than the evaluations' pace";
    EXPECT_NEAR(s["tta_resolution_steps_fraction"].get<double>(), double(resolution) / s["tta_steps"].get<double>(), 1e-12);
    // Paced evaluations come about eval_interval_s of snapshot time apart; refined ones only just before one.
    std::vector<double> paced;
    for (const auto& e : r.events[label])
      if (e.value("type", "") == "eval" && !e.value("refined", false)) paced.push_back(e["snapshot_t"].get<double>());
    ASSERT_GE(paced.size(), 2u);
    for (size_t i = 1; i + 1 < paced.size(); ++i) EXPECT_GE(paced[i] - paced[i - 1], kPaceS) << i;
  }
}

// By steps, a shard restored from its checkpoint counts fewer updates than the other shard, so their
// snapshot ticks never line up again: the evaluator must still assemble the model (by range, not by tick)
// and go on evaluating after the restart. (It stopped at the kill: accuracy frozen, no TTA.)
TEST(RunExperiment, AParameterServerIsStillEvaluatedByStepsAfterAShardRestart) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-ps-restart-steps", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: ps-restart-steps}
seed: 5
cluster: {workers: 2, servers: 2, cpu_per_node: 0}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.00001, momentum: 0, target_accuracy: 0.99, time_limit_s: 7,
           eval_interval_steps: 50, eval_interval_s: 0.25, checkpoint_interval_s: 0.5}  # never reached
strategies:
  - {name: parameter_server, on_server_failure: shard_restart}
chaos:
  faults:
    - {name: kill-ps-0, action: kill, target: {role: ps, index: 0}, at_s: 1.5, restart_after: {fixed_s: 0.5}}
metrics: {listen: 127.0.0.1:0}
)",
                                  &r));
  const auto& events = r.events["parameter_server"];
  double restarted = -1;
  for (const auto& e : events)
    if (e.value("type", "") == "node.restarted") restarted = e.value("t", -1.0);
  int after = 0;
  double last = 0;
  for (const auto& e : events)
    if (e.value("type", "") == "eval") {
      last = std::max(last, e["snapshot_t"].get<double>());
      after += e["snapshot_t"].get<double>() > 4.0;
    }
  EXPECT_GE(after, 4) << "evaluations stopped after the shard restart (last snapshot at " << last << " s; restart at "
                      << restarted << " s)";
}

// A pause of known length: the paused worker books it once, as paused; its peer books it as peer idle; and
// each process's categories add up to its wall time (accounting_residual).
TEST(RunExperiment, APauseOfKnownLengthIsBookedOnceAsPausedAndAsPeerIdle) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-pause", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: pause-accounting}
seed: 3
cluster: {workers: 2, servers: 1, cpu_per_node: 0, transport: ucx, hosts: local}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training:
  batch_per_worker: 32
  learning_rate: 0.1
  momentum: 0.9
  target_accuracy: 0.999   # never reached: the run lasts its time limit
  time_limit_s: 9          # 5 s after the pause: room for the pace to come back
  eval_interval_s: 0.5
  checkpoint_interval_s: 10
strategies:
  - {name: mirrored, on_failure: restart}
  - {name: parameter_server}
chaos:
  faults:
    - {name: pause-1, action: pause, target: {role: worker, index: 1}, at_s: 2.0, duration_s: 2}
)", &r, std::chrono::seconds(180)));
  const nlohmann::json& summary = r.summary;
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = summary["strategies"][label];
    EXPECT_NEAR(s["paused_seconds"].get<double>(), 2.0, 0.2) << s.dump(2);
    EXPECT_LE(s["accounting_residual"].get<double>(), 0.01) << s["accounting_residual_node"] << "\n" << s.dump(2);
    // The pause is a fault episode, from its start until the workers' pace is back to 90%. Mirrored stops for
    // the whole pause: its episode lasts at least that (less the 0.5 s sampling), or never ends within the run
    // (seconds: null; on this 2-core machine mirrored's pace after the pause is sometimes only ~80% of the
    // pace before it). The PS goes on with the other worker, so its episode has no lower bound, and no upper
    // one either: this tiny model's PS is latency-bound (four polling processes on two cores), and its pace
    // moves by a quarter with where the scheduler puts them, fault or none (six fault-free runs: the pace of
    // 4-9 s ran 0.75x to 1.10x that of 0.5-2 s; paused runs 0.68x to 1.54x), so its episode ends anywhere
    // from 0 s to never. An episode that ends does so at or after its start.
    ASSERT_EQ(s["fault_episodes"].size(), 1u) << s.dump(2);
    const auto& e = s["fault_episodes"][0];
    EXPECT_EQ(e["fault"], "pause-1");
    EXPECT_EQ(e["kind"], "pause");
    EXPECT_NEAR(e["start_s"].get<double>(), 2.0, 0.2) << e.dump();
    ASSERT_FALSE(e["pre_fault_steps_per_s"].is_null()) << e.dump();
    if (std::string(label) == "mirrored") {
      if (!e["seconds"].is_null()) {
        EXPECT_GE(e["seconds"].get<double>(), 2.0 - 0.5) << e.dump();
      }
    } else if (!e["seconds"].is_null()) {
      EXPECT_GE(e["seconds"].get<double>(), 0) << e.dump();
    }
  }
  // Mirrored's other worker waits out the pause at the next all-reduce (plus its usual waits: at least 90%
  // of the pause; any double booking would show in the residual).
  const auto& m = summary["strategies"]["mirrored"];
  EXPECT_GE(m["node_seconds"]["workers"]["peer"].get<double>(), 1.8) << m.dump(2);
}

// A vanished worker (frozen: nothing is closed, so no peer sees an error) is noticed only by the failure
// detector: it is declared lost timeout_s after it went silent (the delay lies in [timeout - heartbeat,
// timeout + heartbeat]), fenced, and only then replaced (restart_after counts from the vanish, but no
// replacement starts before the detection). Recovery starts at the detection, not at the vanish.
TEST(RunExperiment, AVanishedWorkerIsDeclaredLostAfterTheDetectionTimeout) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-vanish", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: vanish-detection}
seed: 4
cluster:
  workers: 3
  servers: 1
  failure_detection: {heartbeat_s: 0.5, timeout_s: 5}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
# sustained_evals above the run's 22 evaluations: the run lasts its time limit, whatever the accuracy.
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 11,
           eval_interval_s: 0.5, sustained_evals: 100, checkpoint_interval_s: 1}
strategies:
  - {name: mirrored, on_failure: elastic}
  - {name: parameter_server}
chaos:
  faults:
    - {name: gone, action: vanish, target: {role: worker, index: 2}, at_s: 2.0, restart_after: {fixed_s: 1}}
)", &r, std::chrono::seconds(180)));
  const nlohmann::json& summary = r.summary;
  std::map<std::string, std::map<std::string, double>> first;  // strategy -> event type -> first t for worker-2
  for (const auto& [strategy, events] : r.events)
    for (const auto& e : events)
      if (e.value("node", "") == "worker-2" && e.contains("t"))
        first[strategy].try_emplace(e.value("type", ""), e["t"].get<double>());
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = summary["strategies"][label];
    ASSERT_EQ(s["fault_episodes"].size(), 1u) << s.dump(2);
    const auto& e = s["fault_episodes"][0];
    EXPECT_EQ(e["kind"], "vanish");
    ASSERT_FALSE(e["detection_s"].is_null()) << e.dump();
    EXPECT_NEAR(e["detection_s"].get<double>(), 5.0, 1.0) << e.dump();
    auto& ev = first[label];
    ASSERT_TRUE(ev.count("node.lost")) << "worker-2 was never declared lost";
    ASSERT_TRUE(ev.count("node.exited")) << "worker-2 was never fenced";
    ASSERT_TRUE(ev.count("node.restarted")) << "worker-2 was never replaced";
    EXPECT_GE(ev["node.exited"], ev["node.lost"]);
    EXPECT_GE(ev["node.restarted"], ev["node.lost"]) << "replaced before its loss was detected";
    EXPECT_GE(s["failures"].get<int>(), 1) << s.dump(2);
    EXPECT_LE(s["accounting_residual"].get<double>(), 0.01) << s["accounting_residual_node"];
  }
  // Mirrored's two survivors wait in their all-reduce until the fence makes it fail (the collective timeout,
  // 60 s, never fires): a failed collective is booked as recovery, so each books about the detection delay.
  const auto& m = summary["strategies"]["mirrored"];
  EXPECT_GE(m["node_seconds"]["workers"]["recovery"].get<double>(), 2 * 4.0) << m.dump(2);
  EXPECT_GE(m["recoveries"].get<int>(), 1) << m.dump(2);
}

// Preemption notices for parameter-server roles (checkpoint_on_notice): a preempted server saves its shard
// at the notice, so its replacement restores that and loses only the grace period's updates; without the
// option the server dies at the notice and its replacement (no checkpoint yet: the interval is longer than
// the run) loses every update, counted as rolled-back samples. A preempted worker leaves after its step,
// with status 0.
TEST(RunExperiment, ParameterServerRolesActOnAPreemptionNotice) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-ps-notice", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: ps-notice}
seed: 6
cluster: {workers: 2, servers: 1}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 6,
           eval_interval_s: 0.5, sustained_evals: 100, checkpoint_interval_s: 100}
strategies:
  - {name: parameter_server, label: notice, checkpoint_on_notice: true}
  - {name: parameter_server, label: plain}
chaos:
  allow_full_outage: true   # the only server
  faults:
    - {name: server-notice, action: preempt, target: {nodes: [ps-0]}, at_s: 2, params: {grace_s: 0.5},
       restart_after: {fixed_s: 0.5}}
    - {name: worker-notice, action: preempt, target: {nodes: [worker-1]}, at_s: 3, params: {grace_s: 1},
       restart_after: {fixed_s: 0.5}}
)", &r, std::chrono::seconds(180)));
  auto find = [&](const std::string& label, const std::string& type, const std::string& node) {
    return r.find(label, type, node);
  };
  // With the option: the server saved at the notice and its replacement restored exactly that version.
  const auto saved = find("notice", "notice_checkpoint", "ps-0");
  ASSERT_TRUE(saved.is_object()) << "ps-0 did not checkpoint on the notice";
  EXPECT_TRUE(saved["saved"].get<bool>()) << saved.dump();
  EXPECT_GT(saved["version"].get<int64_t>(), 0) << saved.dump();
  const auto restored = find("notice", "restored", "ps-0");
  ASSERT_TRUE(restored.is_object()) << "ps-0's replacement restored nothing";
  EXPECT_EQ(restored["version"], saved["version"]);
  const auto left = find("notice", "left_on_notice", "worker-1");
  ASSERT_TRUE(left.is_object()) << "worker-1 did not leave on its notice";
  const auto exited = find("notice", "node.exited", "worker-1");
  ASSERT_TRUE(exited.is_object());
  EXPECT_EQ(exited["how"], "exited with code 0") << exited.dump();
  // Its SIGKILL after the grace finds nothing to kill: skipped, not a failed fault.
  const auto escalation = find("notice", "chaos.skipped", "worker-1");
  ASSERT_TRUE(escalation.is_object()) << "the escalation on a node that left is not logged as skipped";
  EXPECT_EQ(escalation["action"], "escalate") << escalation.dump();
  for (const char* label : {"notice", "plain"}) EXPECT_FALSE(find(label, "chaos.failed", "worker-1").is_object()) << label;
  // Without it: nothing saved, nothing restored, every update of the first incarnation lost.
  EXPECT_FALSE(find("plain", "notice_checkpoint", "ps-0").is_object());
  EXPECT_FALSE(find("plain", "restored", "ps-0").is_object());
  const nlohmann::json& summary = r.summary;
  const auto& with = summary["strategies"]["notice"];
  const auto& without = summary["strategies"]["plain"];
  EXPECT_GT(without["samples_lost"].get<int64_t>(), 0) << without.dump(2);
  EXPECT_LT(with["samples_lost"].get<int64_t>(), without["samples_lost"].get<int64_t>()) << with.dump(2);
  EXPECT_GT(with["checkpoints_written"].get<int64_t>(), 0);
  for (const auto* s : {&with, &without}) EXPECT_LE((*s)["accounting_residual"].get<double>(), 0.01);
}

// Elastic mirrored after a total loss: both workers are preempted at once and come back. The generation
// that follows has no member holding a state. With checkpoints on notice it resumes from the notice's
// checkpoint (never from the seed in silence); without any checkpoint it starts from scratch, says so, and
// books what the lost workers had trained as samples lost.
TEST(RunExperiment, ElasticMirroredResumesFromTheNewestCheckpointAfterATotalLoss) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-total-loss", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: total-loss}
seed: 4
cluster: {workers: 2, servers: 1}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 6,
           eval_interval_s: 0.5, sustained_evals: 100, checkpoint_interval_s: 100}
strategies:
  - {name: mirrored, on_failure: elastic, label: notice, checkpoint_on_notice: true}
  - {name: mirrored, on_failure: elastic, label: plain}
chaos:
  allow_full_outage: true   # every worker at once
  faults:
    - {name: all-preempted, action: preempt, target: {nodes: [worker-0, worker-1]}, at_s: 2, params: {grace_s: 0.5},
       restart_after: {fixed_s: 0.5}}
)", &r, std::chrono::seconds(180)));
  auto events = [&](const std::string& label, const std::string& type) {
    std::vector<nlohmann::json> out;
    for (const auto& e : r.events[label])
      if (e.value("type", "") == type) out.push_back(e);
    return out;
  };
  const auto restored = events("notice", "restored_after_total_loss");
  ASSERT_EQ(restored.size(), 1u) << "the generation after the loss did not resume from the notice's checkpoint";
  EXPECT_GT(restored[0]["step"].get<int64_t>(), 0) << restored[0].dump();
  EXPECT_TRUE(events("notice", "restart_from_scratch").empty());
  const auto scratch = events("plain", "restart_from_scratch");
  ASSERT_EQ(scratch.size(), 1u) << "no checkpoint existed: the restart from the seed must be said";
  const auto& plain = r.summary["strategies"]["plain"];
  EXPECT_GT(plain["samples_lost"].get<int64_t>(), 0) << plain.dump(2);
  EXPECT_LE(plain["samples_lost"].get<int64_t>(), plain["samples"].get<int64_t>()) << plain.dump(2);
}

// Fashion-MNIST is decoded once per run into a private raw copy that every node reads (the page cache holds
// it once for the machine): a node's memory is its own state, the workers never hold the test set, and the
// copy goes with the run.
TEST(RunExperiment, NodesShareOneCopyOfTheDatasetAndHoldOnlyTheirOwnState) {
  if (!fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/install-deps.sh installs it)";
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-shared-data", std::string(R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: shared-data}
seed: 3
cluster: {workers: 8, servers: 1, cpu_per_node: 0.2}
model: {kind: mlp, layers: [784, 256, 128, 10]}
data: {dataset: fashion-mnist, path: )") + data::kFashionMnistDir + R"(}
training: {batch_per_worker: 32, learning_rate: 0.05, momentum: 0.9, target_accuracy: 0.99, time_limit_s: 5,
           eval_interval_s: 1, sustained_evals: 100}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
)", &r, std::chrono::seconds(180)));
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = r.summary["strategies"][label];
    ASSERT_TRUE(s.contains("peak_rss_mb")) << s.dump(2);
    const double worker = s["peak_rss_mb"]["worker"].get<double>();
    // The training set alone is 47 MB as bytes (188 MB as floats, as every node held it before).
    EXPECT_GT(worker, 1.0);
    EXPECT_LE(worker, 40.0) << "a worker holds more than its own state";
    EXPECT_GT(s["steps"].get<int64_t>(), 0);
    EXPECT_GT(s["final_accuracy"].get<double>(), 0.3) << "trained on something else than Fashion-MNIST";
    const auto config = nlohmann::json::parse(readFile(r.dir + "/" + label + "/node-config.json"));
    const std::string copy = config["training"]["data_path"];
    EXPECT_NE(copy, data::kFashionMnistDir) << "nodes read the spec's gzip files, each decoding its own copy";
    EXPECT_FALSE(fs::exists(copy)) << copy << ": the run's copy of the dataset outlived the run";
  }
}

// cluster.simulate at the scale the shipped scenario names: 256 workers, 4 servers and the evaluator attach to
// one controller through the real control plane (and are really killed, paused and replaced), and the
// controller says what that cost it. Every node must be heard from, a killed worker's replacement too, and
// under mirrored elastic every member of the last generation must have seen it.
TEST(RunExperiment, TwoHundredSixtySimulatedNodesAttachToOneController) {
  if (!fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/install-deps.sh installs it)";
  const std::string out = testing::makeTempDir("run-simulated");
  ASSERT_FALSE(out.empty());
  testing::Command run({testing::chaosbedBinary(), "run", scenario("control-plane-256.yaml"), "--out=" + out,
                        "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(240s));
  ASSERT_TRUE(code.has_value()) << "run did not finish in 240 s:\n" << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  const auto summary = nlohmann::json::parse(readFile(out + "/summary.json"));
  EXPECT_TRUE(summary["simulated"].is_string()) << "a simulated run must say so: " << summary.dump();
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));
  std::map<std::string, std::vector<nlohmann::json>> events;
  std::istringstream lines(readFile(out + "/events.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object()) events[e.value("strategy", "")].push_back(e);
  }
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = summary["strategies"][label];
    EXPECT_EQ(s["steps"].get<int64_t>(), 0) << "a simulated node trained";
    EXPECT_EQ(s["failures"].get<int>(), 16) << "the kill wave takes 16 of 256 workers, and nothing else may fail";
    const auto& cp = s["control_plane"];
    std::set<std::string> reporting;
    std::set<std::string> replacements;  // killed workers heard from again
    int64_t node_events = 0;
    for (const auto& e : events[label]) {
      const std::string type = e.value("type", "");
      if (type == "simulated.report" || type == "membership.seen") ++node_events;
      if (type == "simulated.report") {
        reporting.insert(e.value("node", ""));
        if (e.value("incarnation", 0) > 0) replacements.insert(e.value("node", ""));
      }
      EXPECT_NE(type, "node.lost") << "a node paused for 2 s was declared lost: " << e.dump();
      if (type == "node.exited") {
        EXPECT_TRUE(e.value("by_chaos", false)) << e.dump();
      }
    }
    const size_t nodes = std::string(label) == "mirrored" ? 257 : 261;
    EXPECT_EQ(reporting.size(), nodes) << "not every node was heard from";
    EXPECT_EQ(replacements.size(), 16u) << "not every killed worker's replacement was heard from";
    EXPECT_EQ(cp["events"].get<int64_t>(), node_events) << "the controller's count differs from events.jsonl";
    for (const char* q : {"p50", "p99", "max"}) EXPECT_GE(cp["event_latency_ms"][q].get<double>(), 0.0) << q;
    EXPECT_LE(cp["event_latency_ms"]["p50"].get<double>(), cp["event_latency_ms"]["max"].get<double>());
    // The supervisor's loop ticks every 50 ms through 20 s of training: hundreds of passes, each timed.
    EXPECT_GT(cp["supervision_pass_ms"]["max"].get<double>(), 0.0);
    EXPECT_LE(cp["supervision_pass_ms"]["p50"].get<double>(), cp["supervision_pass_ms"]["p99"].get<double>());
    EXPECT_GT(cp["controller_cpu_fraction"].get<double>(), 0.0);
    EXPECT_GT(cp["controller_peak_rss_mb"].get<double>(), 1.0);
  }
  // Mirrored elastic: the kill wave and the replacements each published generations, and each reached its
  // members. A member that was paused, or busy, skips to the newest generation when it looks (it never needs
  // the ones between), so it must have seen this one or a later one. Generations published in the last 3 s
  // before the stop may not have been looked for yet.
  double stop_t = -1;
  std::map<std::string, int64_t> newest_seen;
  std::vector<nlohmann::json> generations;
  for (const auto& e : events["mirrored"]) {
    const std::string type = e.value("type", "");
    if (type == "run.stop") stop_t = e["t"].get<double>();
    if (type == "membership") generations.push_back(e);
    if (type == "membership.seen")
      newest_seen[e["node"]] = std::max(newest_seen[e["node"]], e["generation"].get<int64_t>());
  }
  ASSERT_GT(stop_t, 0);
  int checked = 0;
  for (const auto& e : generations) {
    const int64_t g = e["membership"]["generation"].get<int64_t>();
    if (g == 0 || e["t"].get<double>() > stop_t - 3) continue;
    ++checked;
    for (const auto& rank : e["membership"]["workers"]) {
      const std::string node = "worker-" + rank.dump();
      EXPECT_GE(newest_seen[node], g) << node << " never saw generation " << g << " or a later one";
    }
  }
  EXPECT_GE(checked, 16) << "fewer generations than the kill wave's exits";
  if (!::testing::Test::HasFailure()) fs::remove_all(out);  // kept for a look when something failed
}

// Throughput is a property of every strategy: adding workers never makes the whole slower. Each node runs
// under its own CPU quota (node isolation, as chaos experiments run), so four workers have four times one
// worker's CPU. The parameter server, whose workers never wait for each other, must then process at least
// twice one worker's samples in the same training time (3.5x measured): one worker makes ~280 pushes/s
// here, and a server that sleeps out a 2 ms poll per request (the bug that cut two workers to 1% of one)
// serves at most 500/s. Synchronous all-reduce waits at every step for the worker its quota throttled last,
// so it gains less (1.8x measured), but never loses.
TEST(RunExperiment, FourWorkersNeverProcessFewerSamplesThanOneAndAsyncAtLeastTwice) {
  auto spec = [](int workers) {
    return std::string(R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: scaling}
seed: 3
cluster: {workers: )") + std::to_string(workers) + R"(, servers: 1, cpu_per_node: 0.2}
model: {kind: mlp, layers: [32, 128, 128, 4]}
data: {dataset: synthetic, samples: 4096}
training: {batch_per_worker: 256, learning_rate: 0.01, target_accuracy: 0.999, time_limit_s: 4, eval_interval_s: 1,
           sustained_evals: 100}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
)";
  };
  SpecRun one, four;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-scaling-1", spec(1), &one));
  ASSERT_NO_FATAL_FAILURE(runSpec("run-scaling-4", spec(4), &four));
  for (const auto& [label, gain] : {std::pair{"mirrored", 1.0}, std::pair{"parameter_server", 2.0}}) {
    SCOPED_TRACE(label);
    const auto& a = one.summary["strategies"][label];
    const auto& b = four.summary["strategies"][label];
    const double rate_one = a["samples"].get<double>() / a["wall_seconds"].get<double>();
    const double rate_four = b["samples"].get<double>() / b["wall_seconds"].get<double>();
    EXPECT_GT(rate_one, 0.0) << a.dump(2);
    // Nothing happened to any node: no category may claim a freeze, and every instant is booked.
    for (const auto* run : {&a, &b}) {
      EXPECT_EQ((*run)["paused_seconds"].get<double>(), 0.0) << run->dump(2);
      EXPECT_EQ((*run)["node_seconds"]["servers"]["paused"].get<double>(), 0.0) << run->dump(2);
      EXPECT_LE((*run)["accounting_residual"].get<double>(), 0.01) << (*run)["accounting_residual_node"];
    }
    EXPECT_GE(rate_four, gain * rate_one) << "4 workers: " << rate_four << " samples/s, 1 worker: " << rate_one;
  }
}

// workload.emulate: every node carries the emulated gradient (padded), each worker calibrates its compute
// and then stretches every step to it, and summary.json says what was emulated and the ratio next to its
// target (the target is recomputed here from the public figures, not read back from the code).
TEST(RunExperiment, AnEmulatedModelIsCarriedAndTimedLikeTheRealOne) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-emulate", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: emulate}
seed: 3
cluster: {workers: 2, servers: 1}
data: {dataset: synthetic, samples: 4096}
workload: {emulate: {model: resnet50, accelerator: v100, network_gbps: 10, batch_per_worker: 64, max_gradient_mb: 4}}
training: {batch_per_worker: 32, target_accuracy: 0.999, time_limit_s: 8, eval_interval_s: 1, sustained_evals: 100}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
)", &r));
  const auto& e = r.summary["emulation"];
  ASSERT_TRUE(e.is_object()) << r.summary.dump(2);
  EXPECT_NE(e["note"].get<std::string>().find("accuracy is the small real model's"), std::string::npos);
  EXPECT_DOUBLE_EQ(e["padded_gradient_mb"].get<double>(), 4.0);
  const double bytes = 25.557e6 * 4, compute = 64 * 4.09e9 * 2 * 3 / (125e12 * 0.25);
  const std::map<std::string, double> target = {{"mirrored", 2 * 0.5 * bytes * 8 / 10e9 / compute},
                                                {"parameter_server", 2 * bytes * 8 / 10e9 / compute}};
  for (const auto& [label, ratio] : target) {
    SCOPED_TRACE(label);
    const auto& s = r.summary["strategies"][label];
    EXPECT_NEAR(s["comm_compute_ratio"]["target"].get<double>(), ratio, 1e-9);
    EXPECT_GT(s["comm_compute_ratio"]["measured"].get<double>(), 0.0);
    // Both workers calibrated; after that, every step's compute lasted at least the calibrated time (the
    // 31 steps of calibration and start-up ran at the small model's own speed).
    double shortest = 1e9;
    for (const char* node : {"worker-0", "worker-1"}) {
      const auto ev = r.find(label, "emulation_calibrated", node);
      ASSERT_TRUE(ev.is_object()) << node << " never calibrated";
      EXPECT_NEAR(ev["target_ratio"].get<double>(), ratio, 1e-9);
      shortest = std::min(shortest, ev["compute_seconds"].get<double>());
    }
    EXPECT_GT(shortest, 0.0);
    const int64_t steps = s["steps"].get<int64_t>();
    EXPECT_GE(s["compute_seconds"].get<double>(), 0.99 * double(std::max<int64_t>(0, steps - 2 * 31)) * shortest);
    // Workers, servers and the evaluator agree on the padded size: the evaluator rejects a snapshot of any
    // other size, and without evaluations there is no accuracy.
    EXPECT_GT(s["final_accuracy"].get<double>(), 0.3);
    const auto config = nlohmann::json::parse(readFile(r.dir + "/" + label + "/node-config.json"));
    EXPECT_EQ(config["training"]["emulate"]["model"], "resnet50");
  }
}

// Transport faults from a spec (transport_error): a connection reset that no process death explains is
// recovered from as a collective failure (mirrored) or by reconnecting (PS), and an injected I/O error on a
// send kills only the process it was injected into: the replacement starts with a sound transport.
TEST(RunExperiment, TransportErrorsFromASpecAreRecoveredFrom) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-transport-error", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: transport-errors}
seed: 8
cluster: {workers: 3, servers: 1}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 8,
           eval_interval_s: 0.5, sustained_evals: 100, checkpoint_interval_s: 1, collective_timeout_s: 3}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
chaos:
  faults:
    - {name: reset, action: transport_error, target: {between: [{nodes: [worker-0]}, {nodes: [worker-1, ps-0]}]},
       at_s: 1.5, params: {error: break_peer}}
    - {name: io, action: transport_error, target: {nodes: [worker-2]}, at_s: 5, params: {error: fail_send, nth: 3}}
)", &r, std::chrono::seconds(180)));
  auto& events = r.events;
  const nlohmann::json& summary = r.summary;
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    int applied = 0, failed = 0, worker2_exits = 0;
    bool reset_seen = false;
    for (const auto& e : events[label]) {
      const std::string type = e.value("type", "");
      applied += type == "chaos.applied";
      failed += type == "chaos.failed";
      if (type == "node.exited" && e.value("node", "") == "worker-2") ++worker2_exits;
      if (type == "failure_detected" && e.value("node", "") == "worker-0" &&
          e.dump().find("Connection reset by remote peer (injected transport_error)") != std::string::npos)
        reset_seen = true;
    }
    EXPECT_EQ(applied, 2);
    EXPECT_EQ(failed, 0) << "a transport_error action failed";
    EXPECT_TRUE(reset_seen) << "worker-0 never saw its connection reset";
    EXPECT_EQ(worker2_exits, 1) << "the injected send error must kill its own process only, not the replacement";
    const auto& s = summary["strategies"][label];
    EXPECT_GE(s["recoveries"].get<int>(), 1) << s.dump(2);
    EXPECT_LE(s["accounting_residual"].get<double>(), 0.01) << s["accounting_residual_node"];
  }
  // Mirrored recovers from the reset as from a collective failure: no process exited for it.
  bool collective_recovery = false;
  for (const auto& e : events["mirrored"])
    if (e.value("type", "") == "recovery" && e.value("cause", "").rfind("collective failure", 0) == 0)
      collective_recovery = true;
  EXPECT_TRUE(collective_recovery);
}

// Server queueing is server idle: four workers and one server throttled to 5% of a core for the whole run.
// The server takes a request up late, so each worker's round trip is mostly waiting for the server (the
// time its request sat in the queue and was served), not moving data.
TEST(RunExperiment, ASlowServerIsBookedAsServerIdle) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-slow-server", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: slow-server}
seed: 9
cluster: {workers: 4, servers: 1, cpu_per_node: 0.3}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 6,
           eval_interval_s: 0.5, sustained_evals: 100, checkpoint_interval_s: 10}
strategies:
  - {name: parameter_server}
chaos:
  faults:
    - {name: slow-server, action: slow, target: {nodes: [ps-0]}, at_s: 0.05, params: {cpu_fraction: 0.05}}
)", &r));
  const auto& s = r.summary["strategies"]["parameter_server"];
  const auto& w = s["node_seconds"]["workers"];
  const double server = w["server"].get<double>(), transfer = w["transfer"].get<double>(), wall = w["wall"].get<double>();
  EXPECT_GE(server, 0.5 * wall) << s.dump(2);
  EXPECT_GE(server, 5 * transfer) << "queueing at a slow server must not be booked as transfer\n" << s.dump(2);
  EXPECT_LE(s["accounting_residual"].get<double>(), 0.01) << s["accounting_residual_node"];
  // The server itself is starved by its quota for the 6 s of training, not frozen: it books the starvation
  // as throttled (its cgroup's cpu.stat; 4-5 s measured), not as peer idle, and nothing as paused. After the
  // stop the fault is healed, and a server that then waits for its workers to leave books that as peer.
  const auto& ps = s["node_seconds"]["servers"];
  EXPECT_GE(ps["throttled"].get<double>(), 3.0) << ps.dump(2);
  EXPECT_LT(ps["paused"].get<double>(), 0.05) << ps.dump(2);
}

// Progress triggers fire on each node's own progress: an epoch trigger fires in a run (4096 samples,
// 2 workers x 32 per step: epoch 1 begins at step 64), and a step trigger that names a worker fires at that
// worker's step.
TEST(RunExperiment, EpochAndNodeStepTriggersFire) {
  SpecRun r;
  ASSERT_NO_FATAL_FAILURE(runSpec("run-trigger", R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: triggers}
seed: 5
cluster: {workers: 2, servers: 1, cpu_per_node: 0, transport: ucx, hosts: local}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 0.1, momentum: 0.9, target_accuracy: 0.999, time_limit_s: 4,
           eval_interval_s: 0.5}
strategies:
  - {name: mirrored}
  - {name: parameter_server}
chaos:
  faults:
    - {name: at-epoch, action: pause, target: {role: worker, index: 0}, when: {epoch: 1}, duration_s: 0.2}
    - {name: at-step, action: pause, target: {role: worker, index: 1}, when: {node: worker-1, step: 100}, duration_s: 0.2}
)", &r, std::chrono::seconds(120)));
  std::map<std::string, std::set<std::string>> applied;  // strategy -> faults applied
  for (const auto& [strategy, events] : r.events)
    for (const auto& e : events)
      if (e.value("type", "") == "chaos.applied") applied[strategy].insert(e.value("name", ""));
  for (const char* label : {"mirrored", "parameter_server"}) {
    EXPECT_EQ(applied[label].count("at-epoch"), 1u) << label << ": the epoch trigger never fired";
    EXPECT_EQ(applied[label].count("at-step"), 1u) << label << ": the node's step trigger never fired";
  }
}

TEST(RunExperiment, InterruptKeepsWhatWasMeasured) {
  const std::string out = testing::makeTempDir("interrupt");
  testing::Command run({testing::chaosbedBinary(), "run", scenario("tiny-synthetic.yaml"), "--out=" + out,
                        "--metrics_addr=127.0.0.1:0"});
  // Interrupt once the first strategy has finished and the second has started.
  ASSERT_TRUE(run.waitForLine("[mirrored] done", deadlineIn(120s))) << run.output();
  ASSERT_TRUE(run.waitForLine("[parameter_server]", deadlineIn(60s))) << run.output();
  run.signal(SIGINT);
  auto code = run.wait(deadlineIn(60s));
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 130) << run.output();
  auto summary = nlohmann::json::parse(readFile(out + "/summary.json"));
  EXPECT_FALSE(summary["complete"].get<bool>());
  EXPECT_TRUE(summary["strategies"].contains("mirrored"));
  EXPECT_TRUE(testing::processesMentioning(out).empty()) << "node processes outlived the interrupted run";
}

TEST(RunExperiment, InvalidSpecExitsThreeWithLocation) {
  const std::string dir = testing::makeTempDir("badspec");
  const std::string spec = dir + "/bad.yaml";
  std::ofstream(spec) << "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: bad}\n"
                         "cluster: {workers: 2, wrokers: 3}\nstrategies: [{name: mirrored}]\n";
  testing::Command run({testing::chaosbedBinary(), "run", spec});
  auto code = run.wait(deadlineIn(30s));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 3) << run.output();
  EXPECT_NE(run.output().find(spec + ":4:"), std::string::npos) << run.output();
}

TEST(RunExperiment, MissingDataFilesAreASpecErrorAtDataPath) {
  const std::string dir = testing::makeTempDir("nodata");
  const std::string spec = dir + "/nodata.yaml";
  std::ofstream(spec) << "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: nodata}\n"
                         "cluster: {workers: 2, servers: 1}\n"
                         "data: {dataset: fashion-mnist, path: " << dir << "/nowhere}\n"
                         "strategies: [{name: mirrored}]\n";
  for (const char* command : {"validate", "run"}) {
    SCOPED_TRACE(command);
    testing::Command c({testing::chaosbedBinary(), command, spec});
    auto code = c.wait(deadlineIn(30s));
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 3) << c.output();
    EXPECT_NE(c.output().find(spec + ":5:38: data.path: no fashion-mnist data in " + dir + "/nowhere"), std::string::npos)
        << c.output();
  }
}

}  // namespace
}  // namespace chaosbed
