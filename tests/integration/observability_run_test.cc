// End to end: a real `chaosbed run` of experiments/scenarios/tiny-synthetic.yaml with its exporter on
// 127.0.0.1:0.
// - Scraped live during the run: `promtool check metrics` is clean, every chaosbed_* metric name used by the
//   dashboard and the rules is exported, scrapes are fast.
// - A real Prometheus server on loopback (with rules.yml loaded) scrapes the run; afterwards the TTA, idle
//   and recorded idle-fraction series are queried back through its HTTP API.

#include <gtest/gtest.h>

#include <cmath>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <ctime>
#include <functional>

#include "core/metrics/prometheus_scrape.h"
#include "tests/integration/observability_test_util.h"

namespace chaosbed {
namespace {

using namespace observability_test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kScenario = repoRoot() / "experiments" / "scenarios" / "tiny-synthetic.yaml";

// Every chaosbed_* name used by a dashboard query or a rule expression.
std::set<std::string> namesUsedByDashboardsAndRules() {
  std::set<std::string> names;
  const json d = json::parse(readFile(dashboardsDir() / "grafana" / "chaosbed.json"));
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if ((it.key() == "expr" || it.key() == "definition") && it.value().is_string())
          names.merge(metricNames(it.value().get<std::string>()));
        walk(it.value());
      }
    } else if (j.is_array()) {
      for (const json& e : j) walk(e);
    }
  };
  walk(d);
  const YAML::Node rules = YAML::LoadFile((dashboardsDir() / "prometheus" / "rules.yml").string());
  for (const auto& g : rules["groups"])
    for (const auto& r : g["rules"]) names.merge(metricNames(r["expr"].as<std::string>()));
  return names;
}

// `chaosbed run` of the tiny scenario; stdout is line-buffered (stdbuf) so the "metrics:" line arrives at once.
class ChaosbedRun {
 public:
  explicit ChaosbedRun(const fs::path& out, const std::string& metrics_addr = "127.0.0.1:0",
                       const std::vector<std::string>& extra = {})
      : child_(command(out, metrics_addr, extra)) {}
  // The exporter's host:port from the "metrics: http://HOST:PORT/metrics" line.
  std::string waitForAddress() {
    auto line = child_.waitForLine("metrics: http://", deadlineIn(60s));
    if (!line) return "";
    const size_t start = line->find("http://") + 7;
    return line->substr(start, line->find("/metrics", start) - start);
  }
  Child& child() { return child_; }

 private:
  static std::vector<std::string> command(const fs::path& out, const std::string& metrics_addr,
                                          const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {"stdbuf", "-oL", "-eL", CHAOSBED_BINARY, "run", kScenario.string(), "--out",
                                     out.string(), "--metrics_addr", metrics_addr};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  Child child_;
};

bool runnable(std::string* why) {
  if (!fs::exists(CHAOSBED_BINARY)) *why = std::string("no chaosbed binary at ") + CHAOSBED_BINARY;
  else if (!fs::exists(kScenario)) *why = "no scenario " + kScenario.string();
  else if (!haveTool("promtool")) *why = "promtool not installed (Debian package prometheus)";
  else return true;
  return false;
}

TEST(ObservabilityRun, LiveScrapeIsCleanAndCoversDashboardsAndRules) {
  std::string why;
  if (!runnable(&why)) GTEST_SKIP() << why;
  TempDir out("obs_run");
  ChaosbedRun run(out.path() / "results");
  const std::string addr = run.waitForAddress();
  ASSERT_FALSE(addr.empty()) << "no metrics line from chaosbed run:\n" << run.child().output();

  std::set<std::string> exported;
  std::string richest;  // the scrape with the most samples, for promtool
  size_t richest_samples = 0;
  int scrapes = 0;
  double max_ms = 0;
  // Scrape at every line of progress the run prints, and at least every 200 ms, until it exits.
  while (!run.child().eof()) {
    run.child().readLine(deadlineIn(200ms));
    const auto t0 = SteadyClock::now();
    auto body = httpGet(addr, "/metrics", deadlineIn(5s));
    const double ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
    if (!body.isOk()) continue;  // the run has just finished and closed its endpoint
    ++scrapes;
    max_ms = std::max(max_ms, ms);
    auto x = parseExposition(*body);
    ASSERT_TRUE(x.isOk()) << x.status().toString() << "\n" << *body;
    for (const auto& s : x->samples) exported.insert(s.name);
    for (const auto& [family, type] : x->types) exported.insert(family);
    if (x->samples.size() >= richest_samples) {
      richest_samples = x->samples.size();
      richest = *body;
    }
  }
  auto rc = run.child().waitExit(deadlineIn(60s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0) << run.child().output();
  ASSERT_GT(scrapes, 5) << run.child().output();
  std::printf("[observability] %d live scrapes, slowest %.2f ms, richest %zu samples\n", scrapes, max_ms, richest_samples);
  EXPECT_LT(max_ms, 1000) << "a scrape should take milliseconds (bench/metrics_bench.sh measures it)";

  const fs::path file = out.path() / "scrape.txt";
  std::ofstream(file) << richest;
  auto lint = runCommand("promtool check metrics < " + file.string());
  EXPECT_EQ(lint.rc, 0) << lint.output;
  EXPECT_EQ(lint.output, "") << "promtool lint findings";

  const auto used = namesUsedByDashboardsAndRules();
  ASSERT_GE(used.size(), 15u);
  for (const auto& name : used) EXPECT_TRUE(exported.count(name)) << name << " is used by dashboards/ but the run never exported it";
}

// A query string's value, percent-encoded.
std::string urlEncode(const std::string& q) {
  std::string enc;
  for (unsigned char c : q) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') enc += char(c);
    else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      enc += buf;
    }
  }
  return enc;
}

// Instant query through Prometheus's HTTP API; the result vector.
json promQuery(const std::string& prom, const std::string& q) {
  auto body = httpGet(prom, "/api/v1/query?query=" + urlEncode(q), deadlineIn(10s));
  if (!body.isOk()) return json::array();
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return json::array();
  return j["data"]["result"];
}

double sampleValue(const json& r) { return std::stod(r["value"][1].get<std::string>()); }

// Range query, [start, end] every `step` seconds; the result matrix, or null when the query failed.
json promRange(const std::string& prom, const std::string& q, double start, double end, double step) {
  char window[128];
  std::snprintf(window, sizeof window, "&start=%.3f&end=%.3f&step=%.3f", start, end, step);
  auto body = httpGet(prom, "/api/v1/query_range?query=" + urlEncode(q) + window, deadlineIn(10s));
  if (!body.isOk()) return nullptr;
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return nullptr;
  return j["data"]["result"];
}

// `data` of a Prometheus API GET (/api/v1/targets, /api/v1/rules), or null.
json promApi(const std::string& prom, const std::string& path) {
  auto body = httpGet(prom, path, deadlineIn(10s));
  if (!body.isOk()) return nullptr;
  json j = json::parse(*body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") return nullptr;
  return j["data"];
}

// Seconds since the epoch of an RFC 3339 time as Prometheus writes it ("2026-12-01T07:30:01.123456789Z");
// NaN for anything else (its "never" is year 1, which also compares as earlier than any real time).
double rfc3339Seconds(const std::string& text) {
  std::tm tm{};
  const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) return std::nan("");
  double seconds = double(timegm(&tm));
  if (*rest == '.') {
    char* end = nullptr;
    seconds += std::strtod(rest, &end);
    rest = end;
  }
  return std::string(rest) == "Z" ? seconds : std::nan("");
}

// Polls Prometheus's API (its own state, not a clock) until `ready` holds or the deadline passes.
bool awaitProm(const std::function<bool()>& ready, Deadline deadline) {
  while (!ready()) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// The shipped prometheus.yml, unchanged but for where it looks (a directory of this test's own, so that other
// runs on the machine stay out of it) and how often: it finds the run through the target file the run
// announces (file_sd), on a port the run picked itself.
TEST(ObservabilityRun, RealPrometheusScrapesARun) {
  std::string why;
  if (!runnable(&why)) GTEST_SKIP() << why;
  if (!haveTool("prometheus")) GTEST_SKIP() << "prometheus not installed (Debian package prometheus)";
  TempDir dir("obs_prom");
  const int port = freePort();
  ASSERT_GT(port, 0);
  // Made before Prometheus starts, so that it watches the directory (inotify) rather than re-reading it.
  const fs::path targets = dir.path() / "targets";
  fs::create_directory(targets);
  fs::permissions(targets, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);

  YAML::Node config = YAML::LoadFile((dashboardsDir() / "prometheus" / "prometheus.yml").string());
  // Often enough to see the 2 s pause several times, with a timeout (at most the interval) that a scrape
  // still meets when the test shares the two cores with a run of its own and another test's.
  config["global"]["scrape_interval"] = "500ms";
  config["global"]["evaluation_interval"] = "1s";
  config["rule_files"] = YAML::Load("[" + (dashboardsDir() / "prometheus" / "rules.yml").string() + "]");
  bool found_job = false;
  for (YAML::Node job : config["scrape_configs"])
    if (job["job_name"].as<std::string>() == "chaosbed") {
      ASSERT_TRUE(job["file_sd_configs"]) << "the shipped chaosbed job does not discover runs from their target files";
      job["file_sd_configs"][0]["files"][0] = (targets / "*.json").string();
      found_job = true;
    }
  ASSERT_TRUE(found_job);
  const fs::path config_file = dir.path() / "prometheus.yml";
  {
    YAML::Emitter e;
    e << config;
    std::ofstream(config_file) << e.c_str();
  }
  const std::string prom = "127.0.0.1:" + std::to_string(port);
  Child server({"prometheus", "--config.file=" + config_file.string(), "--storage.tsdb.path=" + (dir.path() / "tsdb").string(),
                "--web.listen-address=" + prom});
  ASSERT_TRUE(server.waitForLine("Server is ready to receive web requests", deadlineIn(60s))) << server.output();

  // --metrics_await_scrape: each strategy trains only once Prometheus has scraped its series at zero, and the
  // run exits only once it has scraped the final values. This run is shorter than discovery's delay (its
  // updates reach the scrape manager every 5 s): without it, a strategy could finish before the first scrape.
  const double launched_at = double(std::time(nullptr)) - 1;
  ChaosbedRun run(dir.path() / "results", "127.0.0.1:0",
                  {"--metrics_await_scrape", "--set", "metrics.targets_dir=" + targets.string()});
  const std::string addr = run.waitForAddress();
  ASSERT_FALSE(addr.empty()) << "no metrics line from chaosbed run:\n" << run.child().output();
  auto rc = run.child().waitExit(deadlineIn(120s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0) << run.child().output();
  const double exited_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_TRUE(fs::is_empty(targets)) << "the run left its target file behind";

  // The final values were scraped before the run exited; the recording rules have seen them once a rule
  // evaluation started after the exit.
  ASSERT_TRUE(awaitProm([&] {
    const json data = promApi(prom, "/api/v1/rules");
    if (!data.is_object()) return false;
    for (const json& g : data.value("groups", json::array()))
      if (g.value("name", "") == "chaosbed.recording") return rfc3339Seconds(g.value("lastEvaluation", "")) > exited_at + 1;
    return false;
  }, deadlineIn(30s))) << "the recording rules were not evaluated after the run ended";

  // The run's identity: from the target file (run_id, seed on every series) and from the info metrics.
  const json summary = json::parse(readFile(dir.path() / "results" / "summary.json"));
  const json& provenance = summary["provenance"];
  const json build = promQuery(prom, "last_over_time(chaosbed_build_info{job=\"chaosbed\"}[10m])");
  ASSERT_EQ(build.size(), 1u) << build.dump();
  EXPECT_EQ(build[0]["metric"]["revision"].get<std::string>(),
            provenance["commit"].get<std::string>() + (provenance["dirty"].get<bool>() ? "-dirty" : ""));
  const json run_info = promQuery(prom, "last_over_time(chaosbed_run_info{job=\"chaosbed\"}[10m])");
  ASSERT_EQ(run_info.size(), 1u) << run_info.dump();
  EXPECT_EQ(run_info[0]["metric"]["spec_sha256"].get<std::string>(), provenance["spec_sha256"].get<std::string>());
  const std::string run_id = run_info[0]["metric"]["run_id"].get<std::string>();
  EXPECT_EQ(run_info[0]["metric"]["seed"].get<std::string>(), "7");
  const json steps = promQuery(prom, "last_over_time(chaosbed_steps_total{job=\"chaosbed\"}[10m])");
  ASSERT_GE(steps.size(), 1u);
  for (const json& r : steps) EXPECT_EQ(r["metric"].value("run_id", ""), run_id) << r.dump();

  // Ended means ended: no strategy still running, and no fault still active, although the pause was seen.
  const json running = promQuery(prom, "last_over_time(chaosbed_run_running{job=\"chaosbed\"}[10m])");
  ASSERT_EQ(running.size(), 2u) << running.dump();
  for (const json& r : running) EXPECT_EQ(sampleValue(r), 0) << r.dump();
  const json active = promQuery(prom, "last_over_time(chaosbed_fault_active{job=\"chaosbed\"}[10m])");
  ASSERT_GE(active.size(), 1u) << active.dump();
  for (const json& r : active) EXPECT_EQ(sampleValue(r), 0) << "a fault still active after the run: " << r.dump();
  const json paused = promQuery(prom, "max(max_over_time(chaosbed_fault_active{job=\"chaosbed\",fault=\"pause\"}[10m]))");
  ASSERT_EQ(paused.size(), 1u) << paused.dump();
  EXPECT_EQ(sampleValue(paused[0]), 1) << "Prometheus never saw the 2 s pause as active";

  // The target is gone now, so its series are stale: look back over the run.
  const json up = promQuery(prom, "max_over_time(up{job=\"chaosbed\"}[10m])");
  ASSERT_EQ(up.size(), 1u) << up.dump();
  EXPECT_EQ(sampleValue(up[0]), 1) << "Prometheus never scraped the run successfully";

  const json tta = promQuery(prom, "last_over_time(chaosbed_time_to_accuracy_seconds{experiment=\"tiny-synthetic\"}[10m])");
  ASSERT_GE(tta.size(), 1u) << "no strategy reached the target (or TTA not exported): " << tta.dump() << "\n"
                            << run.child().output();
  for (const json& r : tta) {
    EXPECT_GT(sampleValue(r), 0) << r.dump();
    EXPECT_LT(sampleValue(r), 120) << r.dump();
  }
  std::printf("[observability] TTA from Prometheus: %s\n", tta.dump().c_str());

  const json idle = promQuery(prom, "sum by (strategy, reason) (last_over_time(chaosbed_idle_seconds_total[10m]))");
  std::set<std::string> reasons;
  for (const json& r : idle) reasons.insert(r["metric"]["reason"].get<std::string>());
  EXPECT_EQ(reasons, (std::set<std::string>{"peer", "server", "recovery"})) << idle.dump();
  double total_idle = 0;
  for (const json& r : idle) total_idle += sampleValue(r);
  EXPECT_GT(total_idle, 0) << "a 2 s worker pause must make someone wait: " << idle.dump();
  std::printf("[observability] idle seconds from Prometheus: %s\n", idle.dump().c_str());

  // Every dashboard panel against the real series, as Grafana would ask after the run: time-series panels
  // over the run's window, and stat and bar-gauge panels at an instant after the run ended (the run's series
  // are stale by then, so only the last value of the dashboard's range can show).
  for (const DashboardQuery& q : dashboardQueries(json::parse(readFile(dashboardsDir() / "grafana" / "chaosbed.json")))) {
    if (q.where.starts_with("variable")) continue;
    const std::string expr = substituteVariables(q.expr, "tiny-synthetic", "10m");
    if (q.instant) {
      EXPECT_GE(promQuery(prom, expr).size(), 1u) << q.where << " is blank after the run: " << expr;
    } else {
      const json m = promRange(prom, expr, launched_at, exited_at + 1, 1);
      ASSERT_FALSE(m.is_null()) << q.where << ": the query failed: " << expr;
      EXPECT_GE(m.size(), 1u) << q.where << " has no data over the run: " << expr;
    }
  }

  // The recording rules ran on the real series. A run of a few seconds gives rate() windows with no change
  // (0/0 = NaN) for some series; the finite ones must be sane and some must show progress.
  const json frac = promQuery(prom, "max_over_time(chaosbed:idle_fraction:ratio_rate1m[10m])");
  ASSERT_GE(frac.size(), 1u) << frac.dump();
  for (const json& r : frac) {
    const double v = sampleValue(r);
    if (std::isnan(v)) continue;
    EXPECT_GE(v, 0) << r.dump();
    EXPECT_LE(v, 1) << r.dump();
  }
  // Every strategy's goodput: its counters were scraped at zero before its first step.
  const json goodput = promQuery(prom, "max_over_time(chaosbed:goodput_samples:rate1m[10m])");
  std::set<std::string> with_goodput;
  for (const json& r : goodput)
    if (sampleValue(r) > 0) with_goodput.insert(r["metric"]["strategy"].get<std::string>());
  EXPECT_EQ(with_goodput, (std::set<std::string>{"mirrored", "parameter_server"})) << goodput.dump();
  std::printf("[observability] goodput from Prometheus: %s\n", goodput.dump().c_str());
  EXPECT_TRUE(server.terminate(deadlineIn(30s)).has_value());
}

}  // namespace
}  // namespace chaosbed
