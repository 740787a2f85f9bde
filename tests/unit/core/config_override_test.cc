// core/config overrides: dotted paths with list indices, creation of missing maps, errors that leave the
// document unchanged.

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "core/config/override.h"

namespace chaosbed::config {
namespace {

YAML::Node doc() {
  return YAML::Load(
      "cluster: {workers: 4}\n"
      "strategies:\n  - {name: mirrored}\n  - {name: parameter_server, max_staleness: 2}\n"
      "chaos:\n  faults:\n    - schedule: {poisson: {rate_per_node_hour: 0.6}}\n"
      "metrics:\n");
}

TEST(ConfigOverride, SetsScalarsAtDottedPaths) {
  YAML::Node d = doc();
  ASSERT_TRUE(applyOverride(d, "cluster.workers", "8").isOk());
  ASSERT_TRUE(applyOverride(d, "chaos.faults[0].schedule.poisson.rate_per_node_hour", "1.5").isOk());
  ASSERT_TRUE(applyOverride(d, "strategies[1].max_staleness", "null").isOk());
  EXPECT_EQ(d["cluster"]["workers"].as<int>(), 8);
  EXPECT_EQ(d["chaos"]["faults"][0]["schedule"]["poisson"]["rate_per_node_hour"].as<double>(), 1.5);
  EXPECT_TRUE(d["strategies"][1]["max_staleness"].IsNull());
  EXPECT_EQ(d["strategies"][1]["name"].as<std::string>(), "parameter_server");  // siblings untouched
}

TEST(ConfigOverride, CreatesMissingMapsAndAppendsToLists) {
  YAML::Node d = doc();
  ASSERT_TRUE(applyOverride(d, "training.learning_rate", "0.1").isOk());
  ASSERT_TRUE(applyOverride(d, "metrics.listen", "127.0.0.1:0").isOk());  // a null map
  ASSERT_TRUE(applyOverrideAssignment(d, "strategies[2]={name: mirrored, label: m2}").isOk());
  EXPECT_EQ(d["training"]["learning_rate"].as<double>(), 0.1);
  EXPECT_EQ(d["metrics"]["listen"].as<std::string>(), "127.0.0.1:0");
  ASSERT_EQ(d["strategies"].size(), 3u);
  EXPECT_EQ(d["strategies"][2]["label"].as<std::string>(), "m2");
}

TEST(ConfigOverride, ReplacesWholeSubtrees) {
  YAML::Node d = doc();
  ASSERT_TRUE(applyOverride(d, "chaos.faults[0].schedule", "{at_s: [10, 20]}").isOk());
  EXPECT_FALSE(d["chaos"]["faults"][0]["schedule"]["poisson"].IsDefined());
  EXPECT_EQ(d["chaos"]["faults"][0]["schedule"]["at_s"][1].as<int>(), 20);
}

TEST(ConfigOverride, ValueKeepsQuotingButNotLocation) {
  YAML::Node d = doc();
  ASSERT_TRUE(applyOverride(d, "cluster.workers", "\"4\"").isOk());
  Diagnostics diags;
  ConfigNode root(d, "spec.yaml", &diags);
  root.child("cluster").required<int>("workers");
  ASSERT_EQ(diags.size(), 1u);
  // A quoted value is still a string; the error points at the key whose value was overridden.
  EXPECT_EQ(diags.all()[0].toString(), "spec.yaml:1:11: cluster.workers: expected an integer, got the string \"4\"");
}

TEST(ConfigOverride, BadPathsAreErrorsAndChangeNothing) {
  struct Case {
    const char* path;
    const char* message;
  };
  const Case cases[] = {
      {"cluster.workers.x", "override cluster.workers.x: 'cluster.workers' is not a map, cannot set field 'x'"},
      {"cluster[0]", "override cluster[0]: 'cluster' is not a list"},
      {"strategies[5].name", "override strategies[5].name: index 5 is out of range; 'strategies' has 2 items"},
      {"strategies[2].name", "override strategies[2].name: index 2 is out of range; 'strategies' has 2 items"},
      {"cluster..workers", "override path 'cluster..workers': empty field name"},
      {"cluster.", "override path 'cluster.': empty field name"},
      {"", "override path '': empty field name"},
      {"strategies[x]", "override path 'strategies[x]': list index 'x' is not a number"},
      {"strategies[0", "override path 'strategies[0': '[' without ']'"},
      {"strategies[0]name", "override path 'strategies[0]name': expected '.' or '[' after ']'"},
  };
  for (const Case& c : cases) {
    YAML::Node d = doc();
    const std::string before = YAML::Dump(d);
    Status s = applyOverride(d, c.path, "1");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.path;
    EXPECT_EQ(s.message(), c.message);
    EXPECT_EQ(YAML::Dump(d), before) << c.path;
  }
  YAML::Node d = doc();
  EXPECT_EQ(applyOverride(d, "cluster.workers", "[1, 2").message(),
            "override cluster.workers: value '[1, 2' is not valid YAML: end of sequence flow not found");
  EXPECT_EQ(applyOverrideAssignment(d, "cluster.workers").message(),
            "override 'cluster.workers': expected PATH=VALUE");
}

}  // namespace
}  // namespace chaosbed::config
