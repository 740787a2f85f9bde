// core/config: typed getters, locations, did-you-mean, and collecting every error in one pass.

#include <gtest/gtest.h>

#include <cmath>

#include "core/config/config.h"

namespace chaosbed::config {
namespace {

std::vector<std::string> lines(const Diagnostics& d) {
  std::vector<std::string> out;
  for (const Diagnostic& x : d.all()) out.push_back(x.toString());
  return out;
}

ConfigNode parse(const std::string& text, Diagnostics* d) {
  std::optional<YAML::Node> doc = loadYamlString(text, "t.yaml", d);
  EXPECT_TRUE(doc.has_value()) << d->toString();
  return ConfigNode(doc.value_or(YAML::Node()), "t.yaml", d);
}

TEST(ConfigDiagnostic, FormatsLocationFieldAndMessage) {
  EXPECT_EQ((Diagnostic{"a.yaml", 3, 5, "cluster.workers", "must be > 0, got 0"}).toString(),
            "a.yaml:3:5: cluster.workers: must be > 0, got 0");
  EXPECT_EQ((Diagnostic{"a.yaml", 0, 0, "", "cannot read: No such file or directory"}).toString(),
            "a.yaml: cannot read: No such file or directory");
}

TEST(ConfigDiagnostics, KeepsOneCopyAndBuildsStatus) {
  Diagnostics d;
  EXPECT_TRUE(d.toStatus().isOk());
  d.add("f", 1, 2, "x", "bad");
  d.add("f", 1, 2, "x", "bad");
  d.add("f", 2, 1, "y", "worse");
  EXPECT_EQ(d.size(), 2u);
  Status s = d.toStatus();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "f:1:2: x: bad\nf:2:1: y: worse");
}

TEST(ConfigDiagnostics, KeepsTheFirstThousandAndCountsTheRest) {
  Diagnostics d;
  for (int i = 0; i < 1500; ++i) d.add("f", i + 1, 1, "x", "bad");
  EXPECT_EQ(d.all().size(), Diagnostics::kMaxKept);
  EXPECT_EQ(d.size(), 1500u) << "callers compare sizes to tell whether a parse found errors";
  EXPECT_FALSE(d.empty());
  const std::string text = d.toString();
  EXPECT_EQ(text.substr(text.rfind("...")), "... and 500 more problem(s) not shown\n");
}

TEST(ConfigNode, TypedGettersReturnValuesAndDefaults) {
  Diagnostics d;
  ConfigNode root = parse(
      "a:\n  n: 4\n  x: 0.25\n  s: hello\n  b: true\n  big: 9000000000\n  d: 90s\n  l: [1, 2, 3]\n", &d);
  ConfigNode a = root.child("a");
  EXPECT_EQ(a.required<int>("n"), 4);
  EXPECT_DOUBLE_EQ(a.required<double>("x", Range::unit()), 0.25);
  EXPECT_DOUBLE_EQ(a.required<double>("n"), 4.0);  // an integer is a number
  EXPECT_EQ(a.required<std::string>("s"), "hello");
  EXPECT_TRUE(a.required<bool>("b"));
  EXPECT_EQ(a.required<int64_t>("big"), 9000000000LL);
  EXPECT_EQ(a.required<Seconds>("d").value, 90.0);
  EXPECT_EQ(a.required<std::vector<int>>("l"), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.optional<int>("missing", 7), 7);
  EXPECT_EQ(a.optional<std::string>("missing", "dflt"), "dflt");
  EXPECT_EQ(a.child("n").path(), "a.n");
  EXPECT_TRUE(d.empty()) << d.toString();
}

TEST(ConfigNode, NullableDistinguishesAbsentNullAndValue) {
  Diagnostics d;
  ConfigNode root = parse("a: null\nb:\nc: 3\n", &d);
  EXPECT_EQ(root.nullable<int>("a", 5), std::nullopt);
  EXPECT_EQ(root.nullable<int>("b", 5), std::nullopt);
  EXPECT_EQ(root.nullable<int>("c", 5), std::optional<int>(3));
  EXPECT_EQ(root.nullable<int>("absent", 5), std::optional<int>(5));
  EXPECT_TRUE(d.empty()) << d.toString();
}

TEST(ConfigNode, UnknownKeysSuggestTheClosestAllowedKey) {
  Diagnostics d;
  ConfigNode root = parse("cluster:\n  wokers: 4\n  zzz: 1\n", &d);
  root.child("cluster").checkKeys({"workers", "servers"});
  EXPECT_EQ(lines(d), (std::vector<std::string>{
                          "t.yaml:2:3: cluster.wokers: unknown field (did you mean 'workers'?)",
                          "t.yaml:3:3: cluster.zzz: unknown field (expected one of: workers, servers)"}));
}

TEST(ConfigNode, DuplicateKeysAreErrors) {
  Diagnostics d;
  ConfigNode root = parse("a: 1\nb: 2\na: 3\n", &d);
  root.checkKeys({"a", "b"});
  EXPECT_EQ(lines(d), (std::vector<std::string>{"t.yaml:3:1: a: duplicate field (first given at line 1)"}));
}

TEST(ConfigNode, CollectsEveryErrorInOnePassWithExactLocations) {
  Diagnostics d;
  ConfigNode root = parse(
      "cluster:\n"
      "  workers: four\n"
      "  servers: -1\n"
      "  transport: ucxx\n"
      "  quoted: \"4\"\n"
      "  frac: 1.5\n"
      "  list: [1, x, 3]\n"
      "  flag: maybe\n"
      "  empty:\n",
      &d);
  ConfigNode c = root.child("cluster");
  EXPECT_EQ(c.required<int>("workers", Range::positive()), 0);
  EXPECT_EQ(c.optional<int>("servers", 1, Range::nonNegative()), 1);
  EXPECT_EQ(c.oneOf("transport", {"ucx", "nccl"}, "ucx"), "ucx");
  c.required<int>("quoted");
  c.required<double>("frac", Range::unit());
  c.required<std::vector<int>>("list");
  c.required<bool>("flag");
  c.required<int>("empty");
  c.required<int>("absent");
  c.child("list").required<int>("x");  // a map getter on a list
  EXPECT_EQ(lines(d), (std::vector<std::string>{
                          "t.yaml:2:12: cluster.workers: expected an integer, got 'four'",
                          "t.yaml:3:12: cluster.servers: must be >= 0, got -1",
                          "t.yaml:4:14: cluster.transport: 'ucxx' is not one of: ucx, nccl (did you mean 'ucx'?)",
                          "t.yaml:5:11: cluster.quoted: expected an integer, got the string \"4\"",
                          "t.yaml:6:9: cluster.frac: must be in [0, 1], got 1.5",
                          "t.yaml:7:13: cluster.list[1]: expected an integer, got 'x'",
                          "t.yaml:8:9: cluster.flag: expected true or false, got 'maybe'",
                          "t.yaml:9:3: cluster.empty: required field has no value",
                          "t.yaml:2:3: cluster.absent: missing required field",
                          "t.yaml:7:9: cluster.list: expected a map, got a list",
                      }));
}

TEST(ConfigNode, ItemsAndEntriesCarryPathsAndLocations) {
  Diagnostics d;
  ConfigNode root = parse("faults:\n  - {name: a, rate: 1}\n  - name: b\n    rate: 0\nm: {x: 1, y: 2}\n", &d);
  std::vector<ConfigNode> items = root.child("faults").items();
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[1].path(), "faults[1]");
  items[1].required<double>("rate", Range::positive());
  std::vector<std::pair<std::string, ConfigNode>> entries = root.child("m").entries();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[1].first, "y");
  EXPECT_EQ(entries[1].second.as<int>(), 2);
  root.child("m").items();  // not a list
  EXPECT_EQ(lines(d), (std::vector<std::string>{"t.yaml:4:11: faults[1].rate: must be > 0, got 0",
                                                "t.yaml:5:4: m: expected a list, got a map"}));
}

TEST(ConfigNode, SubtreeKeepsItsPathPrefix) {
  Diagnostics d;
  ConfigNode root = parse("chaos:\n  faults:\n    - schedule: {poisson: {rate_per_node_hr: 1}}\n", &d);
  ConfigNode chaos(root.child("chaos").yaml(), "t.yaml", &d, "chaos");
  ConfigNode poisson = chaos.child("faults").items().at(0).child("schedule").child("poisson");
  poisson.checkKeys({"rate_per_node_hour"});
  poisson.required<double>("rate_per_node_hour");
  EXPECT_EQ(lines(d),
            (std::vector<std::string>{
                "t.yaml:3:28: chaos.faults[0].schedule.poisson.rate_per_node_hr: unknown field (did you mean "
                "'rate_per_node_hour'?)",
                "t.yaml:3:27: chaos.faults[0].schedule.poisson.rate_per_node_hour: missing required field"}));
}

TEST(ConfigNode, RejectKeyAndErrorAt) {
  Diagnostics d;
  ConfigNode root = parse("name: mirrored\nmax_staleness: 3\n", &d);
  root.rejectKey("max_staleness", "does not apply to strategy 'mirrored'");
  root.rejectKey("shards", "never printed: the key is absent");
  root.errorAt("name", "custom");
  root.errorAt("absent", "at the map");
  EXPECT_EQ(lines(d), (std::vector<std::string>{"t.yaml:2:1: max_staleness: does not apply to strategy 'mirrored'",
                                                "t.yaml:1:1: name: custom", "t.yaml:1:1: absent: at the map"}));
}

TEST(ConfigNode, WholeDocumentOfTheWrongShape) {
  Diagnostics d;
  ConfigNode root = parse("- 1\n- 2\n", &d);
  root.checkKeys({"a"});
  EXPECT_EQ(lines(d), (std::vector<std::string>{"t.yaml:1:1: expected a map, got a list"}));
}

TEST(ConfigLoad, SyntaxErrorHasItsLocation) {
  Diagnostics d;
  EXPECT_FALSE(loadYamlString("a: 1\n b: 2\n", "bad.yaml", &d).has_value());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.all()[0].toString(), "bad.yaml:2:3: YAML syntax error: illegal map value");
}

TEST(ConfigLoad, MissingFileIsADiagnostic) {
  Diagnostics d;
  EXPECT_FALSE(loadYamlFile("/nonexistent/chaosbed.yaml", &d).has_value());
  EXPECT_EQ(lines(d),
            (std::vector<std::string>{"/nonexistent/chaosbed.yaml: cannot read: No such file or directory"}));
}

TEST(ConfigHelpers, EditDistanceAndSuggest) {
  EXPECT_EQ(editDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(editDistance("", "abc"), 3u);
  EXPECT_EQ(suggest("wokers", {"servers", "workers"}), std::optional<std::string>("workers"));
  EXPECT_EQ(suggest("Workers", {"workers"}), std::optional<std::string>("workers"));
  EXPECT_EQ(suggest("xyz", {"workers", "servers"}), std::nullopt);
}

TEST(ConfigHelpers, Durations) {
  EXPECT_EQ(parseDurationSeconds("90"), 90.0);
  EXPECT_EQ(parseDurationSeconds("1.5"), 1.5);
  EXPECT_EQ(parseDurationSeconds("250ms"), 0.25);
  EXPECT_EQ(parseDurationSeconds("2m"), 120.0);
  EXPECT_EQ(parseDurationSeconds("1h30m"), 5400.0);
  EXPECT_EQ(parseDurationSeconds("5 parsecs"), std::nullopt);
  EXPECT_EQ(parseDurationSeconds("s"), std::nullopt);
  EXPECT_EQ(parseDurationSeconds(""), std::nullopt);
}

TEST(ConfigHelpers, FormatDoubleRoundTrips) {
  EXPECT_EQ(formatDouble(0.05), "0.05");
  EXPECT_EQ(formatDouble(300), "300");
  EXPECT_EQ(formatDouble(1e-4), "1e-04");
  for (double v : {0.1, 1.0 / 3.0, 6.02e23, -2.5e-300}) EXPECT_EQ(std::stod(formatDouble(v)), v);
  EXPECT_EQ(formatDouble(INFINITY), ".inf");
}

TEST(ConfigRange, DescribesItself) {
  EXPECT_EQ(Range::positive().describe(), "> 0");
  EXPECT_EQ(Range::nonNegative().describe(), ">= 0");
  EXPECT_EQ(Range::unit().describe(), "in [0, 1]");
  EXPECT_EQ(Range::closed(0, 3).describe(), "in [0, 3]");
  EXPECT_FALSE(Range::positive().contains(0));
  EXPECT_FALSE(Range::unit().contains(NAN));
  EXPECT_TRUE(Range::unit().contains(1));
}

}  // namespace
}  // namespace chaosbed::config
