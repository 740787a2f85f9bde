// dashboards/ checked by the real tools and by structure: `promtool check config`, `promtool check rules`,
// `promtool test rules` (and every alert has a firing and a silent case there); every Grafana query
// (panels, annotations, variables) is valid PromQL once the variables are substituted, parsed by promtool as
// recording rules of a generated rules file; the dashboard uses ${datasource} everywhere and the experiment
// and strategy variables in every query; it has the panels the issue asks for; the provisioning files and
// the compose file point at files that exist.

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/observability_test_util.h"

namespace chaosbed {
namespace {

using namespace observability_test;
namespace fs = std::filesystem;
using nlohmann::json;

#define REQUIRE_PROMTOOL() \
  if (!haveTool("promtool")) GTEST_SKIP() << "promtool not installed (Debian package prometheus)"

json loadDashboard() { return json::parse(readFile(dashboardsDir() / "grafana" / "chaosbed.json")); }

// Writes the expressions as recording rules and runs `promtool check rules` on them.
CommandResult promtoolParse(const std::vector<DashboardQuery>& queries, const TempDir& dir) {
  YAML::Emitter e;
  e << YAML::BeginMap << YAML::Key << "groups" << YAML::Value << YAML::BeginSeq << YAML::BeginMap << YAML::Key
    << "name" << YAML::Value << "dashboard" << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (size_t i = 0; i < queries.size(); ++i)
    e << YAML::BeginMap << YAML::Key << "record" << YAML::Value << "dashboard:query_" + std::to_string(i) << YAML::Key
      << "expr" << YAML::Value << YAML::DoubleQuoted << substituteVariables(queries[i].expr) << YAML::EndMap;
  e << YAML::EndSeq << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  const fs::path file = dir.path() / "dashboard_rules.yml";
  std::ofstream(file) << e.c_str();
  return runCommand("promtool check rules " + file.string());
}

TEST(ObservabilityDashboards, PromtoolCheckConfig) {
  REQUIRE_PROMTOOL();
  auto r = runCommand("promtool check config " + (dashboardsDir() / "prometheus" / "prometheus.yml").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS"), std::string::npos) << r.output;
}

TEST(ObservabilityDashboards, PromtoolCheckRules) {
  REQUIRE_PROMTOOL();
  auto r = runCommand("promtool check rules " + (dashboardsDir() / "prometheus" / "rules.yml").string());
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS"), std::string::npos) << r.output;
}

TEST(ObservabilityDashboards, PromtoolTestRules) {
  REQUIRE_PROMTOOL();
  auto r = runCommand("cd " + (dashboardsDir() / "prometheus").string() + " && promtool test rules rules_test.yml");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS"), std::string::npos) << r.output;
}

TEST(ObservabilityDashboards, EveryAlertHasAFiringAndASilentRuleTest) {
  const YAML::Node rules = YAML::LoadFile((dashboardsDir() / "prometheus" / "rules.yml").string());
  const YAML::Node tests = YAML::LoadFile((dashboardsDir() / "prometheus" / "rules_test.yml").string());
  std::set<std::string> alerts, firing, silent;
  for (const auto& g : rules["groups"])
    for (const auto& r : g["rules"])
      if (r["alert"]) alerts.insert(r["alert"].as<std::string>());
  for (const auto& t : tests["tests"])
    for (const auto& a : t["alert_rule_test"]) {
      const auto name = a["alertname"].as<std::string>();
      (a["exp_alerts"] && a["exp_alerts"].size() > 0 ? firing : silent).insert(name);
    }
  ASSERT_GE(alerts.size(), 2u);
  EXPECT_TRUE(alerts.count("ChaosbedTimeToAccuracyRegression"));
  EXPECT_TRUE(alerts.count("ChaosbedRunStuck"));
  for (const auto& a : alerts) {
    EXPECT_TRUE(firing.count(a)) << "rules_test.yml: no case where " << a << " fires";
    EXPECT_TRUE(silent.count(a)) << "rules_test.yml: no case where " << a << " stays silent";
  }
}

TEST(ObservabilityDashboards, EveryDashboardQueryIsValidPromQL) {
  REQUIRE_PROMTOOL();
  const auto queries = dashboardQueries(loadDashboard());
  ASSERT_GE(queries.size(), 15u);
  for (const auto& q : queries)
    EXPECT_EQ(substituteVariables(q.expr).find('$'), std::string::npos) << q.where << ": unknown variable";
  TempDir dir("dashboard_promql");
  auto r = promtoolParse(queries, dir);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS: " + std::to_string(queries.size()) + " rules found"), std::string::npos) << r.output;
}

TEST(ObservabilityDashboards, PromQLCheckCatchesABrokenQuery) {
  // The check above is only worth something if promtool rejects bad PromQL in this setting.
  REQUIRE_PROMTOOL();
  TempDir dir("dashboard_promql_bad");
  auto r = promtoolParse({{"good", "sum(rate(chaosbed_steps_total[1m]))"}, {"bad", "sum by (strategy (rate(x[1m]))"}}, dir);
  EXPECT_NE(r.rc, 0) << r.output;
}

TEST(ObservabilityDashboards, UsesTheDatasourceVariableEverywhere) {
  const json d = loadDashboard();
  int refs = 0;
  std::function<void(const json&, const std::string&)> walk = [&](const json& j, const std::string& path) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "datasource" && !(j.value("type", "") == "datasource")) {
          const json& ds = it.value();
          if (ds.is_object() && ds.value("type", "") == "grafana") continue;  // the built-in annotation layer
          const std::string uid = ds.is_string() ? ds.get<std::string>() : ds.value("uid", "");
          EXPECT_EQ(uid, "${datasource}") << path << ".datasource";
          ++refs;
        }
        walk(it.value(), path + "." + it.key());
      }
    } else if (j.is_array()) {
      for (size_t i = 0; i < j.size(); ++i) walk(j[i], path + "[" + std::to_string(i) + "]");
    }
  };
  walk(d, "$");
  EXPECT_GE(refs, 20);
  std::map<std::string, json> vars;
  for (const json& v : d.at("templating").at("list")) vars[v.at("name")] = v;
  ASSERT_TRUE(vars.count("datasource"));
  EXPECT_EQ(vars["datasource"].at("type"), "datasource");
  EXPECT_EQ(vars["datasource"].at("query"), "prometheus");
  ASSERT_TRUE(vars.count("experiment"));
  ASSERT_TRUE(vars.count("strategy"));
  EXPECT_NE(vars["strategy"].dump().find("$experiment"), std::string::npos) << "strategy should depend on experiment";
}

TEST(ObservabilityDashboards, EveryQueryFiltersByExperimentAndStrategy) {
  for (const auto& q : dashboardQueries(loadDashboard())) {
    if (q.where.starts_with("variable")) continue;
    EXPECT_NE(q.expr.find("$experiment"), std::string::npos) << q.where << ": " << q.expr;
    EXPECT_NE(q.expr.find("$strategy"), std::string::npos) << q.where << ": " << q.expr;
  }
}

TEST(ObservabilityDashboards, HasThePanelsTheIssueAsksFor) {
  const json d = loadDashboard();
  std::string titles;
  for (const json& p : d.at("panels")) {
    std::string t = p.value("title", "");
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    titles += t + "\n";
  }
  for (const char* want : {"accuracy vs time", "time to accuracy", "idle wait by reason", "goodput", "nodes alive",
                           "staleness", "recovery time"})
    EXPECT_NE(titles.find(want), std::string::npos) << "no panel titled '" << want << "' in:\n" << titles;
  bool fault_annotation = false;
  for (const json& a : d.at("annotations").at("list"))
    if (a.value("expr", "").find("chaosbed_fault_active") != std::string::npos) fault_annotation = true;
  EXPECT_TRUE(fault_annotation) << "faults should be shown as annotations";
  std::set<int> ids;
  for (const json& p : d.at("panels")) EXPECT_TRUE(ids.insert(p.at("id").get<int>()).second) << "duplicate panel id";
}

// A run's series go stale as soon as its target file is gone, so a panel that shows one value per series
// (stat, bar gauge) reads the last value of the dashboard's range: every metric in it sits inside
// last_over_time(...[$__range]), or the panel goes blank when the run ends.
TEST(ObservabilityDashboards, InstantPanelsShowTheLastValuesOfTheRange) {
  static const std::regex kMetric(R"(chaosbed_[A-Za-z0-9_]+)");
  int instant = 0;
  for (const auto& q : dashboardQueries(loadDashboard())) {
    if (!q.instant) continue;
    ++instant;
    for (auto it = std::sregex_iterator(q.expr.begin(), q.expr.end(), kMetric); it != std::sregex_iterator(); ++it) {
      const std::string before = q.expr.substr(0, size_t(it->position()));
      EXPECT_TRUE(before.ends_with("last_over_time(")) << q.where << ": " << it->str() << " outside last_over_time";
      const std::string after = q.expr.substr(size_t(it->position() + it->length()));
      EXPECT_NE(after.find("[$__range])"), std::string::npos) << q.where << ": not over the dashboard's range";
    }
  }
  EXPECT_GE(instant, 10);
}

TEST(ObservabilityDashboards, LegendsNameTheExperimentAndRatesOfSecondsAreNotSeconds) {
  const json d = loadDashboard();  // a named value: panels are references into it
  for (const json& p : d.at("panels")) {
    const std::string unit = p.value("fieldConfig", json::object()).value("defaults", json::object()).value("unit", "");
    for (const json& t : p.value("targets", json::array())) {
      const std::string where = "panel '" + p.value("title", "") + "'";
      if (p.value("type", "") != "heatmap") {
        EXPECT_NE(t.value("legendFormat", "").find("{{experiment}}"), std::string::npos)
            << where << ": several experiments may be selected at once; the legend must say which";
      }
      // rate() of a seconds counter is node-seconds per second: a count of nodes, not a duration.
      const std::string expr = t.value("expr", "");
      if (std::regex_search(expr, std::regex(R"(rate\(chaosbed_[a-z_]*seconds_total)"))) {
        EXPECT_NE(unit, "s") << where << ": a rate of seconds has no unit of seconds";
      }
    }
  }
}

// Every alert says what it means and links its section of docs/runbook.md.
TEST(ObservabilityDashboards, EveryAlertHasADescriptionAndARunbookSection) {
  std::set<std::string> anchors;  // GitHub's heading anchors: lower case, spaces to '-', punctuation dropped
  std::istringstream runbook(readFile(repoRoot() / "docs" / "runbook.md"));
  for (std::string line; std::getline(runbook, line);) {
    if (!line.starts_with("## ")) continue;
    std::string a;
    for (char c : line.substr(3))
      if (std::isalnum(static_cast<unsigned char>(c))) a += char(std::tolower(static_cast<unsigned char>(c)));
      else if (c == ' ' || c == '-') a += '-';
    anchors.insert(a);
  }
  const YAML::Node rules = YAML::LoadFile((dashboardsDir() / "prometheus" / "rules.yml").string());
  int alerts = 0;
  for (const auto& g : rules["groups"])
    for (const auto& r : g["rules"]) {
      if (!r["alert"]) continue;
      ++alerts;
      const std::string name = r["alert"].as<std::string>();
      const YAML::Node a = r["annotations"];
      EXPECT_TRUE(a && a["summary"] && a["description"]) << name << ": needs a summary and a description";
      ASSERT_TRUE(a && a["runbook_url"]) << name << ": no runbook_url";
      const std::string url = a["runbook_url"].as<std::string>();
      ASSERT_TRUE(url.starts_with("docs/runbook.md#")) << name << ": " << url;
      EXPECT_TRUE(anchors.count(url.substr(url.find('#') + 1))) << name << ": no section for " << url;
    }
  EXPECT_GE(alerts, 4);
}

TEST(ObservabilityDashboards, ProvisioningAndComposeReferToRealFiles) {
  const fs::path dir = dashboardsDir();
  const YAML::Node ds = YAML::LoadFile((dir / "grafana/provisioning/datasources/chaosbed.yaml").string());
  ASSERT_TRUE(ds["datasources"] && ds["datasources"].size() >= 1);
  EXPECT_EQ(ds["datasources"][0]["type"].as<std::string>(), "prometheus");
  const YAML::Node prov = YAML::LoadFile((dir / "grafana/provisioning/dashboards/chaosbed.yaml").string());
  const std::string dash_path = prov["providers"][0]["options"]["path"].as<std::string>();

  const YAML::Node compose = YAML::LoadFile((dir / "compose.yaml").string());
  std::map<std::string, std::string> mounts;  // container path -> host path (relative to dashboards/)
  for (const auto& svc : compose["services"]) {
    EXPECT_TRUE(svc.second["image"]) << svc.first.as<std::string>() << ": no image";
    for (const auto& v : svc.second["volumes"]) {
      const std::string spec = v.as<std::string>();
      const size_t c1 = spec.find(':');
      const std::string src = spec.substr(0, c1);
      const std::string dst = spec.substr(c1 + 1, spec.find(':', c1 + 1) - c1 - 1);
      if (src.starts_with("./")) {
        EXPECT_TRUE(fs::exists(dir / src)) << "compose.yaml mounts missing " << src;
        mounts[dst] = src;
      }
    }
  }
  ASSERT_TRUE(mounts.count(dash_path)) << "the dashboard provider's path " << dash_path << " is not mounted";
  EXPECT_TRUE(fs::exists(dir / mounts[dash_path] / "chaosbed.json"));
  ASSERT_TRUE(mounts.count("/etc/grafana/provisioning"));
  ASSERT_TRUE(mounts.count("/etc/prometheus"));
  EXPECT_TRUE(fs::exists(dir / mounts["/etc/prometheus"] / "prometheus.yml"));
  EXPECT_TRUE(fs::exists(dir / mounts["/etc/prometheus"] / "rules.yml"));
}

}  // namespace
}  // namespace chaosbed
