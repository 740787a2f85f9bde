// What a run exposes on the network (issue #11, "loopback means loopback"), end to end with the real binary:
// - While experiments/scenarios/tiny-synthetic.yaml runs, every TCP and UDP socket of the controller and of
//   every process under it (nodes: UCX control mesh, UCX's tcp transport, store clients) is bound to a
//   loopback address; listeners are found in the controller and in every node, so the check can fail. The
//   live metrics endpoint answers a scrape in under 1 s while 20 idle connections are held open to it.
// - A non-loopback metrics address is refused (exit 2 for --metrics_addr, 3 for the spec's metrics.listen)
//   unless --metrics_allow_remote / metrics.allow_remote, and then accepted with a warning.
// Every wait is on a line the run prints, with a deadline.

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/metrics/prometheus_scrape.h"
#include "tests/integration/observability_test_util.h"
#include "tests/testing/sockets.h"
#include "transports/bootstrap/net.h"

namespace chaosbed {
namespace {

using namespace observability_test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const fs::path kScenario = repoRoot() / "experiments" / "scenarios" / "tiny-synthetic.yaml";

bool runnable(std::string* why) {
  if (!fs::exists(CHAOSBED_BINARY)) *why = std::string("no chaosbed binary at ") + CHAOSBED_BINARY;
  else if (!fs::exists(kScenario)) *why = "no scenario " + kScenario.string();
  else return true;
  return false;
}

std::vector<std::string> runArgs(const fs::path& out, std::vector<std::string> extra) {
  std::vector<std::string> args = {"stdbuf", "-oL", "-eL", CHAOSBED_BINARY, "run", kScenario.string(), "--out",
                                   out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// host:port from a "metrics: http://HOST:PORT/metrics" line.
std::string metricsAddress(const std::string& line) {
  const size_t start = line.find("http://") + 7;
  return line.substr(start, line.find("/metrics", start) - start);
}

// One look at every socket of the run's processes.
struct Snapshot {
  int chaosbed_processes = 0;       // the controller and the chaosbed processes under it
  int controller_listeners = 0;
  int nodes_with_listeners = 0;     // chaosbed processes under the controller with at least one listener
  int sockets = 0;
  std::vector<std::string> beyond_loopback;  // bound sockets whose address is not loopback
  std::string all;                           // every socket, for failure messages
};

Snapshot lookAtSockets(pid_t controller) {
  const std::string binary = fs::canonical(CHAOSBED_BINARY).string();
  Snapshot s;
  std::map<pid_t, int> listeners;
  const std::vector<pid_t> tree = testing::processTree(controller);
  for (pid_t pid : tree) s.chaosbed_processes += testing::executableOf(pid) == binary;
  for (const testing::IpSocket& sock : testing::ipSocketsOf(tree)) {
    ++s.sockets;
    s.all += "\n  " + sock.toString();
    if (sock.port != 0 && !sock.loopback) s.beyond_loopback.push_back(sock.toString());
    if (sock.listening) ++listeners[sock.pid];
  }
  s.controller_listeners = listeners[controller];
  for (const auto& [pid, n] : listeners)
    if (pid != controller && n > 0 && testing::executableOf(pid) == binary) ++s.nodes_with_listeners;
  return s;
}

TEST(NetworkExposure, EverySocketOfARunningExperimentIsLoopbackAndScrapesIgnoreIdleClients) {
  std::string why;
  ASSERT_TRUE(runnable(&why)) << why;  // the binary is built with the tests: missing is a failure, not a skip
  TempDir dir("exposure");
  // --metrics_await_scrape: each strategy waits, with every node ready and listening, until the endpoint is
  // scraped. The test looks at the sockets in that window, then scrapes to let the strategy start: no race with
  // a strategy that reaches its target (and stops its nodes) before any progress line.
  Child run(runArgs(dir.path() / "results", {"--metrics_addr", "127.0.0.1:0", "--metrics_await_scrape"}));
  ASSERT_TRUE(run.started());
  auto metrics_line = run.waitForLine("metrics: http://", deadlineIn(60s));
  ASSERT_TRUE(metrics_line) << run.output();
  const std::string addr = metricsAddress(*metrics_line);

  ASSERT_TRUE(run.waitForLine("waiting for a scrape of " + addr + " before mirrored starts", deadlineIn(60s)))
      << run.output();
  const Snapshot mirrored = lookAtSockets(run.pid());
  std::printf("[exposure] mirrored: %d chaosbed processes, %d sockets, controller listeners %d, nodes listening %d%s\n",
              mirrored.chaosbed_processes, mirrored.sockets, mirrored.controller_listeners,
              mirrored.nodes_with_listeners, mirrored.all.c_str());
  EXPECT_EQ(mirrored.beyond_loopback, std::vector<std::string>{}) << mirrored.all;
  EXPECT_GE(mirrored.controller_listeners, 2) << "the store and the metrics endpoint:" << mirrored.all;
  EXPECT_GE(mirrored.nodes_with_listeners, 3) << "2 workers and the evaluator:" << mirrored.all;

  // 20 idle connections to the live endpoint (half of them stopped mid-request), then a scrape (which also
  // lets mirrored start).
  auto hp = net::parseHostPort(addr);
  ASSERT_TRUE(hp.isOk()) << hp.status().toString();
  std::vector<net::FileDescriptor> idle;
  for (int i = 0; i < 20; ++i) {
    auto fd = net::connectTcp(*hp, deadlineIn(5s), false);
    ASSERT_TRUE(fd.isOk()) << fd.status().toString();
    if (i % 2) {
      const std::string partial = "GET /metrics HTTP/1.1\r\n";
      ASSERT_TRUE(net::writeAll(fd->get(), std::as_bytes(std::span(partial.data(), partial.size())), deadlineIn(5s)).isOk());
    }
    idle.push_back(std::move(*fd));
  }
  const auto t0 = SteadyClock::now();
  auto body = httpGet(addr, "/metrics", deadlineIn(10s));
  const double scrape_ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - t0).count();
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_NE(body->find("chaosbed_"), std::string::npos) << *body;
  std::printf("[exposure] scrape of the live run with 20 idle connections open: %.2f ms\n", scrape_ms);
  EXPECT_LT(scrape_ms, 1000);
  idle.clear();

  // The parameter-server strategy has a ps node too.
  ASSERT_TRUE(run.waitForLine("waiting for a scrape of " + addr + " before parameter_server starts", deadlineIn(120s)))
      << run.output();
  const Snapshot ps = lookAtSockets(run.pid());
  std::printf("[exposure] parameter_server: %d chaosbed processes, %d sockets, nodes listening %d\n",
              ps.chaosbed_processes, ps.sockets, ps.nodes_with_listeners);
  EXPECT_EQ(ps.beyond_loopback, std::vector<std::string>{}) << ps.all;
  EXPECT_GE(ps.nodes_with_listeners, 4) << "2 workers, the ps and the evaluator:" << ps.all;
  ASSERT_TRUE(httpGet(addr, "/metrics", deadlineIn(10s)).isOk());
  // The run exits once a scrape has taken its final values.
  ASSERT_TRUE(run.waitForLine("waiting for a scrape of " + addr + " of the final values", deadlineIn(120s)))
      << run.output();
  ASSERT_TRUE(httpGet(addr, "/metrics", deadlineIn(10s)).isOk());
  auto rc = run.waitExit(deadlineIn(120s));
  ASSERT_TRUE(rc.has_value()) << run.output();
  EXPECT_EQ(*rc, 0) << run.output();
}

TEST(NetworkExposure, ANonLoopbackMetricsAddressNeedsTheFlagAndWarns) {
  std::string why;
  ASSERT_TRUE(runnable(&why)) << why;  // the binary is built with the tests: missing is a failure, not a skip
  TempDir dir("exposure_flag");

  // Refused before anything runs: exit 2 (usage), no results directory.
  {
    Child run(runArgs(dir.path() / "refused", {"--metrics_addr", "0.0.0.0:0"}));
    auto rc = run.waitExit(deadlineIn(60s));
    ASSERT_TRUE(rc.has_value()) << run.output();
    EXPECT_EQ(*rc, 2) << run.output();
    EXPECT_NE(run.output().find("'0.0.0.0' is not a loopback address"), std::string::npos) << run.output();
    EXPECT_NE(run.output().find("--metrics_allow_remote"), std::string::npos) << run.output();
    EXPECT_FALSE(fs::exists(dir.path() / "refused")) << "the refused run created its results directory";
  }
  {
    Child run(runArgs(dir.path() / "malformed", {"--metrics_addr", "9464"}));
    auto rc = run.waitExit(deadlineIn(60s));
    ASSERT_TRUE(rc.has_value()) << run.output();
    EXPECT_EQ(*rc, 2) << run.output();
    EXPECT_NE(run.output().find("--metrics_addr: address '9464'"), std::string::npos) << run.output();
  }

  // Allowed: the endpoint binds the wildcard, says so on stderr, and serves. The sockets are looked at while
  // the first strategy waits for a scrape with every node up: while nodes are being launched, a child between
  // fork and exec still holds copies of the controller's sockets (closed at its exec).
  Child run(runArgs(dir.path() / "allowed", {"--metrics_addr", "0.0.0.0:0", "--metrics_allow_remote",
                                             "--metrics_await_scrape"}));
  auto metrics_line = run.waitForLine("metrics: http://", deadlineIn(60s));
  ASSERT_TRUE(metrics_line) << run.output();
  const std::string addr = metricsAddress(*metrics_line);
  ASSERT_TRUE(addr.starts_with("0.0.0.0:")) << addr;
  EXPECT_NE(run.output().find("warning: the metrics endpoint listens on " + addr + ", beyond loopback"),
            std::string::npos)
      << run.output();
  ASSERT_TRUE(run.waitForLine("waiting for a scrape of " + addr + " before mirrored starts", deadlineIn(60s)))
      << run.output();
  // Exactly the socket that was asked for is beyond loopback.
  const Snapshot s = lookAtSockets(run.pid());
  EXPECT_EQ(s.beyond_loopback, std::vector<std::string>{"pid " + std::to_string(run.pid()) + " tcp " + addr + " LISTEN"})
      << s.all;
  auto body = httpGet("127.0.0.1:" + addr.substr(8), "/metrics", deadlineIn(10s));
  EXPECT_TRUE(body.isOk()) << body.status().toString();
  auto rc = run.terminate(deadlineIn(60s));
  ASSERT_TRUE(rc.has_value()) << run.output();
  EXPECT_EQ(*rc, 143) << run.output();
}

TEST(NetworkExposure, ANonLoopbackListenInTheSpecNeedsAllowRemote) {
  std::string why;
  ASSERT_TRUE(runnable(&why)) << why;  // the binary is built with the tests: missing is a failure, not a skip
  TempDir dir("exposure_spec");
  std::string text = readFile(kScenario);
  const std::string loopback = "listen: 127.0.0.1:0";
  const size_t at = text.find(loopback);
  ASSERT_NE(at, std::string::npos) << "the scenario's metrics section changed";
  text.replace(at, loopback.size(), "listen: 0.0.0.0:0");
  const fs::path remote = dir.path() / "remote.yaml";
  std::ofstream(remote) << text;

  for (const char* command : {"validate", "run"}) {
    std::vector<std::string> args = {CHAOSBED_BINARY, command, remote.string()};
    if (std::string(command) == "run") args.insert(args.end(), {"--out", (dir.path() / "results").string()});
    Child c(args);
    auto rc = c.waitExit(deadlineIn(60s));
    ASSERT_TRUE(rc.has_value()) << c.output();
    EXPECT_EQ(*rc, 3) << command << ":\n" << c.output();
    EXPECT_NE(c.output().find("metrics.listen: '0.0.0.0' is not a loopback address"), std::string::npos)
        << command << ":\n" << c.output();
  }
  EXPECT_FALSE(fs::exists(dir.path() / "results"));

  text.replace(text.find("listen: 0.0.0.0:0"), 17, "listen: 0.0.0.0:0\n  allow_remote: true");
  const fs::path allowed = dir.path() / "allowed.yaml";
  std::ofstream(allowed) << text;
  Child c({CHAOSBED_BINARY, "validate", allowed.string()});
  auto rc = c.waitExit(deadlineIn(60s));
  ASSERT_TRUE(rc.has_value()) << c.output();
  EXPECT_EQ(*rc, 0) << c.output();
}

}  // namespace
}  // namespace chaosbed
