// experiments/spec/schema: the JSON Schema recorded from the spec parser covers every key the parser allows,
// says what the parser requires, and is the file the repository publishes. The shipped specs against an
// independent validator: tests/schema/check_spec_schema.py.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/config/config.h"
#include "core/config/schema.h"
#include "experiments/spec/schema.h"
#include "experiments/spec/spec.h"

namespace chaosbed::spec {
namespace {

const std::filesystem::path kPublished = std::filesystem::path(CHAOSBED_SOURCE_DIR) / "docs" / "spec.schema.json";

const nlohmann::json& at(const nlohmann::json& schema, std::initializer_list<const char*> properties) {
  const nlohmann::json* j = &schema;
  for (const char* p : properties) {
    if (std::string(p) == "[]") j = &j->at("items");
    else j = &j->at("properties").at(p);
  }
  return *j;
}

TEST(SpecSchema, EveryKeyTheParserAllowsIsTyped) {
  const SpecSchema s = experimentSpecSchema();
  for (const std::string& key : s.untyped_keys) ADD_FAILURE() << "no probe types " << key;
}

TEST(SpecSchema, SaysWhatTheParserRequiresAndBounds) {
  const nlohmann::json s = experimentSpecSchema().schema;
  EXPECT_EQ(s.at("additionalProperties"), false);
  EXPECT_EQ(s.at("required"), nlohmann::json::array({"apiVersion", "cluster", "kind", "metadata", "strategies"}));
  EXPECT_EQ(s.at("properties").at("apiVersion").at("const"), kApiVersion);
  const nlohmann::json& workers = at(s, {"cluster", "workers"});
  EXPECT_EQ(workers.at("type"), "integer");
  EXPECT_EQ(workers.at("minimum"), 1);
  EXPECT_EQ(at(s, {"cluster"}).at("required"), nlohmann::json::array({"workers"}));
  EXPECT_EQ(at(s, {"training", "momentum"}).at("exclusiveMaximum"), 1);
  EXPECT_EQ(at(s, {"training", "learning_rate"}).at("exclusiveMinimum"), 0);
  EXPECT_EQ(at(s, {"training", "max_steps"}).at("type"), nlohmann::json::array({"integer", "null"}));
  EXPECT_EQ(at(s, {"strategies", "[]", "name"}).at("enum"), nlohmann::json::array({"mirrored", "parameter_server"}));
  EXPECT_EQ(at(s, {"cluster", "transport"}).at("default"), "ucx");
  // A fault needs a name always, an action and a target except in an events trace (which names them per row).
  const nlohmann::json& fault = at(s, {"chaos", "faults", "[]"});
  EXPECT_EQ(fault.at("required"), nlohmann::json::array({"name"}));
  // restart_after: never | {fixed_s: S} | {exponential: {mean_s: S}}.
  const nlohmann::json& restart = fault.at("properties").at("restart_after").at("anyOf");
  EXPECT_EQ(restart.at(0).at("enum"), nlohmann::json::array({"never"}));
  EXPECT_EQ(restart.at(1).at("properties").at("exponential").at("required"), nlohmann::json::array({"mean_s"}));
  // A list or a single value: at_s: 20 | [20, 80].
  EXPECT_EQ(fault.at("properties").at("at_s").at("type"), nlohmann::json::array({"array", "number"}));
}

TEST(SpecSchema, ThePublishedFileIsTheGeneratedSchema) {
  std::ifstream in(kPublished);
  ASSERT_TRUE(in) << "cannot read " << kPublished;
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json published = nlohmann::json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(published.is_discarded()) << kPublished << " is not JSON";
  EXPECT_EQ(published, experimentSpecSchema().schema)
      << kPublished << " is out of date: regenerate it with `build/chaosbed schema > docs/spec.schema.json`";
}

TEST(SchemaRecorder, JoinsRangesAndDropsConflictingDefaults) {
  config::SchemaRecorder r;
  {
    config::SchemaRecorder::Scope scope(&r);
    for (const char* text : {"{a: 1}", "{}"}) {
      config::Diagnostics d;
      config::ConfigNode root(YAML::Load(text), "t.yaml", &d);
      root.checkKeys({"a", "b", "c"});
      root.required<int>("a", config::Range::closed(1, 5));
      root.optional<double>("b", text[1] == 'a' ? 1.0 : 2.0, config::Range{0, 10, true, false});
      if (root.has("a")) root.required<int>("c", config::Range::closed(0, 3));  // conditional: not required
    }
    config::Diagnostics d;
    config::ConfigNode other(YAML::Load("{b: 1}"), "t.yaml", &d);
    other.optional<double>("b", 2.0, config::Range::closed(-1, 4));
  }
  const nlohmann::json s = r.toJsonSchema("t");
  EXPECT_EQ(s.at("required"), nlohmann::json::array({"a"}));
  const nlohmann::json& b = s.at("properties").at("b");
  EXPECT_EQ(b.at("minimum"), -1);  // (0, 10] joined with [-1, 4]
  EXPECT_EQ(b.at("maximum"), 10);
  EXPECT_FALSE(b.contains("exclusiveMinimum"));
  EXPECT_FALSE(b.contains("default"));  // 1.0 in one visit, 2.0 in the other
  EXPECT_TRUE(r.untypedKeys().empty());
}

TEST(SchemaRecorder, RecordsNothingWithoutAScope) {
  config::SchemaRecorder r;
  config::Diagnostics d;
  config::ConfigNode root(YAML::Load("{a: 1}"), "t.yaml", &d);
  root.checkKeys({"a"});
  EXPECT_EQ(r.toJsonSchema("t").size(), 2u);  // only $schema and title
}

}  // namespace
}  // namespace chaosbed::spec
