// JUnit XML written by a suite: parsed back with a small XML reader, checked for the testsuites /
// testsuite / testcase / failure shape, the counts, and escaping.

#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "experiments/suite/suite.h"

namespace chaosbed::suite {
namespace {

// A minimal XML element tree: enough for the subset junitXml writes (declaration, elements, attributes,
// text, the five entities). Any malformation fails the parse.
struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::vector<std::unique_ptr<Element>> children;
  std::string text;
  std::vector<const Element*> all(const std::string& n) const {
    std::vector<const Element*> out;
    for (const auto& c : children)
      if (c->name == n) out.push_back(c.get());
    return out;
  }
};

struct XmlReader {
  const std::string& s;
  size_t i = 0;
  std::string error;

  static std::string unescape(const std::string& t, std::string* error) {
    std::string out;
    for (size_t k = 0; k < t.size(); ++k) {
      if (t[k] == '<') *error = "raw '<' in text";
      if (t[k] != '&') {
        out += t[k];
        continue;
      }
      size_t semi = t.find(';', k);
      if (semi == std::string::npos) {
        *error = "unterminated entity";
        return out;
      }
      const std::string e = t.substr(k + 1, semi - k - 1);
      static const std::map<std::string, char> kEntities = {
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      auto it = kEntities.find(e);
      if (it == kEntities.end()) *error = "unknown entity &" + e + ";";
      else out += it->second;
      k = semi;
    }
    return out;
  }
  void ws() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  std::string name() {
    size_t b = i;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '-' || s[i] == ':')) ++i;
    return s.substr(b, i - b);
  }
  std::unique_ptr<Element> element() {
    ws();
    if (s.compare(i, 1, "<") != 0) return error = "expected '<' at " + std::to_string(i), nullptr;
    ++i;
    auto e = std::make_unique<Element>();
    e->name = name();
    if (e->name.empty()) return error = "empty element name", nullptr;
    for (;;) {
      ws();
      if (s.compare(i, 2, "/>") == 0) return i += 2, std::move(e);
      if (s.compare(i, 1, ">") == 0) break;
      std::string a = name();
      if (a.empty() || s.compare(i, 2, "=\"") != 0) return error = "bad attribute in <" + e->name + ">", nullptr;
      i += 2;
      size_t end = s.find('"', i);
      if (end == std::string::npos) return error = "unterminated attribute", nullptr;
      if (e->attrs.count(a)) return error = "duplicate attribute " + a, nullptr;
      e->attrs[a] = unescape(s.substr(i, end - i), &error);
      i = end + 1;
    }
    ++i;
    for (;;) {
      size_t lt = s.find('<', i);
      if (lt == std::string::npos) return error = "unterminated <" + e->name + ">", nullptr;
      e->text += unescape(s.substr(i, lt - i), &error);
      i = lt;
      if (s.compare(i, 2, "</") == 0) {
        i += 2;
        if (name() != e->name || s.compare(i, 1, ">") != 0) return error = "mismatched close of <" + e->name + ">", nullptr;
        ++i;
        return e;
      }
      auto child = element();
      if (!child) return nullptr;
      e->children.push_back(std::move(child));
    }
  }
  std::unique_ptr<Element> document() {
    if (s.compare(0, 5, "<?xml") == 0) i = s.find("?>") + 2;
    auto root = element();
    ws();
    if (root && i != s.size()) error = "content after the root element";
    return error.empty() ? std::move(root) : nullptr;
  }
};

std::vector<ScenarioResult> sample() {
  ScenarioResult a;
  a.name = "spot <preemption>";
  a.seconds = 12.5;
  a.provenance = {{"commit", "abc123"}, {"dirty", false}, {"load1_at_start", 0.25}, {"host", "h<1>"}};
  a.cases = {{"tta_seconds < 60 [mirrored]", true, false, "measured 41, expected tta_seconds < 60", 6.25},
             {"tta_seconds < 60 [parameter_server]", false, false, "measured 72.3, expected tta_seconds < 60", 0},
             {"idle_fraction < 0.3 & \"quoted\" 'x'", false, false, "measured 0.5 > 0.3 & <b>", 0}};
  ScenarioResult b;
  b.name = "broken";
  b.error = "launcher failed";
  b.cases = {{"reached_target", false, true, "scenario did not run: launcher failed", 0}};
  return {a, b};
}

TEST(SuiteJunit, HasTheJunitShapeAndCounts) {
  const std::string xml = junitXml("nightly", sample());
  XmlReader reader{xml, 0, {}};
  auto root = reader.document();
  ASSERT_TRUE(root) << reader.error << "\n" << xml;
  EXPECT_EQ(root->name, "testsuites");
  EXPECT_EQ(root->attrs["name"], "nightly");
  EXPECT_EQ(root->attrs["tests"], "4");
  EXPECT_EQ(root->attrs["failures"], "2");
  EXPECT_EQ(root->attrs["errors"], "1");
  auto suites = root->all("testsuite");
  ASSERT_EQ(suites.size(), 2u);
  EXPECT_EQ(suites[0]->attrs.at("name"), "spot <preemption>");
  EXPECT_EQ(suites[0]->attrs.at("tests"), "3");
  EXPECT_EQ(suites[0]->attrs.at("failures"), "2");
  EXPECT_EQ(suites[0]->attrs.at("errors"), "0");
  EXPECT_EQ(suites[0]->attrs.at("time"), "12.500");
  auto cases = suites[0]->all("testcase");
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0]->attrs.at("classname"), "nightly.spot <preemption>");
  // A pass has no failure element, but keeps its measured value and its time.
  EXPECT_TRUE(cases[0]->all("failure").empty());
  ASSERT_EQ(cases[0]->all("system-out").size(), 1u);
  EXPECT_EQ(cases[0]->all("system-out")[0]->text, "measured 41, expected tta_seconds < 60");
  EXPECT_EQ(cases[0]->attrs.at("time"), "6.250");
  // The run's provenance, one property per field.
  auto props = suites[0]->all("properties");
  ASSERT_EQ(props.size(), 1u);
  std::map<std::string, std::string> p;
  for (const auto* e : props[0]->all("property")) p[e->attrs.at("name")] = e->attrs.at("value");
  EXPECT_EQ(p["chaosbed.commit"], "abc123");
  EXPECT_EQ(p["chaosbed.dirty"], "false");
  EXPECT_EQ(p["chaosbed.load1_at_start"], "0.25");
  EXPECT_EQ(p["chaosbed.host"], "h<1>");
  EXPECT_TRUE(suites[1]->all("properties").empty()) << "a scenario that did not run has no provenance";
  auto failure = cases[1]->all("failure");
  ASSERT_EQ(failure.size(), 1u);
  EXPECT_EQ(failure[0]->attrs.at("message"), "measured 72.3, expected tta_seconds < 60");
  EXPECT_EQ(failure[0]->attrs.at("type"), "assertion");
  EXPECT_EQ(cases[2]->attrs.at("name"), "idle_fraction < 0.3 & \"quoted\" 'x'");
  EXPECT_EQ(cases[2]->all("failure")[0]->text, "measured 0.5 > 0.3 & <b>");
  auto broken = suites[1]->all("testcase");
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(suites[1]->attrs.at("errors"), "1");
  auto error = broken[0]->all("error");
  ASSERT_EQ(error.size(), 1u);
  EXPECT_EQ(error[0]->attrs.at("type"), "infrastructure");
}

TEST(SuiteJunit, RunSuiteCountsFailuresAndErrorsAndExpandsPerStrategy) {
  Suite suite;
  suite.name = "s";
  Scenario ok;
  ok.name = "ok";
  ok.spec.strategies = {spec::StrategySpec{}, spec::StrategySpec{}};
  ok.spec.strategies[0].label = "mirrored";
  ok.spec.strategies[1].label = "parameter_server";
  std::string error;
  size_t offset = 0;
  ok.assertions.push_back(*parseAssertion("tta_seconds < 45", &error, &offset));
  Scenario down = ok;
  down.name = "down";
  suite.scenarios = {ok, down};
  nlohmann::json summary = {{"complete", true},
                            {"provenance", {{"commit", "c0ffee"}}},
                            {"strategies",
                             {{"mirrored", {{"tta_seconds", 40.0}, {"wall_seconds", 41.5}}},
                              {"parameter_server", {{"tta_seconds", 50.0}, {"wall_seconds", 51.0}}}}}};
  std::vector<std::string> dirs;
  SuiteOutcome out = runSuite(suite, "/nonexistent-out", [&](const Scenario& sc, const std::string& dir) -> Result<nlohmann::json> {
    dirs.push_back(dir);
    if (sc.name == "down") return Status::unavailable("no launcher");
    return summary;
  }, nullptr);
  EXPECT_EQ(dirs, (std::vector<std::string>{"/nonexistent-out/ok", "/nonexistent-out/down"}));
  EXPECT_EQ(out.cases, 3);     // 2 strategies for ok, 1 error case for down
  EXPECT_EQ(out.failures, 1);  // parameter_server's 50 s
  EXPECT_EQ(out.errors, 1);
  ASSERT_EQ(out.results.size(), 2u);
  EXPECT_NE(out.results[1].error.find("no launcher"), std::string::npos);
  ASSERT_EQ(out.results[0].cases.size(), 2u);
  EXPECT_EQ(out.results[0].cases[0].seconds, 41.5) << "a case takes the time its strategy ran";
  EXPECT_EQ(out.results[0].cases[1].seconds, 51.0);
  EXPECT_EQ(out.results[0].provenance.value("commit", ""), "c0ffee");
}

TEST(SuiteJunit, EscapesControlCharacters) {
  EXPECT_EQ(xmlEscape("a\x01<b>&'\"\n"), "a?&lt;b&gt;&amp;&apos;&quot;\n");
}

}  // namespace
}  // namespace chaosbed::suite
