// metrics_bench: the cost of chaosbed's metrics, in the figures the observability issue sets targets for.
//   metrics_bench micro              node-side cost per training step (Accounting), the node's stats report,
//                                    the controller's update tick and a scrape of a 4-worker exporter
//   metrics_bench scrape ADDR SECS   scrapes http://ADDR/metrics for SECS seconds (e.g. during a run) and
//                                    prints scrape times and the run's mean step time from the scrape
// Built and run by bench/metrics_bench.sh; prints one "name: value" line per figure.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics/accounting.h"
#include "core/metrics/exporter.h"
#include "core/metrics/prometheus_scrape.h"

namespace {

using namespace chaosbed;
using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

template <class F>
double nsPerCall(int n, F&& f) {
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) f(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
}

void printTimes(const char* what, const std::vector<double>& ms) {
  std::printf("%s_ms: median %.3f p99 %.3f max %.3f (n=%zu)\n", what, percentile(ms, 0.5), percentile(ms, 0.99),
              percentile(ms, 1.0), ms.size());
}

int micro() {
  // What a worker does per step: time compute and transfer with Timers, then record the step.
  Accounting acct;
  const double step_ns = nsPerCall(1'000'000, [&](int i) {
    { Accounting::Timer t(acct, TimeCategory::kCompute); }
    { Accounting::Timer t(acct, TimeCategory::kTransfer); }
    acct.step(32, 0.001 * (i % 50));
    if (i % 7 == 0) acct.staleness(i % 5);
  });
  std::printf("node_accounting_per_step_ns: %.1f\n", step_ns);
  // The node's reporter: snapshot + JSON, twice a second.
  const double report_ns = nsPerCall(20'000, [&](int) {
    std::string s = acct.snapshot().toJson().dump();
    if (s.empty()) std::abort();
  });
  std::printf("node_stats_report_us: %.2f (twice a second: %.4f%% of one core)\n", report_ns / 1e3, 2 * report_ns / 1e9 * 100);

  auto e = MetricsExporter::create("127.0.0.1:0");
  if (!e.isOk()) {
    std::fprintf(stderr, "metrics_bench: %s\n", e.status().toString().c_str());
    return 1;
  }
  NodeStats stats = acct.snapshot();
  // One controller tick of a 4-worker, 1-server strategy (what strategy_run does twice a second).
  const double tick_ns = nsPerCall(100'000, [&](int i) {
    for (int w = 0; w < 4; ++w) (*e)->updateNode({"bench", "parameter_server", "worker", "worker-" + std::to_string(w)}, stats);
    (*e)->updateNode({"bench", "parameter_server", "ps", "ps-0"}, stats);
    (*e)->setNodesAlive("bench", "parameter_server", "worker", 4);
    (*e)->setNodesAlive("bench", "parameter_server", "ps", 1);
    for (const char* f : {"kill", "preempt", "pause", "slow", "link"}) (*e)->setFaultsActive("bench", "parameter_server", f, 0);
    (*e)->setFaultLeaks("bench", "parameter_server", 0);
    (*e)->setRunning("bench", "parameter_server", true, i);
  });
  std::printf("controller_update_tick_us: %.2f\n", tick_ns / 1e3);
  // Two strategies' worth of series, as after the first strategy of a run.
  for (int w = 0; w < 4; ++w) (*e)->updateNode({"bench", "mirrored", "worker", "worker-" + std::to_string(w)}, stats);
  (*e)->setAccuracy("bench", "mirrored", 0.9, 0.3);
  (*e)->setTimeToAccuracy("bench", "mirrored", 12);
  std::vector<double> ms;
  size_t bytes = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto t0 = Clock::now();
    auto body = httpGet((*e)->address(), "/metrics", Clock::now() + std::chrono::seconds(5));
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!body.isOk()) {
      std::fprintf(stderr, "metrics_bench: %s\n", body.status().toString().c_str());
      return 1;
    }
    bytes = body->size();
  }
  std::printf("exposition_bytes: %zu\n", bytes);
  printTimes("scrape_idle", ms);
  return 0;
}

int scrape(const std::string& addr, double secs) {
  std::vector<double> ms;
  double step_sum = 0, step_count = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(secs);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    auto body = httpGet(addr, "/metrics", Clock::now() + std::chrono::seconds(5));
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (body.isOk()) {
      ms.push_back(t);
      if (auto x = parseExposition(*body); x.isOk()) {
        // Mean step time of the workers: from the step histogram, else wall time accounted per step.
        double s = 0, c = 0;
        for (const auto& m : x->find("chaosbed_step_duration_seconds_sum", {{"role", "worker"}})) s += m.value;
        for (const auto& m : x->find("chaosbed_step_duration_seconds_count", {{"role", "worker"}})) c += m.value;
        if (c == 0) {
          for (const char* n : {"chaosbed_compute_seconds_total", "chaosbed_transfer_seconds_total", "chaosbed_idle_seconds_total"})
            for (const auto& m : x->find(n, {{"role", "worker"}})) s += m.value;
          for (const auto& m : x->find("chaosbed_steps_total", {{"role", "worker"}})) c += m.value;
        }
        if (c >= step_count) {
          step_sum = s;
          step_count = c;
        }
      }
    } else if (!ms.empty()) {
      break;  // the run ended
    }
    // Faster than a real scraper, for enough samples that p99 is not simply the maximum.
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  printTimes("scrape_during_run", ms);
  if (step_count > 0) std::printf("run_mean_step_ms: %.3f (over %.0f worker steps)\n", 1e3 * step_sum / step_count, step_count);
  return ms.empty() ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "micro") return micro();
  if (mode == "scrape" && argc == 4) return scrape(argv[2], std::atof(argv[3]));
  std::fprintf(stderr, "usage: metrics_bench micro | metrics_bench scrape HOST:PORT SECONDS\n");
  return 2;
}
