// `chaosbed run` with cluster.transport: nccl: mirrored's gradient all-reduce on NCCL, through a kill of
// the worker and its restart (a new NCCL communicator of the next generation). Needs NCCL in the build and
// a CUDA device; one worker, since NCCL runs one rank per GPU. Without a GPU: the run refuses (exit 4).

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chaosbed/config.h"
#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"
#if CHAOSBED_HAVE_NCCL
#include "transports/nccl/communicator.h"
#endif

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

using testing::readFile;

// One worker on synthetic data, killed at its step 100 and replaced 1 s later (the whole role: allowed).
// The target (1.0) is out of reach, so the run always trains to max_steps: through the kill, however fast
// the machine (progress triggers fire at the next progress report, a fraction of a second late).
std::string ncclSpec() {
  return R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: nccl-restart}
seed: 3
cluster: {workers: 1, servers: 1, cpu_per_node: 0, transport: nccl}
model: {kind: mlp, layers: [32, 64, 4]}
data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}
training:
  batch_per_worker: 64
  learning_rate: 0.1
  momentum: 0.9
  target_accuracy: 1.0
  time_limit_s: 60
  eval_interval_s: 0.25
  checkpoint_interval_s: 0.5
  max_steps: 30000
strategies:
  - {name: mirrored, on_failure: restart}
chaos:
  time_scale: 1
  allow_full_outage: true
  faults:
    - name: kill-worker-0
      action: kill
      target: {role: worker, index: 0}
      when: {node: worker-0, step: 100}
      restart_after: {fixed_s: 1}
metrics: {listen: 127.0.0.1:0}
)";
}

bool gpuAvailable(std::string* why) {
#if CHAOSBED_HAVE_NCCL
  Status viable = nccl::isViable();
  *why = viable.toString();
  return viable.isOk();
#else
  *why = "this build has no NCCL";
  return false;
#endif
}

TEST(RunNccl, MirroredAllReducesOnTheGpuAndRecoversFromAKill) {
  std::string why;
  if (!gpuAvailable(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const std::string dir = testing::makeTempDir("nccl-run");
  std::ofstream(dir + "/spec.yaml") << ncclSpec();
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out", dir + "/out"});
  auto code = run.wait(deadlineIn(180s));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();
  auto summary = nlohmann::json::parse(readFile(dir + "/out/summary.json"));
  EXPECT_EQ(summary["transport"], "nccl");
  const auto& m = summary["strategies"]["mirrored"];
  EXPECT_EQ(m["stop_reason"], "workers_ended") << m.dump();
  EXPECT_GE(m["steps"].get<int64_t>(), 30000) << m.dump();  // steps replayed after the rollback count too
  EXPECT_GE(m["final_accuracy"].get<double>(), 0.8) << m.dump();
  EXPECT_EQ(m["faults_applied"].get<int>(), 1) << m.dump();
  EXPECT_GE(m["recoveries"].get<int>(), 1) << m.dump();
  EXPECT_TRUE(testing::EventsMatchSchema(dir + "/out/events.jsonl"));
  const std::string events = readFile(dir + "/out/events.jsonl");
  EXPECT_NE(events.find("\"chaos.applied\""), std::string::npos);
  EXPECT_TRUE(testing::processesMentioning(dir + "/out").empty()) << "node processes outlived the run";
}

TEST(RunNccl, WithoutAGpuTheRunIsRefused) {
  std::string why;
  if (gpuAvailable(&why)) GTEST_SKIP() << "a CUDA device is present; this test covers machines without one";
  const std::string dir = testing::makeTempDir("nccl-refused");
  std::ofstream(dir + "/spec.yaml") << ncclSpec();
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out", dir + "/out"});
  auto code = run.wait(deadlineIn(30s));
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 4) << run.output();
  EXPECT_NE(run.output().find("cluster.transport: nccl"), std::string::npos) << run.output();
}

}  // namespace
}  // namespace chaosbed
