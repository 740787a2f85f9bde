// MetricsExporter: served over real HTTP on 127.0.0.1:0 and read back with a plain GET: names, types,
// labels and exact cumulative values; histograms from cumulative buckets; a killed node's counters survive
// later updates of others; bad listen addresses are rejected by name; `promtool check metrics` is clean on
// the scrape. Also the exposition parser and the HTTP client's error paths.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/metrics/exporter.h"
#include "core/metrics/prometheus_scrape.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

NodeStats workerStats(int64_t steps) {
  NodeStats s;
  s.seconds[int(TimeCategory::kCompute)] = 1.5;
  s.seconds[int(TimeCategory::kTransfer)] = 0.25;
  s.seconds[int(TimeCategory::kIdlePeer)] = 0.5;
  s.seconds[int(TimeCategory::kIdleServer)] = 0;
  s.seconds[int(TimeCategory::kIdleRecovery)] = 2.0;
  s.steps = steps;
  s.samples = steps * 32;
  s.samples_lost = 64;
  s.checkpoints_written = 3;
  s.checkpoint_failures = 1;
  s.recoveries = 1;
  s.step_seconds.observe(0.004);
  s.step_seconds.observe(0.02);
  s.step_seconds.observe(0.02);
  s.staleness.observe(0);
  s.staleness.observe(3);
  s.recovery_seconds.observe(1.2);
  return s;
}

Exposition scrape(const MetricsExporter& e) {
  auto body = httpGet(e.address(), "/metrics", deadlineIn(5s));
  EXPECT_TRUE(body.isOk()) << body.status().toString();
  if (!body.isOk()) return {};
  auto parsed = parseExposition(*body);
  EXPECT_TRUE(parsed.isOk()) << parsed.status().toString();
  return parsed.isOk() ? *parsed : Exposition{};
}

std::unique_ptr<MetricsExporter> makeExporter() {
  auto e = MetricsExporter::create("127.0.0.1:0");
  EXPECT_TRUE(e.isOk()) << e.status().toString();
  return e.isOk() ? std::move(*e) : nullptr;
}

TEST(MetricsExporter, BindsAFreePortOnLoopback) {
  auto e = makeExporter();
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->address().starts_with("127.0.0.1:")) << e->address();
  EXPECT_NE(e->address(), "127.0.0.1:0");
  // Nothing reported yet: the endpoint answers with an empty but valid exposition.
  auto body = httpGet(e->address(), "/metrics", deadlineIn(5s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_TRUE(parseExposition(*body).isOk());
}

TEST(MetricsExporter, RejectsBadListenAddressesByName) {
  for (const char* bad : {"9464", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ":9464"}) {
    auto e = MetricsExporter::create(bad);
    ASSERT_FALSE(e.isOk()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(e.status().message().find(bad), std::string::npos) << e.status().message();
  }
}

TEST(MetricsExporter, PortInUseIsUnavailableNotACrash) {
  auto first = makeExporter();
  ASSERT_TRUE(first);
  auto second = MetricsExporter::create(first->address());
  ASSERT_FALSE(second.isOk());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(first->address()), std::string::npos) << second.status().message();
}

TEST(MetricsExporter, ExportsNodeCountersExactlyWithLabels) {
  auto e = makeExporter();
  ASSERT_TRUE(e);
  e->updateNode({"exp", "mirrored", "worker", "worker-0"}, workerStats(100));
  const Exposition x = scrape(*e);
  const std::map<std::string, std::string> w0{
      {"experiment", "exp"}, {"strategy", "mirrored"}, {"role", "worker"}, {"node", "worker-0"}};
  EXPECT_EQ(x.value("chaosbed_steps_total", w0).value(), 100);
  EXPECT_EQ(x.value("chaosbed_samples_total", w0).value(), 3200);
  EXPECT_EQ(x.value("chaosbed_samples_lost_total", w0).value(), 64);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_compute_seconds_total", w0).value(), 1.5);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_transfer_seconds_total", w0).value(), 0.25);
  auto with = [&](std::string k, std::string v) {
    auto m = w0;
    m[k] = v;
    return m;
  };
  EXPECT_DOUBLE_EQ(x.value("chaosbed_idle_seconds_total", with("reason", "peer")).value(), 0.5);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_idle_seconds_total", with("reason", "server")).value(), 0);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_idle_seconds_total", with("reason", "recovery")).value(), 2.0);
  EXPECT_EQ(x.find("chaosbed_idle_seconds_total").size(), 3u);
  EXPECT_EQ(x.value("chaosbed_checkpoint_writes_total", w0).value(), 3);
  EXPECT_EQ(x.value("chaosbed_checkpoint_failures_total", w0).value(), 1);
  EXPECT_EQ(x.value("chaosbed_node_recoveries_total", w0).value(), 1);
  EXPECT_EQ(x.types.at("chaosbed_steps_total"), "counter");
  EXPECT_EQ(x.types.at("chaosbed_step_duration_seconds"), "histogram");

  // Histogram: cumulative buckets, +Inf = count, sum.
  EXPECT_EQ(x.value("chaosbed_step_duration_seconds_bucket", with("le", "0.0025")).value(), 0);
  EXPECT_EQ(x.value("chaosbed_step_duration_seconds_bucket", with("le", "0.005")).value(), 1);
  EXPECT_EQ(x.value("chaosbed_step_duration_seconds_bucket", with("le", "0.025")).value(), 3);
  EXPECT_EQ(x.value("chaosbed_step_duration_seconds_bucket", with("le", "+Inf")).value(), 3);
  EXPECT_EQ(x.value("chaosbed_step_duration_seconds_count", w0).value(), 3);
  EXPECT_NEAR(x.value("chaosbed_step_duration_seconds_sum", w0).value(), 0.044, 1e-12);
  EXPECT_EQ(x.value("chaosbed_staleness_updates_bucket", with("le", "0")).value(), 1);
  EXPECT_EQ(x.value("chaosbed_staleness_updates_bucket", with("le", "4")).value(), 2);
  EXPECT_EQ(x.value("chaosbed_node_recovery_duration_seconds_count", w0).value(), 1);

  // Only the allowed label names appear anywhere.
  for (const MetricSample& s : x.samples)
    for (const auto& [k, v] : s.labels)
      EXPECT_TRUE(k == "experiment" || k == "strategy" || k == "role" || k == "node" || k == "reason" ||
                  k == "fault" || k == "le")
          << s.name << " has label " << k;
}

TEST(MetricsExporter, UpdatesReplaceSnapshotsAndDeadNodesSurvive) {
  auto e = makeExporter();
  ASSERT_TRUE(e);
  e->updateNode({"exp", "ps", "worker", "worker-0"}, workerStats(10));
  e->updateNode({"exp", "ps", "worker", "worker-1"}, workerStats(20));
  // worker-1 is killed: the controller stops updating it; worker-0 keeps going.
  e->updateNode({"exp", "ps", "worker", "worker-0"}, workerStats(50));
  const Exposition x = scrape(*e);
  EXPECT_EQ(x.value("chaosbed_steps_total", {{"node", "worker-0"}}).value(), 50);
  EXPECT_EQ(x.value("chaosbed_steps_total", {{"node", "worker-1"}}).value(), 20);
  EXPECT_EQ(x.find("chaosbed_steps_total").size(), 2u);
}

TEST(MetricsExporter, ExportsStrategyGaugesFaultsAndRecovery) {
  auto e = makeExporter();
  ASSERT_TRUE(e);
  const std::map<std::string, std::string> s{{"experiment", "exp"}, {"strategy", "parameter_server"}};
  auto with = [&](std::string k, std::string v) {
    auto m = s;
    m[k] = v;
    return m;
  };
  e->setAccuracy("exp", "parameter_server", 0.75, 0.6);
  e->setRunning("exp", "parameter_server", true, 12.5);
  e->setNodesAlive("exp", "parameter_server", "worker", 3);
  e->setNodesAlive("exp", "parameter_server", "ps", 1);
  e->setFaultsActive("exp", "parameter_server", "kill", 0);
  e->setFaultsActive("exp", "parameter_server", "pause", 1);
  e->faultInjected("exp", "parameter_server", "pause");
  e->faultInjected("exp", "parameter_server", "pause");
  e->setFaultLeaks("exp", "parameter_server", 0);
  e->recovery("exp", "parameter_server", 0.3);

  Exposition x = scrape(*e);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_test_accuracy", s).value(), 0.75);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_test_loss", s).value(), 0.6);
  EXPECT_FALSE(x.value("chaosbed_time_to_accuracy_seconds", s).isOk()) << "TTA before it is reached";
  EXPECT_EQ(x.value("chaosbed_run_running", s).value(), 1);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_run_elapsed_seconds", s).value(), 12.5);
  EXPECT_EQ(x.value("chaosbed_nodes_alive", with("role", "worker")).value(), 3);
  EXPECT_EQ(x.value("chaosbed_nodes_alive", with("role", "ps")).value(), 1);
  EXPECT_EQ(x.value("chaosbed_chaos_faults_injected_total", with("fault", "pause")).value(), 2);
  EXPECT_EQ(x.value("chaosbed_chaos_faults_injected_total", with("fault", "kill")).value(), 0)
      << "every fault kind the controller reports has a counter from 0";
  EXPECT_EQ(x.value("chaosbed_fault_active", with("fault", "pause")).value(), 1);
  EXPECT_EQ(x.value("chaosbed_chaos_fault_leaks", s).value(), 0);
  EXPECT_EQ(x.value("chaosbed_recovery_duration_seconds_bucket", with("le", "0.25")).value(), 0);
  EXPECT_EQ(x.value("chaosbed_recovery_duration_seconds_bucket", with("le", "0.5")).value(), 1);
  EXPECT_EQ(x.value("chaosbed_recovery_duration_seconds_count", s).value(), 1);

  e->setTimeToAccuracy("exp", "parameter_server", 8.25);
  e->setRunning("exp", "parameter_server", false, 14);
  x = scrape(*e);
  EXPECT_DOUBLE_EQ(x.value("chaosbed_time_to_accuracy_seconds", s).value(), 8.25);
  EXPECT_EQ(x.value("chaosbed_run_running", s).value(), 0);
}

TEST(MetricsExporter, LabelValuesAreEscaped) {
  auto e = makeExporter();
  ASSERT_TRUE(e);
  e->setAccuracy("odd \"name\"\\x", "s", 0.5, 1);
  const Exposition x = scrape(*e);
  EXPECT_EQ(x.value("chaosbed_test_accuracy", {{"experiment", "odd \"name\"\\x"}}).value(), 0.5);
}

TEST(MetricsExporter, PromtoolCheckMetricsIsClean) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  auto e = makeExporter();
  ASSERT_TRUE(e);
  e->updateNode({"exp", "mirrored", "worker", "worker-0"}, workerStats(100));
  e->updateNode({"exp", "mirrored", "ps", "ps-0"}, NodeStats{});
  e->setAccuracy("exp", "mirrored", 0.9, 0.3);
  e->setTimeToAccuracy("exp", "mirrored", 4);
  e->setNodesAlive("exp", "mirrored", "worker", 1);
  e->setFaultsActive("exp", "mirrored", "kill", 0);
  e->faultInjected("exp", "mirrored", "kill");
  e->setFaultLeaks("exp", "mirrored", 0);
  e->recovery("exp", "mirrored", 2);
  e->setRunning("exp", "mirrored", true, 5);
  auto body = httpGet(e->address(), "/metrics", deadlineIn(5s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  const auto dir = std::filesystem::temp_directory_path() / ("chaosbed_metrics_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / "scrape.txt", out = dir / "promtool.txt";
  std::ofstream(in) << *body;
  const std::string cmd = "promtool check metrics < " + in.string() + " > " + out.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  const std::string report((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << report;
  EXPECT_EQ(report, "") << "promtool lint findings";
}

TEST(MetricsScrape, ParsesTheTextFormat) {
  auto x = parseExposition(
      "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"1\",y=\"q\\\"\\n\"} 3 1700000000\nb 1e-3\nc{} +Inf\n");
  ASSERT_TRUE(x.isOk()) << x.status().toString();
  EXPECT_EQ(x->types.at("a_total"), "counter");
  EXPECT_EQ(x->value("a_total", {{"x", "1"}}).value(), 3);
  EXPECT_EQ(x->find("a_total").front().labels.at("y"), "q\"\n");
  EXPECT_DOUBLE_EQ(x->value("b").value(), 0.001);
  EXPECT_TRUE(std::isinf(x->value("c").value()));
  EXPECT_EQ(x->value("missing").status().code(), StatusCode::kNotFound);
}

TEST(MetricsScrape, ParseErrorsNameTheLine) {
  auto x = parseExposition("ok 1\nbad{x=1} 2\n");
  ASSERT_FALSE(x.isOk());
  EXPECT_NE(x.status().message().find("line 2"), std::string::npos) << x.status().message();
  x = parseExposition("ok 1\nv notanumber\n");
  ASSERT_FALSE(x.isOk());
  EXPECT_NE(x.status().message().find("line 2"), std::string::npos) << x.status().message();
}

TEST(MetricsScrape, HttpGetErrors) {
  EXPECT_EQ(httpGet("nohostport", "/", deadlineIn(1s)).status().code(), StatusCode::kInvalidArgument);
  auto e = makeExporter();
  ASSERT_TRUE(e);
  const std::string addr = e->address();
  auto missing = httpGet(addr, "/nothing-here", deadlineIn(5s));
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError) << missing.status().toString();
  e.reset();  // nothing listens there any more
  auto refused = httpGet(addr, "/metrics", deadlineIn(5s));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().toString();
}

}  // namespace
}  // namespace chaosbed
