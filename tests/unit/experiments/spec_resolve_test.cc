// experiments/spec: the shared example and the shipped scenarios validate; overrides by dotted path;
// the resolved spec round-trips; sweeps expand to their cross product.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/spec/spec.h"

namespace chaosbed::spec {
namespace {

namespace fs = std::filesystem;

const fs::path kRepo = CHAOSBED_SOURCE_DIR;
const fs::path kScenarios = kRepo / "experiments" / "scenarios";
const fs::path kSharedExample = kRepo.parent_path() / "shared" / "examples" / "spot-preemption.yaml";

std::string readText(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ExperimentSpec mustLoad(const fs::path& p, const std::vector<std::string>& overrides = {}) {
  Result<ExperimentSpec> r = loadExperimentSpec(p.string(), overrides);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? std::move(r).value() : ExperimentSpec{};
}

TEST(SpecExample, SpotPreemptionValidatesUnchanged) {
  // The repository keeps a verbatim copy of the shared example; when the shared tree is here, they match.
  const fs::path copy = kScenarios / "spot-preemption.yaml";
  if (fs::exists(kSharedExample)) {
    EXPECT_EQ(readText(copy), readText(kSharedExample));
  }
  ExperimentSpec s = mustLoad(copy);
  EXPECT_EQ(s.metadata.name, "spot-preemption");
  EXPECT_EQ(s.seed, 42);
  EXPECT_EQ(s.cluster.workers, 4);
  EXPECT_EQ(s.cluster.servers, 1);
  EXPECT_DOUBLE_EQ(s.cluster.cpu_per_node, 0.4);
  EXPECT_EQ(s.model.layers, (std::vector<int>{784, 256, 128, 10}));
  EXPECT_EQ(s.data.dataset, Dataset::kFashionMnist);
  EXPECT_EQ(s.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_DOUBLE_EQ(s.training.target_accuracy, 0.85);
  EXPECT_EQ(s.training.seed, 42);
  ASSERT_EQ(s.strategies.size(), 3u);
  EXPECT_EQ(s.strategies[0].label, "mirrored");
  EXPECT_TRUE(s.strategies[0].checkpoint_on_notice);
  EXPECT_EQ(s.strategies[1].label, "mirrored-elastic");
  EXPECT_EQ(s.strategies[1].on_failure, OnFailure::kElastic);
  EXPECT_EQ(s.strategies[2].kind, StrategyKind::kParameterServer);
  EXPECT_EQ(s.strategies[2].max_staleness, std::nullopt);
  EXPECT_EQ(s.strategies[2].on_server_failure, OnServerFailure::kShardRestart);
  EXPECT_DOUBLE_EQ(s.chaos.parsed.time_scale, 60);
  EXPECT_EQ(s.chaos.parsed.faults.size(), 3u);
  EXPECT_EQ(s.metrics.listen, "127.0.0.1:9464");
  EXPECT_EQ(s.output.dir, "results");
}

TEST(SpecExample, ShippedScenariosValidate) {
  size_t n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(kScenarios)) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    config::Diagnostics d;
    EXPECT_TRUE(readExperimentSpec(e.path().string(), {}, &d).has_value()) << d.toString();
  }
  EXPECT_GE(n, 4u);
}

TEST(SpecOverride, DottedPathsChangeTheParsedSpec) {
  ExperimentSpec s = mustLoad(kScenarios / "spot-preemption.yaml",
                              {"cluster.workers=8", "chaos.faults[0].schedule.poisson.rate_per_node_hour=1.2",
                               "strategies[2].max_staleness=4", "training.learning_rate=0.1"});
  EXPECT_EQ(s.cluster.workers, 8);
  ASSERT_EQ(s.chaos.parsed.faults.size(), 3u);
  EXPECT_DOUBLE_EQ(s.chaos.parsed.faults[0].schedule.rate_per_node_hour, 1.2);
  EXPECT_EQ(s.strategies[2].max_staleness, std::optional<int>(4));
  EXPECT_DOUBLE_EQ(s.training.learning_rate, 0.1);
}

TEST(SpecOverride, BadOverridesAreDiagnostics) {
  config::Diagnostics d;
  const std::string file = (kScenarios / "spot-preemption.yaml").string();
  EXPECT_FALSE(readExperimentSpec(file, {"cluster.workers.count=8"}, &d).has_value());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.all()[0].toString(),
            file + ": override cluster.workers.count: 'cluster.workers' is not a map, cannot set field 'count'");
  // A valid path with a bad value is reported by the validator, at the overridden field's key.
  config::Diagnostics d2;
  EXPECT_FALSE(readExperimentSpec(file, {"cluster.workers=0", "cluster.wrkers=3"}, &d2).has_value());
  EXPECT_EQ(d2.toString(), file + ":11:3: cluster.wrkers: unknown field (did you mean 'workers'?)\n" + file +
                               ":11:3: cluster.workers: must be in [1, 1024], got 0\n");
}

TEST(SpecResolve, EmittedSpecRoundTrips) {
  for (const char* name : {"spot-preemption.yaml", "default.yaml", "baseline.yaml", "tiny-synthetic.yaml"}) {
    ExperimentSpec s = mustLoad(kScenarios / name);
    const std::string text = emitExperimentSpec(s);
    config::Diagnostics d;
    std::optional<ExperimentSpec> again = parseExperimentSpec(YAML::Load(text), "resolved.yaml", &d);
    ASSERT_TRUE(again.has_value()) << name << "\n" << d.toString() << text;
    EXPECT_TRUE(*again == s) << name << "\n" << text;
    EXPECT_EQ(emitExperimentSpec(*again), text) << name;
  }
}

TEST(SpecResolve, EmittedSpecHasEveryDefault) {
  ExperimentSpec s = mustLoad(kScenarios / "spot-preemption.yaml");
  YAML::Node resolved = YAML::Load(emitExperimentSpec(s));
  EXPECT_EQ(resolved["training"]["seed"].as<int>(), 42);
  EXPECT_EQ(resolved["training"]["weight_decay"].as<double>(), 0.0);
  EXPECT_TRUE(resolved["training"]["max_steps"].IsNull());
  EXPECT_EQ(resolved["strategies"][2]["label"].as<std::string>(), "parameter_server");
  EXPECT_EQ(resolved["strategies"][2]["shards"].as<int>(), 1);
  EXPECT_TRUE(resolved["strategies"][2]["max_staleness"].IsNull());
  EXPECT_EQ(resolved["strategies"][0]["backup_workers"].as<int>(), 0);
  EXPECT_EQ(resolved["chaos"]["faults"][0]["name"].as<std::string>(), "spot-reclaims");
}

TEST(SpecSweep, GridAndSeedsExpandToTheCrossProduct) {
  const std::string text =
      "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: sw}\nseed: 7\n"
      "cluster: {workers: 4}\ndata: {dataset: synthetic}\nstrategies: [{name: parameter_server}]\n"
      "sweep:\n  grid:\n    cluster.workers: [2, 4]\n    strategies[0].max_staleness: [null, 0, 8]\n"
      "  repeats: 2\n";
  config::Diagnostics d;
  std::optional<ExperimentSpec> s = parseExperimentSpec(YAML::Load(text), "sw.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  ASSERT_TRUE(s->sweep.has_value());
  EXPECT_EQ(s->sweep->seeds, (std::vector<int64_t>{7, 8}));
  std::vector<SweepPoint> points = sweepPoints(*s->sweep);
  ASSERT_EQ(points.size(), 12u);
  EXPECT_EQ(points[0], (SweepPoint{{{"cluster.workers", "2"}, {"strategies[0].max_staleness", "~"}}, 7}));
  EXPECT_EQ(points[1], (SweepPoint{{{"cluster.workers", "2"}, {"strategies[0].max_staleness", "~"}}, 8}));
  EXPECT_EQ(points[2], (SweepPoint{{{"cluster.workers", "2"}, {"strategies[0].max_staleness", "0"}}, 7}));
  EXPECT_EQ(points[11], (SweepPoint{{{"cluster.workers", "4"}, {"strategies[0].max_staleness", "8"}}, 8}));
  // The sweep round-trips too.
  std::optional<ExperimentSpec> again = parseExperimentSpec(YAML::Load(emitExperimentSpec(*s)), "r.yaml", &d);
  ASSERT_TRUE(again.has_value()) << d.toString();
  EXPECT_TRUE(*again == *s);
}

TEST(SpecSweep, RepeatsAndSeedsMustAgree) {
  const std::string text =
      "apiVersion: chaosbed/v1alpha1\nkind: Experiment\nmetadata: {name: sw}\n"
      "cluster: {workers: 4}\ndata: {dataset: synthetic}\nstrategies: [{name: mirrored}]\n"
      "sweep: {repeats: 3, seeds: [1, 1]}\n";
  config::Diagnostics d;
  EXPECT_FALSE(parseExperimentSpec(YAML::Load(text), "sw.yaml", &d).has_value());
  EXPECT_EQ(d.toString(),
            "sw.yaml:7:28: sweep.seeds: lists a seed more than once\n"
            "sw.yaml:7:9: sweep.repeats: is 3 but 2 seeds are listed; give one or the other\n");
}

}  // namespace
}  // namespace chaosbed::spec
