#include "experiments/suite/suite.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

namespace chaosbed::suite {
namespace {

namespace fs = std::filesystem;
using config::ConfigNode;

const std::vector<std::string>& metricNames() {
  static const std::vector<std::string> kNames = {
      "tta_seconds",      "final_accuracy",      "final_loss",          "steps",
      "samples",          "samples_lost",        "wall_seconds",        "goodput_samples_per_s",
      "compute_seconds",  "transfer_seconds",    "idle_seconds",        "idle_peer_seconds",
      "idle_server_seconds", "idle_recovery_seconds", "idle_fraction",  "failures",
      "recoveries",       "faults_applied",      "chaos_leaks",         "checkpoints_written",
      "checkpoint_failures", "longest_stall_seconds", "tta_sustained_seconds", "paused_seconds",
      "accounting_residual", "detection_seconds", "checkpoint_seconds", "crashes"};
  return kNames;
}
const std::vector<std::string>& predicateNames() {
  static const std::vector<std::string> kNames = {"reached_target", "no_checkpoint_lost"};
  return kNames;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isLabelChar(char c) { return isIdentChar(c) || c == '.' || c == '-'; }

struct Parser {
  const std::string& s;
  size_t i = 0;
  std::string error;
  size_t error_at = 0;

  void skip() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool fail(size_t at, std::string message) {
    if (error.empty()) error = std::move(message), error_at = at;
    return false;
  }
  bool ref(MetricRef* out, bool* is_predicate) {
    skip();
    const size_t start = i;
    while (i < s.size() && isIdentChar(s[i])) ++i;
    out->metric = s.substr(start, i - start);
    if (out->metric.empty()) return fail(start, "expected a metric name");
    if (contains(predicateNames(), out->metric)) {
      *is_predicate = true;
    } else if (!contains(metricNames(), out->metric)) {
      std::vector<std::string> all = metricNames();
      all.insert(all.end(), predicateNames().begin(), predicateNames().end());
      std::string msg = "unknown metric '" + out->metric + "'";
      if (auto near = config::suggest(out->metric, all)) msg += " (did you mean '" + *near + "'?)";
      return fail(start, msg);
    }
    skip();
    if (i < s.size() && s[i] == '[') {
      const size_t open = i++;
      const size_t lstart = i;
      while (i < s.size() && isLabelChar(s[i])) ++i;
      if (i >= s.size() || s[i] != ']') return fail(i, "expected ']' to close the strategy label opened at column offset " + std::to_string(open + 1));
      out->label = s.substr(lstart, i - lstart);
      if (out->label.empty()) return fail(lstart, "empty strategy label");
      ++i;
    }
    return true;
  }
};

std::optional<double> metricValue(const nlohmann::json& s, const std::string& metric) {
  auto number = [&](const nlohmann::json& j, const char* key) -> std::optional<double> {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
    return j[key].get<double>();
  };
  if (metric == "idle_seconds") {
    if (!s.contains("idle_seconds") || !s["idle_seconds"].is_object()) return std::nullopt;
    double sum = 0;
    for (const auto& [k, v] : s["idle_seconds"].items())
      if (v.is_number()) sum += v.get<double>();
    return sum;
  }
  for (const char* reason : {"peer", "server", "recovery"})
    if (metric == std::string("idle_") + reason + "_seconds")
      return s.contains("idle_seconds") ? number(s["idle_seconds"], reason) : std::nullopt;
  return number(s, metric.c_str());
}

bool compare(double a, Op op, double b) {
  switch (op) {
    case Op::kLt: return a < b;
    case Op::kLe: return a <= b;
    case Op::kGt: return a > b;
    case Op::kGe: return a >= b;
    case Op::kEq: return a == b;
    case Op::kNe: return a != b;
  }
  return false;
}

std::string g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const nlohmann::json* strategyOf(const nlohmann::json& summary, const std::string& label) {
  if (!summary.is_object() || !summary.contains("strategies") || !summary["strategies"].is_object() ||
      !summary["strategies"].contains(label))
    return nullptr;
  return &summary["strategies"][label];
}

std::string refName(const MetricRef& r) { return r.metric + (r.label.empty() ? "" : "[" + r.label + "]"); }

}  // namespace

const char* opName(Op op) {
  switch (op) {
    case Op::kLt: return "<";
    case Op::kLe: return "<=";
    case Op::kGt: return ">";
    case Op::kGe: return ">=";
    case Op::kEq: return "==";
    case Op::kNe: return "!=";
  }
  return "?";
}

std::optional<Assertion> parseAssertion(const std::string& text, std::string* error, size_t* error_offset) {
  Parser p{text, 0, {}, 0};
  Assertion a;
  a.text = text;
  bool lhs_pred = false, rhs_pred = false;
  auto failed = [&]() -> std::optional<Assertion> {
    *error = p.error;
    *error_offset = p.error_at;
    return std::nullopt;
  };
  if (!p.ref(&a.lhs, &lhs_pred)) return failed();
  p.skip();
  if (p.i == text.size()) {
    if (!lhs_pred) {
      p.fail(p.i, "expected a comparison (< <= > >= == !=) after '" + refName(a.lhs) + "'; only reached_target and "
                  "no_checkpoint_lost stand alone");
      return failed();
    }
    a.kind = Assertion::Kind::kPredicate;
    return a;
  }
  if (lhs_pred) {
    p.fail(p.i, "'" + a.lhs.metric + "' is a yes/no predicate and takes no comparison");
    return failed();
  }
  if (text[p.i] == '/') {
    const size_t slash = p.i++;
    a.kind = Assertion::Kind::kRatio;
    if (!p.ref(&a.rhs, &rhs_pred)) return failed();
    if (rhs_pred) {
      p.fail(slash + 1, "'" + a.rhs.metric + "' is a yes/no predicate and cannot be divided by");
      return failed();
    }
    if (a.lhs.label.empty() || a.rhs.label.empty()) {
      p.fail(a.lhs.label.empty() ? 0 : slash + 1, "a ratio compares two strategies: name both, e.g. "
                                                  "tta_seconds[parameter_server] / tta_seconds[mirrored]");
      return failed();
    }
    p.skip();
  }
  static const std::pair<const char*, Op> kOps[] = {{"<=", Op::kLe}, {">=", Op::kGe}, {"==", Op::kEq},
                                                    {"!=", Op::kNe}, {"<", Op::kLt},  {">", Op::kGt}};
  bool found = false;
  for (const auto& [spelling, op] : kOps)
    if (text.compare(p.i, std::strlen(spelling), spelling) == 0) {
      a.op = op;
      p.i += std::strlen(spelling);
      found = true;
      break;
    }
  if (!found) {
    p.fail(p.i, "expected one of < <= > >= == != , got '" + text.substr(p.i, 8) + "'");
    return failed();
  }
  p.skip();
  const size_t nstart = p.i;
  const char* begin = text.c_str() + p.i;
  char* end = nullptr;
  a.value = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(a.value)) {
    p.fail(nstart, "expected a number after '" + std::string(opName(a.op)) + "'");
    return failed();
  }
  p.i += size_t(end - begin);
  p.skip();
  if (p.i != text.size()) {
    p.fail(p.i, "unexpected '" + text.substr(p.i) + "' after the number");
    return failed();
  }
  if (a.kind == Assertion::Kind::kRatio) return a;
  a.kind = Assertion::Kind::kCompare;
  return a;
}

std::optional<Suite> readSuite(const std::string& path, config::Diagnostics* d) {
  auto doc = config::loadYamlFile(path, d);
  if (!doc) return std::nullopt;
  ConfigNode root(*doc, path, d);
  root.checkKeys({"apiVersion", "kind", "metadata", "scenarios"});
  if (root.required<std::string>("apiVersion") != spec::kApiVersion && root.has("apiVersion"))
    root.errorAt("apiVersion", std::string("must be ") + spec::kApiVersion);
  if (root.required<std::string>("kind") != "Suite" && root.has("kind")) root.errorAt("kind", "must be Suite");
  Suite suite;
  suite.file = path;
  ConfigNode meta = root.requiredChild("metadata");
  meta.checkKeys({"name", "description"});
  suite.name = meta.required<std::string>("name");
  ConfigNode scenarios = root.requiredChild("scenarios");
  if (scenarios.present() && !scenarios.isSequence()) scenarios.error("expected a list of scenarios, got " + scenarios.describe());
  else if (scenarios.present() && scenarios.items().empty()) scenarios.error("lists no scenarios");
  const fs::path folder = fs::path(path).parent_path();
  std::set<std::string> names;
  for (const ConfigNode& item : scenarios.isSequence() ? scenarios.items() : std::vector<ConfigNode>{}) {
    item.checkKeys({"spec", "name", "overrides", "assert"});
    Scenario sc;
    const std::string spec_rel = item.required<std::string>("spec");
    sc.overrides = item.optional<std::vector<std::string>>("overrides", {});
    std::optional<spec::ExperimentSpec> spec;
    if (!spec_rel.empty()) {
      sc.spec_path = fs::path(spec_rel).is_absolute() ? spec_rel : (folder / spec_rel).lexically_normal().string();
      config::Diagnostics inner;
      spec = spec::readExperimentSpec(sc.spec_path, sc.overrides, &inner);
      if (!spec) {
        item.errorAt("spec", "scenario '" + spec_rel + "' is not a valid experiment spec (" +
                                 std::to_string(inner.size()) + " problem(s) below)");
        for (const auto& diag : inner.all()) d->add(diag);
      }
    }
    sc.name = item.optional<std::string>("name", spec ? spec->metadata.name : std::string());
    if (!sc.name.empty() && !names.insert(sc.name).second)
      item.errorAt(item.has("name") ? "name" : "spec", "scenario name '" + sc.name + "' is used twice; give one of them another name:");
    std::vector<std::string> labels;
    if (spec)
      for (const auto& s : spec->strategies) labels.push_back(s.label);
    ConfigNode asserts = item.requiredChild("assert");
    if (asserts.present() && !asserts.isSequence()) asserts.error("expected a list of assertions, got " + asserts.describe());
    for (const ConfigNode& a : asserts.isSequence() ? asserts.items() : std::vector<ConfigNode>{}) {
      const std::string text = a.as<std::string>();
      if (text.empty()) continue;  // the type error is recorded
      // Columns point into the text: a quoted scalar starts one column after its quote.
      const int base = a.column() + (a.yaml().Tag() == "!" ? 1 : 0);
      std::string error;
      size_t offset = 0;
      auto parsed = parseAssertion(text, &error, &offset);
      if (!parsed) {
        d->add(path, a.line(), base + int(offset), a.path(), error + " in '" + text + "'");
        continue;
      }
      parsed->line = a.line();
      parsed->column = a.column();
      for (const MetricRef* r : {&parsed->lhs, &parsed->rhs}) {
        if (r->label.empty() || !spec || contains(labels, r->label)) continue;
        std::string msg = "strategy '" + r->label + "' is not in " + spec_rel;
        std::string list;
        for (const auto& l : labels) list += (list.empty() ? "" : ", ") + l;
        if (auto near = config::suggest(r->label, labels)) msg += " (did you mean '" + *near + "'?)";
        msg += " (strategies: " + list + ")";
        d->add(path, a.line(), base + int(text.find("[" + r->label + "]") + 1), a.path(), msg);
      }
      sc.assertions.push_back(std::move(*parsed));
    }
    if (spec) sc.spec = std::move(*spec);
    suite.scenarios.push_back(std::move(sc));
  }
  if (!d->empty()) return std::nullopt;
  return suite;
}

std::vector<CaseResult> evaluate(const Assertion& a, const nlohmann::json& summary, const std::vector<std::string>& labels) {
  std::vector<CaseResult> out;
  auto missing = [&](const std::string& name, const std::string& label) {
    out.push_back({name, false, true, "no results for strategy '" + label + "' (the run ended before it or failed)", 0});
  };
  if (a.kind == Assertion::Kind::kRatio) {
    CaseResult c{a.text, false, false, "", 0};
    const nlohmann::json* s1 = strategyOf(summary, a.lhs.label);
    const nlohmann::json* s2 = strategyOf(summary, a.rhs.label);
    if (!s1 || !s2) {
      missing(a.text, !s1 ? a.lhs.label : a.rhs.label);
      return out;
    }
    c.seconds = s1->value("wall_seconds", 0.0) + (s1 == s2 ? 0.0 : s2->value("wall_seconds", 0.0));
    auto v1 = metricValue(*s1, a.lhs.metric), v2 = metricValue(*s2, a.rhs.metric);
    const std::string expected = std::string("expected ") + opName(a.op) + " " + g(a.value);
    if (!v1 || !v2) {
      c.message = "measured: " + refName(!v1 ? a.lhs : a.rhs) +
                  (a.lhs.metric == "tta_seconds" || a.rhs.metric == "tta_seconds" ? " has no value (target not reached)"
                                                                                   : " has no value") + ", " + expected;
    } else if (*v2 == 0) {
      c.message = "measured: " + refName(a.rhs) + " is 0, the ratio is undefined; " + expected;
    } else {
      const double r = *v1 / *v2;
      c.passed = compare(r, a.op, a.value);
      c.message = "measured " + g(*v1) + " / " + g(*v2) + " = " + g(r) + ", " + expected;
    }
    out.push_back(std::move(c));
    return out;
  }
  const std::vector<std::string> targets = a.lhs.label.empty() ? labels : std::vector<std::string>{a.lhs.label};
  for (const std::string& label : targets) {
    const std::string name = a.lhs.label.empty() ? a.text + " [" + label + "]" : a.text;
    const nlohmann::json* s = strategyOf(summary, label);
    if (!s) {
      missing(name, label);
      continue;
    }
    CaseResult c{name, false, false, "", s->value("wall_seconds", 0.0)};
    if (a.kind == Assertion::Kind::kPredicate) {
      if (a.lhs.metric == "reached_target") {
        c.passed = s->value("reached_target", false);
        c.message = c.passed ? "reached the target" :
                    "measured: target not reached (final accuracy " + g(s->value("final_accuracy", 0.0)) +
                    ", stop: " + s->value("stop_reason", "?") + "), expected reached_target";
      } else {  // no_checkpoint_lost
        const double lost = metricValue(*s, "samples_lost").value_or(-1);
        const double failures = metricValue(*s, "checkpoint_failures").value_or(-1);
        c.passed = lost == 0 && failures == 0;
        c.message = "measured samples_lost " + g(lost) + ", checkpoint_failures " + g(failures) + ", expected both 0";
      }
    } else {
      auto v = metricValue(*s, a.lhs.metric);
      const std::string expected = std::string("expected ") + a.lhs.metric + " " + opName(a.op) + " " + g(a.value);
      if (!v) {
        c.message = std::string("measured: ") + (a.lhs.metric == "tta_seconds" ? "target not reached" : "no value") + ", " + expected;
      } else {
        c.passed = compare(*v, a.op, a.value);
        c.message = "measured " + g(*v) + ", " + expected;
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string xmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters other than tab, newline and carriage return are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += "?";
        else out += c;
    }
  }
  return out;
}

std::string junitXml(const std::string& suite_name, const std::vector<ScenarioResult>& results) {
  int tests = 0, failures = 0, errors = 0;
  double seconds = 0;
  for (const auto& r : results) {
    seconds += r.seconds;
    for (const auto& c : r.cases) {
      ++tests;
      if (c.error) ++errors;
      else if (!c.passed) ++failures;
    }
  }
  auto t = [](double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", s);
    return std::string(buf);
  };
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"" << xmlEscape(suite_name) << "\" tests=\"" << tests
    << "\" failures=\"" << failures << "\" errors=\"" << errors << "\" time=\"" << t(seconds) << "\">\n";
  for (const auto& r : results) {
    int f = 0, e = 0;
    for (const auto& c : r.cases) {
      if (c.error) ++e;
      else if (!c.passed) ++f;
    }
    o << "  <testsuite name=\"" << xmlEscape(r.name) << "\" tests=\"" << r.cases.size() << "\" failures=\"" << f
      << "\" errors=\"" << e << "\" skipped=\"0\" time=\"" << t(r.seconds) << "\">\n";
    if (r.provenance.is_object() && !r.provenance.empty()) {
      // What produced the figures: commit, host, load, times (run/provenance.h), one property per field.
      o << "    <properties>\n";
      for (const auto& [key, value] : r.provenance.items())
        o << "      <property name=\"chaosbed." << xmlEscape(key) << "\" value=\""
          << xmlEscape(value.is_string() ? value.get<std::string>() : value.dump()) << "\"/>\n";
      o << "    </properties>\n";
    }
    for (const auto& c : r.cases) {
      o << "    <testcase classname=\"" << xmlEscape(suite_name + "." + r.name) << "\" name=\"" << xmlEscape(c.name)
        << "\" time=\"" << t(c.seconds) << "\"";
      if (c.passed && !c.error) {
        // A pass keeps its measured value too: a trend is read from passes as much as from failures.
        o << ">\n      <system-out>" << xmlEscape(c.message) << "</system-out>\n    </testcase>\n";
        continue;
      }
      const char* tag = c.error ? "error" : "failure";
      o << ">\n      <" << tag << " message=\"" << xmlEscape(c.message) << "\" type=\""
        << (c.error ? "infrastructure" : "assertion") << "\">" << xmlEscape(c.message) << "</" << tag
        << ">\n    </testcase>\n";
    }
    o << "  </testsuite>\n";
  }
  o << "</testsuites>\n";
  return o.str();
}

SuiteOutcome runSuite(const Suite& suite, const std::string& out_dir, const ScenarioRunner& runner, FILE* progress) {
  SuiteOutcome out;
  for (const Scenario& sc : suite.scenarios) {
    ScenarioResult r;
    r.name = sc.name;
    std::vector<std::string> labels;
    for (const auto& s : sc.spec.strategies) labels.push_back(s.label);
    if (progress) {
      std::fprintf(progress, "suite %s: scenario %s (%s)\n", suite.name.c_str(), sc.name.c_str(), sc.spec_path.c_str());
      std::fflush(progress);
    }
    const auto start = std::chrono::steady_clock::now();
    auto summary = runner(sc, out_dir + "/" + sc.name);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!summary.isOk()) r.error = summary.status().toString();
    else if (summary->contains("provenance")) r.provenance = (*summary)["provenance"];
    for (const Assertion& a : sc.assertions) {
      std::vector<CaseResult> cases;
      if (!r.error.empty()) {
        cases.push_back({a.text, false, true, "scenario did not run: " + r.error, r.seconds});
      } else {
        cases = evaluate(a, *summary, labels);
      }
      for (auto& c : cases) {
        ++out.cases;
        if (c.error) ++out.errors;
        else if (!c.passed) ++out.failures;
        if (progress)
          std::fprintf(progress, "  %s %s: %s\n", c.error ? "ERROR" : c.passed ? "PASS " : "FAIL ", c.name.c_str(),
                       c.message.c_str());
        r.cases.push_back(std::move(c));
      }
    }
    out.results.push_back(std::move(r));
  }
  return out;
}

}  // namespace chaosbed::suite
