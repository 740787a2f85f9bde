// `chaosbed chaos ...`: the chaos controller's subcommands.
//   chaos plan SPEC [--seed N] [--json]   draw the spec's fault schedule and print it; runs nothing
//   chaos bench [--bench_faults N] [--bench_gap_ms G] [--bench_json FILE]
//                                         fidelity: injection delay over N faults, slow accuracy, pause
//   chaos heal                            heal what dead runs left on this host (chaos/host_state.h)
//   chaos agent --state DIR               (hidden) the healer started by the controller; see chaos/state.h

#include <gflags/gflags.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/base/files.h"
#include "chaos/controller.h"
#include "chaos/host_state.h"
#include "chaos/local_cluster.h"
#include "chaos/schedule/schedule.h"
#include "chaos/model/spec.h"
#include "chaos/state.h"
#include "core/config/config.h"
#include "experiments/cli/cli.h"
#include "experiments/run/prometheus_targets.h"

DEFINE_int64(seed, -1, "the seed (default: the spec's seed for chaos plan, a fixed seed for train)");
DEFINE_bool(json, false, "print JSON (one object per line) instead of a table");
DEFINE_string(state, "", "the chaos controller's state directory");
DEFINE_int32(control_fd, -1, "read end of the controller's pipe (EOF = controller gone)");
DEFINE_double(agent_lease_timeout_s, 3.0, "heal when the controller's lease is older than this");
DEFINE_int32(bench_faults, 1000, "number of faults for the injection-delay measurement");
DEFINE_double(bench_gap_ms, 5.0, "planned gap between faults, milliseconds");
DEFINE_string(bench_json, "", "also write the figures to this JSON file");

namespace chaosbed::cli {
namespace {

using chaos::ChaosSpec;
using chaos::NodeInfo;

int usage() {
  std::fprintf(stderr,
               "usage: chaosbed chaos plan SPEC [--seed N] [--json]\n"
               "       chaosbed chaos bench [--bench_faults N] [--bench_gap_ms G] [--bench_json FILE]\n"
               "       chaosbed chaos heal   (thaw, unthrottle and remove what dead runs left on this host)\n");
  return kExitUsage;
}

// Reads the parts of a spec that a plan needs (seed, cluster shape, time limit, chaos section) with the
// config reader directly, so that `chaos plan` does not depend on the full experiment parser.
int planCommand(const std::string& path) {
  if (fileMissing("chaos plan", path)) return kExitUsage;
  config::Diagnostics diags;
  std::optional<YAML::Node> doc = config::loadYamlFile(path, &diags);
  if (!doc) {
    std::fprintf(stderr, "%s", diags.toString().c_str());
    return kExitInvalidSpec;
  }
  config::ConfigNode root(*doc, path, &diags);
  const int64_t spec_seed = root.optional<int64_t>("seed", 1);
  config::ConfigNode cluster = root.child("cluster");
  const int workers = cluster.required<int>("workers", config::Range::positive());
  const int servers = cluster.optional<int>("servers", 1, config::Range::nonNegative());
  const double horizon = root.child("training").optional<double>("time_limit_s", 300.0, config::Range::positive());
  ChaosSpec spec = chaos::parseChaosSpec(root.child("chaos"));
  if (!diags.empty()) {
    std::fprintf(stderr, "%s", diags.toString().c_str());
    return kExitInvalidSpec;
  }
  const uint64_t seed = static_cast<uint64_t>(FLAGS_seed >= 0 ? FLAGS_seed : spec_seed);
  std::vector<NodeInfo> nodes = chaos::makeNodes({{"worker", workers}, {"ps", servers}});
  Result<chaos::Plan> plan = chaos::drawPlan(spec, nodes, seed, horizon);
  if (!plan.isOk()) {
    std::fprintf(stderr, "%s\n", plan.status().message().c_str());
    return kExitInvalidSpec;
  }
  const std::string out = FLAGS_json ? chaos::formatPlanJsonLines(*plan) : chaos::formatPlanTable(*plan);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return kExitPass;
}

int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// CPU time of a process in nanoseconds (/proc/PID/schedstat, first field).
int64_t cpuNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  int64_t ns = -1;
  in >> ns;
  return ns;
}

double percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return static_cast<double>(v[i]) / 1e6;
}

// Waits (without the controller's help) until `s` seconds of monotonic time passed since t0.
void sleepUntil(int64_t t0, double s) {
  const int64_t target = t0 + static_cast<int64_t>(s * 1e9);
  timespec ts{target / 1'000'000'000, target % 1'000'000'000};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int benchCommand() {
  // A step that did not happen would make its figure wrong: say which, and stop.
  const auto failed = [](const std::string& what) {
    std::fprintf(stderr, "chaos bench: %s\n", what.c_str());
    return kExitInfrastructure;
  };
  CgroupSupport support = probeCgroups();
  if (!support.cpu || !support.freezer) {
    std::fprintf(stderr, "chaos bench: needs the cgroup cpu controller and freezer: %s\n", support.why_not.c_str());
    return kExitInfrastructure;
  }
  // One shared page of per-node progress counters.
  auto* counters = static_cast<std::atomic<uint64_t>*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (counters == MAP_FAILED) return kExitInfrastructure;
  std::vector<NodeInfo> nodes = chaos::makeNodes({{"worker", 2}});
  const std::string group = "chaos-bench-" + std::to_string(::getpid());
  auto body = [counters](const NodeInfo& n, int) {
    for (;;) counters[n.index].fetch_add(1, std::memory_order_relaxed);
  };
  Result<std::unique_ptr<chaos::LocalCluster>> cluster = chaos::LocalCluster::start(nodes, body, {group, 1.0});
  if (!cluster.isOk()) {
    std::fprintf(stderr, "chaos bench: %s\n", cluster.status().message().c_str());
    return kExitInfrastructure;
  }
  chaos::LocalCluster& c = **cluster;
  nlohmann::json out;

  // 1. Injection delay: N slow faults, alternating between the nodes, each reverted half a gap later.
  {
    chaos::Plan plan;
    const double gap = FLAGS_bench_gap_ms / 1e3;
    for (int i = 0; i < FLAGS_bench_faults; ++i) {
      chaos::Fault f;
      f.id = static_cast<uint64_t>(i);
      f.name = "bench";
      f.kind = chaos::FaultKind::kSlow;
      f.targets = {nodes[i % 2].name};
      f.at_s = 0.05 + i * gap;
      f.duration_s = gap / 2;
      f.params.cpu_fraction = 0.5;
      plan.actions.push_back({f.at_s, chaos::ActionType::kApply, f.id, f.targets[0], std::nullopt});
      plan.actions.push_back({f.at_s + gap / 2, chaos::ActionType::kRevert, f.id, f.targets[0], std::nullopt});
      plan.faults.push_back(f);
    }
    chaos::sortActions(plan.actions);
    const double end = plan.actions.back().at_s;
    chaos::ActuatorSet acts(c, {});
    chaos::Controller ctl(std::move(plan), c, acts.map(), {});
    if (Status s = ctl.start(); !s.isOk()) {
      std::fprintf(stderr, "chaos bench: %s\n", s.message().c_str());
      return kExitInfrastructure;
    }
    if (!ctl.waitProcessed(end, std::chrono::milliseconds(static_cast<int64_t>(end * 1000) + 10000))) {
      std::fprintf(stderr, "chaos bench: the plan did not finish in time\n");
      return kExitInfrastructure;
    }
    if (Status s = ctl.stop(); !s.isOk()) return failed(s.message());
    std::vector<int64_t> d = ctl.injectionDelaysNs();
    out["injection_delay_ms"] = {{"faults", d.size()}, {"p50", percentile(d, 0.5)}, {"p99", percentile(d, 0.99)},
                                 {"max", percentile(d, 1.0)}, {"leaks", ctl.leakCount()}};
    std::printf("injection delay over %zu slow faults (gap %.1f ms): p50 %.3f ms, p99 %.3f ms, max %.3f ms, leaks %lld\n",
                d.size(), FLAGS_bench_gap_ms, percentile(d, 0.5), percentile(d, 0.99), percentile(d, 1.0),
                static_cast<long long>(ctl.leakCount()));
  }

  // 2. Slow accuracy: a spinning node with a 1-core quota slowed to fraction f for 2 s. On a shared machine
  // the node may get less than its quota anyway: the unthrottled baseline says how much it can get.
  double baseline = 0;
  {
    const int64_t c0 = cpuNs(c.pid("worker-0")), w0 = monoNs();
    sleepUntil(w0, 1.0);
    baseline = static_cast<double>(cpuNs(c.pid("worker-0")) - c0) / static_cast<double>(monoNs() - w0);
    out["slow_baseline_cores"] = baseline;
    std::printf("slow: unthrottled baseline %.3f cores (quota 1 core)\n", baseline);
  }
  for (double f : {0.5, 0.25}) {
    chaos::Plan plan;
    chaos::Fault fault;
    fault.name = "slow";
    fault.kind = chaos::FaultKind::kSlow;
    fault.targets = {"worker-0"};
    fault.params.cpu_fraction = f;
    plan.faults.push_back(fault);
    plan.actions.push_back({0.0, chaos::ActionType::kApply, 0, "worker-0", std::nullopt});
    chaos::ActuatorSet acts(c, {});
    chaos::Controller ctl(std::move(plan), c, acts.map(), {});
    if (Status s = ctl.start(); !s.isOk()) return failed(s.message());
    if (!ctl.waitProcessed(0.0, std::chrono::seconds(5))) return failed("the action at 0.0 s was not done within 5 s");
    const int64_t t0 = monoNs();
    sleepUntil(t0, 0.3);  // let the quota period settle
    const int64_t c0 = cpuNs(c.pid("worker-0")), w0 = monoNs();
    sleepUntil(w0, 2.0);
    const int64_t c1 = cpuNs(c.pid("worker-0")), w1 = monoNs();
    if (Status s = ctl.stop(); !s.isOk()) return failed(s.message());
    const double measured = static_cast<double>(c1 - c0) / static_cast<double>(w1 - w0);
    const double expected = std::min(f, baseline);
    out["slow"].push_back({{"cpu_fraction", f}, {"measured_cores", measured}, {"expected_cores", expected},
                           {"error", measured / expected - 1}});
    std::printf("slow to %.2f of 1 core: measured %.3f cores, expected min(f, baseline) %.3f (%+.1f%%)\n", f, measured,
                expected, (measured / expected - 1) * 100);
  }

  // 3. Pause: zero progress while frozen, progress again after.
  {
    chaos::Plan plan;
    chaos::Fault fault;
    fault.name = "pause";
    fault.kind = chaos::FaultKind::kPause;
    fault.targets = {"worker-1"};
    fault.duration_s = 1.0;
    plan.faults.push_back(fault);
    plan.actions.push_back({0.0, chaos::ActionType::kApply, 0, "worker-1", std::nullopt});
    plan.actions.push_back({1.0, chaos::ActionType::kRevert, 0, "worker-1", std::nullopt});
    chaos::ActuatorSet acts(c, {});
    chaos::Controller ctl(std::move(plan), c, acts.map(), {});
    if (Status s = ctl.start(); !s.isOk()) return failed(s.message());
    if (!ctl.waitProcessed(0.0, std::chrono::seconds(5))) return failed("the action at 0.0 s was not done within 5 s");
    const uint64_t p0 = counters[1].load();
    sleepUntil(monoNs(), 0.8);
    const uint64_t p1 = counters[1].load();
    if (!ctl.waitProcessed(1.0, std::chrono::seconds(5))) return failed("the action at 1.0 s was not done within 5 s");
    sleepUntil(monoNs(), 0.2);
    const uint64_t p2 = counters[1].load();
    if (Status s = ctl.stop(); !s.isOk()) return failed(s.message());
    out["pause"] = {{"progress_while_paused", p1 - p0}, {"progress_after", p2 - p1}};
    std::printf("pause: progress while paused %llu, in 0.2 s after resume %llu\n",
                static_cast<unsigned long long>(p1 - p0), static_cast<unsigned long long>(p2 - p1));
  }
  cluster->reset();
  if (!FLAGS_bench_json.empty()) {
    Status s = writeFileAtomically(FLAGS_bench_json, out.dump(2) + "\n");
    if (!s.isOk()) {
      std::fprintf(stderr, "chaos bench: %s\n", s.message().c_str());
      return kExitInfrastructure;
    }
  }
  return kExitPass;
}

}  // namespace

int runChaosPlan(int argc, char** argv) {
  if (argc != 2) return usage();
  return planCommand(argv[1]);
}

int runChaosBench(int argc, char**) {
  if (argc != 1) return usage();
  return benchCommand();
}

int runChaosHeal(int argc, char**) {
  if (argc != 1) return usage();
  auto root = chaos::hostStateRoot();
  if (!root.isOk()) {
    std::fprintf(stderr, "chaosbed chaos heal: %s\n", root.status().message().c_str());
    return kExitInfrastructure;
  }
  const chaos::HealReport r = chaos::healDeadRuns(*root);
  const int targets = run::removeStaleTargets(run::defaultTargetsDir());
  std::printf("chaos heal: %s: %d dead run(s) healed, %d fault record(s) replayed, %d cgroup group(s) removed, "
              "%d Prometheus target file(s) removed\n",
              root->c_str(), r.runs, r.records, r.cgroups, targets);
  for (const std::string& e : r.errors) std::fprintf(stderr, "chaosbed chaos heal: %s\n", e.c_str());
  return r.errors.empty() ? kExitPass : kExitInfrastructure;
}

int runChaosAgent(int, char**) {
  if (FLAGS_state.empty()) {
    std::fprintf(stderr, "chaosbed chaos agent: --state DIR is required\n");
    return kExitUsage;
  }
  chaos::AgentOptions o;
  o.control_fd = FLAGS_control_fd;
  o.lease_timeout_s = FLAGS_agent_lease_timeout_s;
  return chaos::runAgent(FLAGS_state, o);
}

}  // namespace chaosbed::cli
