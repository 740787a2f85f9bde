// MetricsExporter::push against a real Prometheus Pushgateway (Debian's prometheus-pushgateway) on
// loopback: what was pushed is served back under job="chaosbed" and the experiment's grouping key, with
// exact values; a second push replaces the first; errors are values (bad address, nothing listening).

#include <gtest/gtest.h>

#include <string>

#include "core/metrics/exporter.h"
#include "core/metrics/prometheus_scrape.h"
#include "tests/integration/observability_test_util.h"

namespace chaosbed {
namespace {

using namespace observability_test;
using namespace std::chrono_literals;

std::string pushgatewayBinary() {
  for (const char* p : {"prometheus-pushgateway", "pushgateway"})
    if (haveTool(p)) return p;
  return "";
}

TEST(ObservabilityPush, PushesToARealPushgateway) {
  const std::string bin = pushgatewayBinary();
  if (bin.empty()) GTEST_SKIP() << "no Pushgateway installed (Debian package prometheus-pushgateway)";
  const int port = freePort();
  ASSERT_GT(port, 0);
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  Child gw({bin, "--web.listen-address=" + addr});
  ASSERT_TRUE(gw.started());
  ASSERT_TRUE(gw.waitForLine("Listening on", deadlineIn(30s))) << gw.output();

  auto e = MetricsExporter::create("127.0.0.1:0");
  ASSERT_TRUE(e.isOk()) << e.status().toString();
  NodeStats s;
  s.steps = 42;
  s.samples = 42 * 32;
  s.seconds[int(TimeCategory::kIdleServer)] = 1.25;
  (*e)->updateNode({"nightly", "parameter_server", "worker", "worker-0"}, s);
  (*e)->setTimeToAccuracy("nightly", "parameter_server", 17.5);
  ASSERT_TRUE((*e)->push("http://" + addr, "nightly", deadlineIn(10s)).isOk());

  auto body = httpGet(addr, "/metrics", deadlineIn(10s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  auto x = parseExposition(*body);
  ASSERT_TRUE(x.isOk()) << x.status().toString();
  const std::map<std::string, std::string> key{{"job", "chaosbed"}, {"experiment", "nightly"}, {"strategy", "parameter_server"}};
  EXPECT_EQ(x->value("chaosbed_time_to_accuracy_seconds", key).value(), 17.5);
  auto w0 = key;
  w0["node"] = "worker-0";
  EXPECT_EQ(x->value("chaosbed_steps_total", w0).value(), 42);
  w0["reason"] = "server";
  EXPECT_EQ(x->value("chaosbed_idle_seconds_total", w0).value(), 1.25);
  // The Pushgateway records a successful push per group.
  EXPECT_GT(x->value("push_time_seconds", {{"job", "chaosbed"}, {"experiment", "nightly"}}).value(), 0);

  // A later push of the same experiment replaces the group (PUT semantics), without a host prefix.
  s.steps = 50;
  (*e)->updateNode({"nightly", "parameter_server", "worker", "worker-0"}, s);
  ASSERT_TRUE((*e)->push(addr, "nightly", deadlineIn(10s)).isOk());
  body = httpGet(addr, "/metrics", deadlineIn(10s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  x = parseExposition(*body);
  ASSERT_TRUE(x.isOk());
  w0.erase("reason");
  EXPECT_EQ(x->value("chaosbed_steps_total", w0).value(), 50);
  EXPECT_TRUE(gw.terminate(deadlineIn(10s)).has_value());
}

TEST(ObservabilityPush, ErrorsAreValues) {
  auto e = MetricsExporter::create("127.0.0.1:0");
  ASSERT_TRUE(e.isOk()) << e.status().toString();
  Status bad = (*e)->push("http://no-port-here", "x", deadlineIn(10s));
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.toString();
  EXPECT_NE(bad.message().find("no-port-here"), std::string::npos) << bad.toString();
  const int port = freePort();  // nothing listens there
  Status refused = (*e)->push("127.0.0.1:" + std::to_string(port), "x", deadlineIn(10s));
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.toString();
  Status https = (*e)->push("https://127.0.0.1:9091", "x", deadlineIn(10s));
  EXPECT_EQ(https.code(), StatusCode::kInvalidArgument) << https.toString();
}

// A gateway that takes the connection and never answers (here: a listener that never accepts; the kernel
// completes the handshake) costs the deadline, not the run.
TEST(ObservabilityPush, ASilentGatewayIsATimeoutAtTheDeadline) {
  auto e = MetricsExporter::create("127.0.0.1:0");
  ASSERT_TRUE(e.isOk()) << e.status().toString();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const auto t0 = SteadyClock::now();
  Status silent = (*e)->push("127.0.0.1:" + std::to_string(ntohs(a.sin_port)), "x", deadlineIn(500ms));
  const auto took = SteadyClock::now() - t0;
  ::close(fd);
  // Timeout is what the deadline's expiry returns (no other path does); it must not be waited on much longer.
  EXPECT_EQ(silent.code(), StatusCode::kTimeout) << silent.toString();
  EXPECT_LT(took, 5s) << "the push outlived its deadline";
}

}  // namespace
}  // namespace chaosbed
