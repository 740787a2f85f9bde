#include "experiments/run/results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <cstring>
#include <sstream>

#include "core/model/emulation.h"
#include "core/model/model.h"

namespace chaosbed::run {

namespace fs = std::filesystem;

Result<std::string> makeResultsDir(const std::string& base, const std::string& experiment, std::string* run_id) {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
  char id[8];
  std::snprintf(id, sizeof id, "%04x", unsigned(std::random_device{}() & 0xffff));
  *run_id = std::string(stamp) + "-" + id;
  const fs::path parent = fs::path(base) / experiment;
  const fs::path dir = parent / *run_id;
  // Whoever may rename entries of the directories above the run's can swap its results for theirs: such a
  // directory is refused before anything is made in it (those not there yet are made below, ours).
  for (const fs::path& above : {fs::path(base), parent}) {
    struct stat st {};
    if (::stat(above.c_str(), &st) != 0) break;
    if (st.st_uid != ::geteuid() || ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)))
      return Status::invalidArgument("results directory " + above.string() +
                                     ": owned by another user or writable by others, who could change the results "
                                     "(output.dir, or --out for a directory of your own)");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!ec) fs::permissions(dir, fs::perms::owner_all, ec);  // it will hold the run's secret and addresses
  if (ec) return Status::ioError("cannot create results directory " + dir.string() + ": " + ec.message());
  const fs::path link = parent / "latest";
  const fs::path tmp_link = parent / (".latest-" + *run_id);
  fs::create_directory_symlink(*run_id, tmp_link, ec);
  if (!ec) fs::rename(tmp_link, link, ec);
  return dir.string();
}

Status writeSummary(const std::string& dir, const spec::ExperimentSpec& spec,
                    const std::vector<StrategyResult>& results, bool complete, const RunRecord& record) {
  nlohmann::json rates = nlohmann::json::array();
  if (record.fault_rates)
    for (const chaos::FaultRate& r : *record.fault_rates)
      rates.push_back({{"fault", r.fault}, {"schedule", r.schedule}, {"targets", r.targets},
                       {r.schedule == "poisson" ? "rate_per_node_hour" : "rate_per_hour", r.rate_per_hour},
                       {"time_scale", r.time_scale}, {"expected_per_run", r.expected_per_run}, {"mtbf_s", r.mtbf_s}});
  nlohmann::json strategies = nlohmann::json::object();
  for (const auto& r : results) strategies[r.label] = r.toJson();
  nlohmann::json j = {{"summary_version", kSummaryVersion},
                      {"experiment", spec.metadata.name},
                      {"seed", spec.seed},
                      {"target_accuracy", spec.training.target_accuracy},
                      {"transport", spec::name(spec.cluster.transport)},
                      {"complete", complete},
                      {"fault_rates", rates},
                      {"provenance", record.provenance ? record.provenance->toJson() : nlohmann::json(nullptr)},
                      {"hosts", record.hosts},
                      {"emulation", emulationJson(spec)},
                      {"simulated", spec.cluster.simulate ? nlohmann::json(kSimulatedNote) : nlohmann::json(nullptr)},
                      {"strategies", strategies}};
  const std::string text = j.dump(2) + "\n";
  Status s = writeFileAtomically(dir + "/summary.json", text);
  // What was measured is never lost: when the file cannot be written (a full disk), it goes to stderr, and
  // the summary.json written before (at the start, after each strategy) stays whole.
  if (!s.isOk())
    std::fprintf(stderr, "chaosbed run: cannot write %s/summary.json (%s); the summary follows:\n%s", dir.c_str(),
                 s.toString().c_str(), text.c_str());
  return s;
}

Status writeTimeseries(const std::string& dir, const std::vector<StrategyResult>& results) {
  std::ostringstream out;
  out << "time_s,strategy,accuracy,loss,samples,alive_nodes\n";
  char line[256];
  for (const auto& r : results)
    for (const auto& p : r.timeline) {
      std::snprintf(line, sizeof line, "%.3f,%s,%.4f,%.4f,%lld,%d\n", p.time_s, r.label.c_str(), p.accuracy, p.loss,
                    static_cast<long long>(p.samples), p.alive);
      out << line;
    }
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(dir + "/timeseries.csv", out.str()));

  std::ostringstream nodes;
  nodes << "time_s,strategy,node,wall_s";
  for (int c = 0; c < kTimeCategories; ++c) nodes << "," << nodeTimeColumn(static_cast<TimeCategory>(c));
  nodes << "\n";
  for (const auto& r : results)
    for (const NodeSample& s : r.node_samples) {
      std::snprintf(line, sizeof line, "%.3f,%s,%s,%.3f", s.time_s, r.label.c_str(), s.node.c_str(), s.wall_seconds);
      nodes << line;
      for (double v : s.seconds) {
        std::snprintf(line, sizeof line, ",%.3f", v);
        nodes << line;
      }
      nodes << "\n";
    }
  return writeFileAtomically(dir + "/node_timeseries.csv", nodes.str());
}

std::string nodeTimeColumn(TimeCategory c) {
  const bool idle = c == TimeCategory::kIdlePeer || c == TimeCategory::kIdleServer || c == TimeCategory::kIdleRecovery;
  return std::string(idle ? "idle_" : "") + timeCategoryName(c) + "_s";
}

std::string comparisonTable(const std::vector<StrategyResult>& results, double target_accuracy) {
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-22s %9s %9s %12s %9s %8s %8s %10s\n", "strategy", "TTA(s)", "final", "goodput/s",
                "idle%", "faults", "recov", "stop");
  out << "time to accuracy " << target_accuracy << ":\n" << line;
  for (const auto& r : results) {
    char tta[32];
    if (r.tta_seconds)
      std::snprintf(tta, sizeof tta, "%.1f", *r.tta_seconds);
    else
      std::snprintf(tta, sizeof tta, "-");
    std::snprintf(line, sizeof line, "%-22s %9s %9.4f %12.0f %8.1f%% %8d %8d %10s\n", r.label.c_str(), tta,
                  r.final_accuracy, r.goodputSamplesPerSecond(), 100 * r.idleFraction(), r.faults_applied,
                  r.recoveries, r.stop_reason.c_str());
    out << line;
  }
  return out.str();
}

nlohmann::json emulationJson(const spec::ExperimentSpec& spec) {
  const model::EmulationSpec& e = spec.workload.emulate;
  if (!e.enabled()) return nullptr;
  // The padding never shrinks the small model: its own size takes part in the padded one.
  size_t small = 0;
  const std::vector<size_t> layers(spec.model.layers.begin(), spec.model.layers.end());
  if (auto kind = model::parseKind(spec.model.kind); kind.isOk())
    if (auto m = model::create(*kind, layers, 1); m.isOk()) small = (*m)->numParameters();
  auto plan = model::planEmulation(e, small);
  if (!plan.isOk()) return {{"error", plan.status().toString()}};  // validated before: not expected
  const int n = spec.cluster.workers;
  return {{"model", e.model},
          {"accelerator", e.accelerator},
          {"network_gbps", e.network_gbps},
          {"batch_per_worker", plan->spec.batch_per_worker},
          {"real_gradient_mb", plan->real_gradient_bytes / (1 << 20)},
          {"padded_gradient_mb", double(plan->padded_parameters) * 4 / (1 << 20)},
          {"real_compute_ms", plan->real_compute_s * 1e3},
          {"real_wire_ms", {{"mirrored", plan->wireSeconds(true, n) * 1e3},
                            {"parameter_server", plan->wireSeconds(false, n) * 1e3}}},
          {"target_comm_compute_ratio", {{"mirrored", plan->targetRatio(true, n)},
                                         {"parameter_server", plan->targetRatio(false, n)}}},
          {"note", emulationNote(spec)}};
}

std::string emulationNote(const spec::ExperimentSpec& spec) {
  const model::EmulationSpec& e = spec.workload.emulate;
  if (!e.enabled()) return "";
  char gbps[32];
  std::snprintf(gbps, sizeof gbps, "%g", e.network_gbps);
  return "emulated: " + e.model + " on " + e.accelerator + " at " + gbps +
         " Gb/s (gradient bytes and compute time); accuracy is the small real model's (" + spec.model.kind +
         "), not " + e.model + "'s";
}

double StrategyResult::commComputeRatio() const {
  const double compute = workers.seconds[int(TimeCategory::kCompute)];
  return compute > 0 ? workers.seconds[int(TimeCategory::kTransfer)] / compute : 0;
}

std::optional<double> StrategyResult::commComputeOffBy() const {
  if (!target_comm_compute_ratio || *target_comm_compute_ratio <= 0 || workers.seconds[int(TimeCategory::kCompute)] <= 0)
    return std::nullopt;
  return commComputeRatio() / *target_comm_compute_ratio - 1;
}

std::optional<bool> StrategyResult::commComputeOnTarget() const {
  const std::optional<double> off = commComputeOffBy();
  return off ? std::optional<bool>(std::abs(*off) <= kEmulationRatioTolerance) : std::nullopt;
}

std::string emulationWarnings(const std::vector<StrategyResult>& results) {
  std::string out;
  char line[512];
  for (const StrategyResult& r : results) {
    if (r.commComputeOnTarget().value_or(true)) continue;
    const double off = *r.commComputeOffBy();
    std::snprintf(line, sizeof line,
                  "warning: %s ran at a comm/compute ratio of %.2f, %.0f%% %s the emulated job's %.2f: this run is not "
                  "the regime it names (%s)\n",
                  r.label.c_str(), r.commComputeRatio(), std::abs(off) * 100, off < 0 ? "below" : "above",
                  *r.target_comm_compute_ratio,
                  off < 0 ? "the compute that ratio allows is shorter than the worker's own step here, which "
                             "emulation stretches but cannot shorten; a larger workload.emulate.max_gradient_mb "
                             "raises the ratio this machine reaches"
                           : "calibrated on a loaded machine, or the transfer slowed after the first 30 steps");
    out += line;
  }
  return out;
}

std::optional<StrategyResult::Bottleneck> diagnoseBottleneck(const std::string& kind,
                                                             const std::map<std::string, NodeStats>& by_node) {
  const bool ps = kind == "parameter_server";
  const TimeCategory waiting = ps ? TimeCategory::kIdleServer : TimeCategory::kIdlePeer;
  double wall = 0, waited = 0;
  for (const auto& [name, n] : by_node)
    if (name.rfind("worker-", 0) == 0) {
      wall += n.wall_seconds;
      waited += n.seconds[size_t(waiting)];
    }
  if (wall <= 0 || waited <= 0.5 * wall) return std::nullopt;
  auto share = [](const NodeStats& n, TimeCategory c) { return n.wall_seconds > 0 ? n.seconds[size_t(c)] / n.wall_seconds : 0; };
  // The shard that was busiest (working or held back by its quota), or the worker that waited least.
  const NodeStats* culprit = nullptr;
  std::string name_of;
  double best = -1;
  for (const auto& [name, n] : by_node) {
    if (name.rfind(ps ? "ps-" : "worker-", 0) != 0 || n.wall_seconds <= 0) continue;
    const double score = 1 - share(n, TimeCategory::kIdlePeer);  // a shard waits for requests, a worker for peers
    if (score > best) {
      best = score;
      culprit = &n;
      name_of = name;
    }
  }
  // Only a node that was itself busy (working, moving bytes, or held back by its quota) is a bottleneck: a
  // shard that waited for requests most of its time while the workers waited for its replies points at
  // the wire between them, not at the shard.
  if (!culprit || share(*culprit, TimeCategory::kIdlePeer) >= 0.5) return std::nullopt;
  StrategyResult::Bottleneck b;
  b.node = name_of;
  b.waiting_fraction = waited / wall;
  char why[256];
  std::snprintf(why, sizeof why, "it computed %.0f%%, moved data %.0f%%, was throttled by its CPU quota %.0f%% and paused %.0f%% of its time",
                100 * share(*culprit, TimeCategory::kCompute), 100 * share(*culprit, TimeCategory::kTransfer),
                100 * share(*culprit, TimeCategory::kThrottled), 100 * share(*culprit, TimeCategory::kPaused));
  b.why = why;
  return b;
}

std::string bottleneckWarnings(const std::vector<StrategyResult>& results) {
  std::string out;
  char line[640];
  for (const StrategyResult& r : results) {
    if (!r.bottleneck) continue;
    std::snprintf(line, sizeof line, "warning: %s's workers spent %.0f%% of their time waiting for %s (%s)\n",
                  r.label.c_str(), 100 * r.bottleneck->waiting_fraction, r.bottleneck->node.c_str(),
                  r.bottleneck->why.c_str());
    out += line;
  }
  return out;
}

std::string resolutionWarnings(const std::vector<StrategyResult>& results) {
  std::string out;
  char line[400];
  for (const StrategyResult& r : results) {
    if (!r.tta_sustained_seconds || *r.tta_sustained_seconds <= 0) continue;
    const double share = r.tta_resolution_s / *r.tta_sustained_seconds;
    if (share > kTtaResolutionLimit) {
      std::snprintf(line, sizeof line,
                    "warning: %s's TTA (%.2f s) is known only to %.2f s, %.0f%% of it (more than %.0f%%): the "
                    "snapshots around it are that far apart; a smaller training.eval_interval_steps gives a finer one\n",
                    r.label.c_str(), *r.tta_sustained_seconds, r.tta_resolution_s, 100 * share, 100 * kTtaResolutionLimit);
      out += line;
      continue;
    }
    if (!r.tta_steps || *r.tta_steps <= 0 || !r.tta_resolution_steps) continue;
    const double steps_share = double(*r.tta_resolution_steps) / double(*r.tta_steps);
    if (steps_share <= kTtaResolutionLimit) continue;
    std::snprintf(line, sizeof line,
                  "warning: %s's TTA (%lld gradients) is known only to %lld of them, %.0f%% (more than %.0f%%): a "
                  "smaller training.eval_interval_steps gives a finer one\n",
                  r.label.c_str(), static_cast<long long>(*r.tta_steps), static_cast<long long>(*r.tta_resolution_steps),
                  100 * steps_share, 100 * kTtaResolutionLimit);
    out += line;
  }
  return out;
}

double StrategyResult::goodputSamplesPerSecond() const {
  return wall_seconds > 0 ? double(workers.samples - samplesLost()) / wall_seconds : 0;
}

double StrategyResult::idleFraction() const {
  const double busy = workers.busySeconds();
  return busy > 0 ? workers.idleSeconds() / busy : 0;
}

nlohmann::json StrategyResult::nodeSeconds() const {
  nlohmann::json out;
  for (const auto& [role, stats] : {std::pair{"workers", &workers}, std::pair{"servers", &servers}}) {
    nlohmann::json j = {{"wall", stats->wall_seconds}};
    for (int c = 0; c < kTimeCategories; ++c) j[timeCategoryName(TimeCategory(c))] = stats->seconds[size_t(c)];
    out[role] = j;
  }
  return out;
}

nlohmann::json StrategyResult::crashesJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Crash& c : crashes) out.push_back({{"node", c.node}, {"how", c.how}, {"t", c.t}});
  return out;
}

nlohmann::json StrategyResult::faultEpisodesJson() const {
  nlohmann::json out = nlohmann::json::array();
  for (const FaultEpisode& e : fault_episodes) out.push_back(e.toJson());
  return out;
}

double StrategyResult::detectionSeconds() const {
  double longest = 0;
  for (const FaultEpisode& e : fault_episodes)
    if (e.fault.detected_t) longest = std::max(longest, *e.fault.detected_t - e.fault.t);
  return longest;
}

nlohmann::json StrategyResult::recoveryEpisodes() const {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < recovery_seconds.size(); ++i)
    out.push_back({{"seconds", recovery_seconds[i]}, {"cause", i < recovery_causes.size() ? recovery_causes[i] : ""}});
  return out;
}

nlohmann::json StrategyResult::toJson() const {
  nlohmann::json idle = {{"peer", workers.seconds[int(TimeCategory::kIdlePeer)]},
                         {"server", workers.seconds[int(TimeCategory::kIdleServer)]},
                         {"recovery", workers.seconds[int(TimeCategory::kIdleRecovery)]}};
  // Under workload.emulate: how far the run was from the regime it names (emulationWarnings).
  const std::optional<double> off_by = commComputeOffBy();
  const std::optional<bool> on_target = commComputeOnTarget();
  nlohmann::json comm_compute = {
      {"measured", commComputeRatio()},
      {"target", target_comm_compute_ratio ? nlohmann::json(*target_comm_compute_ratio) : nlohmann::json(nullptr)},
      {"off_by", off_by ? nlohmann::json(*off_by) : nlohmann::json(nullptr)},
      {"on_target", on_target ? nlohmann::json(*on_target) : nlohmann::json(nullptr)}};
  nlohmann::json j = {{"kind", kind},
                      {"recipe", {{"batch_per_worker", recipe.batch_per_worker}, {"learning_rate", recipe.learning_rate},
                                  {"momentum", recipe.momentum}, {"weight_decay", recipe.weight_decay}}},
                      {"tta_seconds", tta_seconds ? nlohmann::json(*tta_seconds) : nlohmann::json(nullptr)},
                      {"reached_target", tta_seconds.has_value()},
                      {"tta_sustained_seconds", tta_sustained_seconds ? nlohmann::json(*tta_sustained_seconds) : nlohmann::json(nullptr)},
                      {"tta_resolution_s", tta_resolution_s},
                      {"tta_resolution_fraction", tta_sustained_seconds && *tta_sustained_seconds > 0
                                                      ? nlohmann::json(tta_resolution_s / *tta_sustained_seconds)
                                                      : nlohmann::json(nullptr)},
                      {"tta_steps", tta_steps ? nlohmann::json(*tta_steps) : nlohmann::json(nullptr)},
                      {"tta_resolution_steps", tta_resolution_steps ? nlohmann::json(*tta_resolution_steps) : nlohmann::json(nullptr)},
                      {"tta_resolution_steps_fraction", tta_resolution_steps && tta_steps && *tta_steps > 0
                                                            ? nlohmann::json(double(*tta_resolution_steps) / double(*tta_steps))
                                                            : nlohmann::json(nullptr)},
                      {"final_accuracy", final_accuracy},
                      {"final_loss", final_loss},
                      {"steps", workers.steps},
                      {"samples", workers.samples},
                      {"samples_lost", samplesLost()},
                      {"wall_seconds", wall_seconds},
                      {"goodput_samples_per_s", goodputSamplesPerSecond()},
                      {"compute_seconds", workers.seconds[int(TimeCategory::kCompute)]},
                      {"transfer_seconds", workers.seconds[int(TimeCategory::kTransfer)]},
                      {"comm_compute_ratio", comm_compute},
                      {"checkpoint_seconds", workers.seconds[int(TimeCategory::kCheckpoint)]},
                      {"idle_seconds", idle},
                      {"idle_fraction", idleFraction()},
                      {"failures", failures},
                      {"crashes", crashes.size()},
                      {"crashed", crashesJson()},
                      {"recoveries", recoveries},
                      {"recovery_seconds", recovery_seconds},
                      {"recovery_episodes", recoveryEpisodes()},
                      {"fault_episodes", faultEpisodesJson()},
                      {"detection_seconds", detectionSeconds()},
                      {"longest_stall_seconds", longest_stall_seconds},
                      {"paused_seconds", workers.seconds[int(TimeCategory::kPaused)]},
                      {"bottleneck", bottleneck ? nlohmann::json{{"node", bottleneck->node},
                                                                 {"waiting_fraction", bottleneck->waiting_fraction},
                                                                 {"why", bottleneck->why}}
                                                : nlohmann::json(nullptr)},
                      {"accounting_residual", accounting_residual},
                      {"accounting_residual_node", accounting_residual_node},
                      {"node_seconds", nodeSeconds()},
                      {"peak_rss_mb", {{"worker", double(workers.peak_rss_bytes) / (1 << 20)},
                                       {"server", double(servers.peak_rss_bytes) / (1 << 20)}}},
                      {"faults_applied", faults_applied},
                      {"chaos_leaks", chaos_leaks},
                      {"checkpoints_written", workers.checkpoints_written + servers.checkpoints_written},
                      {"checkpoint_failures", workers.checkpoint_failures + servers.checkpoint_failures},
                      {"control_plane", control_plane.toJson()},
                      {"host_addresses", host_addresses.empty() ? nlohmann::json(nullptr) : nlohmann::json(host_addresses)},
                      {"stop_reason", stop_reason}};
  return j;
}

nlohmann::json StrategyResult::ControlPlane::toJson() const {
  // Nearest rank: the smallest value that at least q of the samples met; p50, p99 and max in ms.
  auto quantiles_ms = [](std::vector<double> sorted) -> nlohmann::json {
    std::sort(sorted.begin(), sorted.end());
    auto at = [&](double q) -> nlohmann::json {
      if (sorted.empty()) return nullptr;
      const size_t rank = size_t(std::ceil(q * double(sorted.size())));
      return 1e3 * sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
    };
    return {{"p50", at(0.5)}, {"p99", at(0.99)}, {"max", at(1.0)}};
  };
  return {{"events", events},
          {"malformed_events", malformed_events},
          {"event_latency_ms", quantiles_ms(event_latency_s)},
          {"supervision_pass_ms", quantiles_ms(supervision_pass_s)},
          {"controller_cpu_fraction", wall_seconds > 0 ? cpu_seconds / wall_seconds : 0.0},
          {"controller_peak_rss_mb", double(peak_rss_bytes) / (1 << 20)}};
}

}  // namespace chaosbed::run
