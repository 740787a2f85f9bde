// `chaosbed run SPEC [--out DIR]`: every strategy of the spec, one after the other, under the same drawn
// chaos schedule; live progress, a comparison table, and the results directory (experiments/run/results.h).

#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>

#include "chaos/controller.h"
#include "core/metrics/prometheus_http_server.h"
#include "experiments/cli/cli.h"
#include "experiments/run/experiment.h"
#include "transports/bootstrap/net.h"

DEFINE_string(set, "", "override one spec field, PATH=VALUE (cluster.workers=2, training.learning_rate=0.05); "
                       "repeatable, applied in order, checked as the spec is");
DEFINE_string(out, "", "results directory (default: <output.dir>/<experiment>/<UTC time>-<id>)");
DEFINE_string(secret_file, "", "use this run secret (64 hex digits in a 0600 file of this user, e.g. a mounted "
                               "Kubernetes Secret) instead of a fresh one; the host agents read the same path");
DEFINE_string(metrics_addr, "", "host:port of the Prometheus endpoint (default: the spec's metrics.listen; "
                                "port 0 picks a free port; 'off' disables it); loopback only unless "
                                "--metrics_allow_remote");
DEFINE_bool(metrics_await_scrape, false, "start each strategy only once a scrape has seen its series at zero, "
                                         "and exit only once a scrape has taken the final values (each wait at most "
                                         "20 s); so does the spec's metrics.await_scrape");
DEFINE_string(push_gateway, "", "push the final metrics to this Prometheus Pushgateway, [http://]host:port[/path], "
                                "with a 10 s deadline (instead of the spec's metrics.push_gateway)");
DEFINE_bool(metrics_allow_remote, false, "let the Prometheus endpoint bind beyond loopback (it has no "
                                         "authentication; a warning says so); so does the spec's metrics.allow_remote");

namespace chaosbed::cli {
namespace {

bool checkPushGatewayFlag(const char* command) {
  if (FLAGS_push_gateway.empty()) return true;
  if (std::string why = spec::pushGatewayProblem(FLAGS_push_gateway); !why.empty()) {
    std::fprintf(stderr, "chaosbed %s: --push_gateway: %s\n", command, why.c_str());
    return false;
  }
  return true;
}

}  // namespace

bool checkMetricsFlags(const char* command) {
  const std::string& addr = FLAGS_metrics_addr;
  if (addr.empty() || addr == "off") return checkPushGatewayFlag(command);
  std::string host;
  int port = 0;
  if (Status s = parseHostPort(addr, &host, &port); !s.isOk()) {
    std::fprintf(stderr, "chaosbed %s: --metrics_addr: %s\n", command, s.message().c_str());
    return false;
  }
  if (!FLAGS_metrics_allow_remote && !net::isLoopbackHost(host)) {
    std::fprintf(stderr,
                 "chaosbed %s: --metrics_addr %s: '%s' is not a loopback address (127.0.0.1, [::1], localhost); the "
                 "metrics endpoint has no authentication, so exposing it needs --metrics_allow_remote\n",
                 command, addr.c_str(), host.c_str());
    return false;
  }
  return checkPushGatewayFlag(command);
}

int runExperiment(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed run SPEC [--out DIR] [--set PATH=VALUE]...; `chaosbed run --help` lists the flags\n");
    return kExitUsage;
  }
  if (!checkMetricsFlags("run")) return kExitUsage;
  if (!FLAGS_out.empty())
    if (Status s = run::checkFreshOutDir(FLAGS_out); !s.isOk()) {
      std::fprintf(stderr, "chaosbed run: %s\n", s.message().c_str());
      return kExitUsage;
    }
  if (fileMissing("run", argv[1])) return kExitUsage;
  config::Diagnostics diagnostics;
  auto spec = spec::readExperimentSpec(argv[1], repeatedFlag("set"), &diagnostics);
  if (spec) spec::checkDataFiles(argv[1], *spec, &diagnostics);
  if (!spec || !diagnostics.empty()) {
    std::fputs(diagnostics.toString().c_str(), stderr);
    return kExitInvalidSpec;
  }
  std::atomic<bool> interrupted{false};
  auto watcher = chaos::StopSignalWatcher::start([&](int) { interrupted = true; });
  if (!watcher.isOk()) {
    std::fprintf(stderr, "chaosbed run: %s\n", watcher.status().message().c_str());
    return kExitInfrastructure;
  }
  run::ExperimentOptions options;
  options.out_dir = FLAGS_out;
  options.metrics_addr = FLAGS_metrics_addr;
  options.metrics_allow_remote = FLAGS_metrics_allow_remote;
  options.metrics_await_scrape = FLAGS_metrics_await_scrape;
  options.push_gateway = FLAGS_push_gateway;
  if (!FLAGS_secret_file.empty()) options.secret_file = std::filesystem::absolute(FLAGS_secret_file).string();
  options.interrupted = &interrupted;
  options.tty = isatty(STDOUT_FILENO);
  auto outcome = run::runExperiment(*spec, options);
  if (interrupted) return (*watcher)->received() == SIGTERM ? 143 : kExitInterrupted;
  if (!outcome.isOk()) {
    std::fprintf(stderr, "chaosbed run: %s: %s\n", argv[1], outcome.status().message().c_str());
    return outcome.status().code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  return kExitPass;
}

}  // namespace chaosbed::cli
