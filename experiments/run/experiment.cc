#include "experiments/run/experiment.h"

#include <glog/logging.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

#include "chaos/agent/host_agents.h"
#include "chaos/event_log.h"
#include "chaos/host_state.h"
#include "chaos/schedule/schedule.h"
#include "core/data/dataset.h"
#include "core/isolation/emulated_hosts.h"
#include "core/metrics/exporter.h"
#include "experiments/report/report.h"
#include "experiments/run/progress.h"
#include "experiments/run/prometheus_targets.h"
#include "experiments/run/provenance.h"
#include "experiments/run/results.h"
#include "transports/bootstrap/net.h"
#include "chaosbed/config.h"
#if CHAOSBED_HAVE_NCCL
#include "transports/nccl/communicator.h"
#endif

namespace chaosbed::run {
namespace {

// cluster.transport: nccl puts mirrored's gradient all-reduce on NCCL, one GPU per worker; refused up front,
// never quietly replaced by UCX, when this build or machine cannot do it.
Status checkNccl(const spec::ExperimentSpec& spec) {
  if (spec.cluster.transport != spec::Transport::kNccl) return Status::ok();
  for (const spec::StrategySpec& st : spec.strategies)
    if (st.kind == spec::StrategyKind::kMirrored && st.backup_workers > 0)
      return Status::invalidArgument("cluster.transport: nccl: strategy " + st.label +
                                     " has backup_workers, which forward gradients over UCX; use transport: ucx");
#if CHAOSBED_HAVE_NCCL
  auto gpus = nccl::cudaDeviceCount();
  if (!gpus.isOk()) return gpus.status().withContext("cluster.transport: nccl");
  if (*gpus < spec.cluster.workers)
    return Status::unavailable("cluster.transport: nccl: NCCL runs one worker per GPU; " +
                               std::to_string(spec.cluster.workers) + " workers, " + std::to_string(*gpus) +
                               " CUDA device(s) here");
  return Status::ok();
#else
  return Status::unavailable("cluster.transport: nccl: this build has no NCCL (CUDA and NCCL were not found "
                             "when it was configured)");
#endif
}

}  // namespace

namespace {
// A Pushgateway that does not answer in this time is reported, never waited for: the results are written.
constexpr std::chrono::seconds kPushDeadline{10};
}  // namespace

Status checkFreshOutDir(const std::string& dir) {
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);  // the caller's own path: a link they made is theirs
  if (ec || st.type() == std::filesystem::file_type::not_found) return Status::ok();
  // An empty directory of another user stays theirs after we wrote into it: they could replace summary.json
  // or read what the run left there. Only the caller's own directory becomes a results directory.
  struct stat own {};
  if (st.type() == std::filesystem::file_type::directory && ::stat(dir.c_str(), &own) == 0 && own.st_uid != ::geteuid())
    return Status::invalidArgument("--out " + dir + ": owned by uid " + std::to_string(own.st_uid) +
                                   ", not by this user (uid " + std::to_string(::geteuid()) +
                                   "), who could then change the results: choose a directory of your own");
  if (st.type() == std::filesystem::file_type::directory && std::filesystem::is_empty(dir, ec) && !ec) return Status::ok();
  if (st.type() != std::filesystem::file_type::directory)
    return Status::invalidArgument("--out " + dir + ": exists and is not a directory");
  return Status::invalidArgument("--out " + dir + ": not empty (it holds an earlier run, whose checkpoints and events "
                                 "a new run would mix with its own): choose a new directory or remove that one");
}

namespace {

// The controller holds a few descriptors per node (its store connections, a pidfd): hundreds of nodes pass
// the customary soft limit of 1024 long before the hard limit.
void raiseDescriptorLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) LOG(WARNING) << "cannot raise the open-file limit: " << std::strerror(errno);
}

}  // namespace

namespace {

// Draws the chaos schedule once: every strategy meets the same faults at the same times.
Result<chaos::Plan> drawChaos(const spec::ExperimentSpec& spec) {
  auto nodes = chaos::makeNodes({{"worker", spec.cluster.workers}, {"ps", spec.cluster.servers}, {"evaluator", 1}});
  auto plan = chaos::drawPlan(spec.chaos.parsed, nodes, uint64_t(spec.seed), spec.training.time_limit_s);
  if (!plan.isOk()) return Status::invalidArgument("chaos: " + plan.status().toString());
  if (!spec.chaos.parsed.allow_full_outage)
    if (Status s = chaos::checkBlastRadius(*plan, nodes); !s.isOk()) return Status::invalidArgument("chaos: " + s.toString());
  return plan;
}

// Whatever a dead run left on this host (frozen or throttled nodes, its cgroups) is healed before this one
// starts; then this run claims its own place in the host's register.
Result<chaos::RunClaim> claimThisHost(FILE* out) {
  CHAOSBED_ASSIGN_OR_RETURN(const std::string host_root, chaos::hostStateRoot());
  const chaos::HealReport healed = chaos::healDeadRuns(host_root);
  if (healed.runs > 0 && out)
    std::fprintf(out, "chaosbed run: healed what %d dead run(s) left: %d fault record(s), %d cgroup group(s)\n",
                 healed.runs, healed.records, healed.cgroups);
  for (const std::string& e : healed.errors) std::fprintf(stderr, "chaosbed run: warning: healing: %s\n", e.c_str());
  return chaos::RunClaim::create(host_root);
}

// The nodes map one raw copy of the dataset, decoded once here: each node's memory is then its own state,
// and 64 nodes do not each decompress 26 MB at start-up. Nodes on other machines (hosts: {agents: N})
// cannot see this machine's copy: they read data.path, which every machine must have, as the binary.
// Returns the copy's directory, or "" when the nodes read data.path themselves.
Result<std::string> stageDataset(const spec::ExperimentSpec& spec, const chaos::RunClaim& claim) {
  if (spec.data.dataset == spec::Dataset::kSynthetic || spec.cluster.hosts == spec::Hosts::kAgents) return std::string();
  CHAOSBED_ASSIGN_OR_RETURN(std::string data_path, claim.scratchDir());
  if (Status s = data::writeRawMnistLayout(spec.data.path, data_path); !s.isOk()) return s.withContext("data.path");
  return data_path;
}

// Creates the results directory (*dir) and returns the run's id.
Result<std::string> openResultsDir(const spec::ExperimentSpec& spec, const ExperimentOptions& options, std::string* dir) {
  if (options.out_dir.empty()) {
    std::string run_id;
    CHAOSBED_ASSIGN_OR_RETURN(*dir, makeResultsDir(spec.output.dir, spec.metadata.name, &run_id));
    return run_id;
  }
  *dir = options.out_dir;
  // A results directory holds one run: a second one would restore the first one's checkpoints as its own
  // and append to its events.
  CHAOSBED_RETURN_IF_ERROR(checkFreshOutDir(*dir));
  std::error_code ec;
  std::filesystem::create_directories(*dir, ec);
  if (!ec) std::filesystem::permissions(*dir, std::filesystem::perms::owner_all, ec);  // holds the secret
  if (ec) return Status::ioError("cannot create " + *dir + ": " + ec.message());
  return std::filesystem::path(*dir).filename().string() + "-" + std::to_string(getpid());
}

// spec.yaml as resolved, and the provenance of the run (a warning when the machine was not quiet).
Result<Provenance> recordTheStart(const spec::ExperimentSpec& spec, const std::string& dir) {
  const std::string resolved_spec = spec::emitExperimentSpec(spec);
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(dir + "/spec.yaml", resolved_spec));
  Provenance provenance = Provenance::atStart();
  provenance.spec_sha256 = sha256Hex(resolved_spec);
  if (!provenance.quiet)
    std::fprintf(stderr,
                 "chaosbed run: WARNING: %.0f%% of the %d cores' time was busy just before the start: the timings of "
                 "this run are not a quiet-machine measurement (summary.json: provenance.quiet = false)\n",
                 100 * provenance.cpu_busy_at_start, provenance.cores);
  return provenance;
}

struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// What a run stands on besides its records, set up in this order and torn down in reverse: the secret, the
// store the nodes and agents reach, the host agents, the metrics endpoint and its Prometheus announcement
// (removed before the endpoint stops).
struct RunServices {
  RemoveOnExit secret_remover;
  std::string secret_file;
  Secret secret;
  std::unique_ptr<EmulatedHosts> hosts;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<Store> store;
  std::string node_store_address;  // where nodes and agents reach the store
  std::unique_ptr<chaos::HostAgents> agents;
  RemoveOnExit agents_file_remover;  // agents.json names a run that is over
  std::unique_ptr<MetricsExporter> metrics;
  std::optional<PrometheusTarget> target;
};

// The run's secret (every control connection proves it holds it: transports/bootstrap/secret.h), in a 0600
// file of the 0700 results directory that is removed when the run ends, or the caller's; then the store.
// Emulated hosts (hosts: {netns: N}) reach the store on the fabric's address, the controller on loopback
// (one server serves both); host agents on real machines reach it where the spec says, nothing else does.
Status startControlPlane(const spec::ExperimentSpec& spec, const ExperimentOptions& options, const std::string& dir,
                         RunServices& run) {
  run.secret_file = options.secret_file;
  if (run.secret_file.empty()) {
    CHAOSBED_ASSIGN_OR_RETURN(run.secret, Secret::generate());
    run.secret_file = dir + "/.secret";
    ::unlink(run.secret_file.c_str());  // an earlier run's in a reused --out (unlink never follows a symlink)
    CHAOSBED_RETURN_IF_ERROR(run.secret.writeFile(run.secret_file));
    run.secret_remover.path = run.secret_file;
  } else {
    // 0600, this user's, not a symlink: else refused, saying why.
    CHAOSBED_ASSIGN_OR_RETURN(run.secret, Secret::readFile(run.secret_file));
  }
  std::vector<net::FileDescriptor> fabric_listener;
  net::HostPort fabric_bound;
  if (spec.cluster.hosts == spec::Hosts::kNetns) {
    CHAOSBED_ASSIGN_OR_RETURN(run.hosts, EmulatedHosts::create(spec.cluster.netns_hosts));
    CHAOSBED_ASSIGN_OR_RETURN(net::FileDescriptor listener, run.hosts->listenInFabric(&fabric_bound));
    fabric_listener.push_back(std::move(listener));
  }
  std::string store_listen = "127.0.0.1:0";
  if (spec.cluster.hosts == spec::Hosts::kAgents)
    store_listen = spec.cluster.listen + (spec.cluster.listen.find(':') == std::string::npos ? ":0" : "");
  CHAOSBED_ASSIGN_OR_RETURN(run.server, startStoreServer(store_listen, run.secret, std::move(fabric_listener)));
  CHAOSBED_ASSIGN_OR_RETURN(run.store, connectStore(run.server->address(), run.secret, deadlineIn(std::chrono::seconds(10))));
  run.node_store_address = run.hosts ? fabric_bound.toString() : run.server->address();
  return Status::ok();
}

// One agent per host owns the nodes there: started here in each emulated host, or joining from the
// machines of a real cluster through agents.json (which names the store and the secret's file, not the
// secret). The record lists them.
Status startAgents(const spec::ExperimentSpec& spec, const ExperimentOptions& options, const std::string& dir,
                   const std::string& run_id, RunServices& run, RunRecord& record) {
  if (spec.cluster.hosts == spec::Hosts::kLocal) return Status::ok();
  chaos::HostAgents::Options ao;
  ao.store = run.store.get();
  ao.config.store = run.node_store_address;
  ao.config.secret_file = run.secret_file;
  ao.config.run = run_id;
  ao.config.hosts = spec.cluster.hostCount();
  ao.config.host_names = spec.cluster.host_names;
  ao.config_path = dir + "/agents.json";
  ::unlink(ao.config_path.c_str());  // an earlier run's in a reused --out
  run.agents_file_remover.path = ao.config_path;
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(ao.config_path, ao.config.toJson().dump(2) + "\n", 0600));
  ao.log_dir = dir + "/logs";
  ao.interrupted = options.interrupted;
  if (run.hosts) {
    for (int h = 0; h < run.hosts->size(); ++h) ao.netns_fds.push_back(run.hosts->hostFd(h));
  } else if (FILE* out = options.progress) {
    std::fprintf(out, "waiting for %d host agent(s) to join: chaosbed agent --agent_config %s\n", ao.config.hosts,
                 ao.config_path.c_str());
    std::fflush(out);
  }
  CHAOSBED_ASSIGN_OR_RETURN(run.agents, chaos::HostAgents::start(std::move(ao)));
  record.hosts = nlohmann::json::array();
  for (int h = 0; h < run.agents->size(); ++h) {
    const chaos::HostAgents::Host& host = run.agents->host(h);
    record.hosts.push_back({{"host", h}, {"hostname", host.hostname}, {"address", host.address},
                            {"device", host.device}, {"agent_pid", host.pid}, {"launched_by", host.launched_by}});
  }
  return Status::ok();
}

// One Prometheus endpoint for the whole run, loopback unless the spec or the caller allows more, announced
// to Prometheus's file_sd so that a run on any port is scraped (prometheus_targets.h).
Status startMetrics(const spec::ExperimentSpec& spec, const ExperimentOptions& options, const Provenance& provenance,
                    const std::string& run_id, const chaos::RunClaim& claim, RunServices& run) {
  const std::string listen = options.metrics_addr.empty() ? spec.metrics.listen : options.metrics_addr;
  if (listen == "off") return Status::ok();
  const bool allow_remote = options.metrics_allow_remote || spec.metrics.allow_remote;
  auto exporter = MetricsExporter::create(listen, allow_remote);
  if (!exporter.isOk()) return exporter.status().withContext("metrics endpoint " + listen);
  run.metrics = std::move(*exporter);
  MetricsExporter& metrics = *run.metrics;
  if (!net::isLoopbackHost(listen.substr(0, listen.rfind(':'))))
    std::fprintf(stderr, "chaosbed run: warning: the metrics endpoint listens on %s, beyond loopback: anyone who "
                 "can reach that port reads this run's metrics (there is no authentication)\n",
                 metrics.address().c_str());
  metrics.setInfo("build", {{"version", provenance.version},
                            {"revision", provenance.commit + (provenance.dirty ? "-dirty" : "")}});
  metrics.setInfo("run", {{"experiment", spec.metadata.name}, {"run_id", run_id},
                          {"seed", std::to_string(spec.seed)}, {"spec_sha256", provenance.spec_sha256}});
  const std::string targets_dir = spec.metrics.targets_dir.empty() ? defaultTargetsDir() : spec.metrics.targets_dir;
  if (targets_dir != "off") {
    auto published = PrometheusTarget::publish(
        targets_dir, claim.owner(), metrics.address(),
        {{"experiment", spec.metadata.name}, {"run_id", run_id}, {"seed", std::to_string(spec.seed)}});
    if (published.isOk()) run.target.emplace(std::move(*published));
    else std::fprintf(stderr, "chaosbed run: warning: not announced to Prometheus: %s\n", published.status().toString().c_str());
  }
  if (FILE* out = options.progress) {
    std::fprintf(out, "metrics: http://%s/metrics%s%s\n", metrics.address().c_str(),
                 run.target ? " (announced in " : "", run.target ? (run.target->path() + ")").c_str() : "");
    std::fflush(out);
  }
  return Status::ok();
}

// Node isolation only isolates when the quotas fit the machine: the largest run's workers, shards and
// evaluator.
void warnIfQuotasOverlap(const spec::ExperimentSpec& spec) {
  int shards = 0;
  for (const spec::StrategySpec& s : spec.strategies)
    if (s.kind == spec::StrategyKind::kParameterServer) shards = std::max(shards, s.shards);
  const int nodes_per_run = spec.cluster.workers + shards + 1;
  const double quota = spec.cluster.cpu_per_node * nodes_per_run;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (quota > double(cores) + 1e-9)
    std::fprintf(stderr, "chaosbed run: warning: %d nodes x cpu_per_node %.2f = %.2f cores, but this machine has %ld: "
                 "the quotas overlap, so a paused or dead node's CPU goes to the others\n",
                 nodes_per_run, spec.cluster.cpu_per_node, quota, cores);
}

// Every strategy of the spec, one after the other, until one fails or the run is interrupted; the result
// files are rewritten after each, so that a crash keeps what was measured. Returns the first failure.
Status runStrategies(const RunContext& ctx, const ExperimentOptions& options, ProgressPrinter& progress,
                     const RunRecord& record, ExperimentOutcome& outcome) {
  for (const auto& strategy : ctx.spec->strategies) {
    if (options.interrupted && options.interrupted->load()) break;
    auto r = runStrategy(ctx, strategy);
    if (!r.isOk()) {
      if (options.progress && options.tty) std::fprintf(options.progress, "\n");  // end the status line first
      return r.status().withContext(strategy.label);
    }
    progress.done(strategy.label, r->stop_reason);
    outcome.results.push_back(std::move(*r));
    // Interim files: their failure is not the run's (the final write below reports it).
    (void)writeSummary(outcome.dir, *ctx.spec, outcome.results, false, record);
    (void)writeTimeseries(outcome.dir, outcome.results);
    // A lost host whose nodes could not be restarted ends the run as an infrastructure failure (exit 4),
    // its results kept: the next strategies would meet the same missing host.
    if (const std::string& why = outcome.results.back().stop_reason; why.starts_with("host_lost"))
      return Status::unavailable(strategy.label + ": " + why);
  }
  return Status::ok();
}

// Every result file is attempted, whatever failed before it; returns the first failure. Then the push to a
// Pushgateway (reported, never waited for past kPushDeadline) and the comparison table.
Status writeResults(const spec::ExperimentSpec& spec, const ExperimentOptions& options, const RunRecord& record,
                    MetricsExporter* metrics, const ExperimentOutcome& outcome) {
  const std::string& dir = outcome.dir;
  Status written = writeSummary(dir, spec, outcome.results, outcome.complete, record);
  if (Status s = writeTimeseries(dir, outcome.results); !s.isOk() && written.isOk()) written = s;
  const Status report_written = report::writeReport(dir);
  if (!report_written.isOk()) std::fprintf(stderr, "chaosbed run: report.html: %s\n", report_written.toString().c_str());
  const std::string& gateway = options.push_gateway.empty() ? spec.metrics.push_gateway : options.push_gateway;
  if (metrics && !gateway.empty()) {
    if (Status s = metrics->push(gateway, spec.metadata.name, deadlineIn(kPushDeadline)); !s.isOk())
      std::fprintf(stderr, "chaosbed run: push to %s: %s\n", gateway.c_str(), s.toString().c_str());
  }
  if (FILE* out = options.progress)
    std::fprintf(out, "\n%s%s%s%s%s%s\nresults: %s\n%s%s%s",
                 comparisonTable(outcome.results, spec.training.target_accuracy).c_str(),
                 spec.workload.emulate.enabled() ? (emulationNote(spec) + "\n").c_str() : "",
                 emulationWarnings(outcome.results).c_str(), bottleneckWarnings(outcome.results).c_str(),
                 resolutionWarnings(outcome.results).c_str(),
                 spec.cluster.simulate ? (std::string(kSimulatedNote) + "\n").c_str() : "",
                 dir.c_str(), report_written.isOk() ? "report:  " : "", report_written.isOk() ? dir.c_str() : "",
                 report_written.isOk() ? "/report.html\n" : "");
  return written;
}

// Lets Prometheus scrape the final values (a batch job can also push them): with await_scrape, waits for
// that scrape; otherwise lingers until the next scrape of the scraper seen so far, or 1.5 s when none was.
void awaitFinalScrape(MetricsExporter& metrics, bool await_scrape) {
  if (await_scrape) {
    (void)awaitScrape(metrics, "of the final values");  // it says when no scrape came
    return;
  }
  double linger_s = 1.5;
  if (auto interval = metrics.scrapeInterval()) linger_s = std::clamp(1.5 * *interval + 0.5, linger_s, 30.0);
  // Linger only: a scraper that does not come is not an error.
  (void)metrics.awaitScrape(deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(linger_s))));
}

}  // namespace

Result<ExperimentOutcome> runExperiment(const spec::ExperimentSpec& spec, const ExperimentOptions& options) {
  raiseDescriptorLimit();
  CHAOSBED_RETURN_IF_ERROR(checkNccl(spec));
  CHAOSBED_ASSIGN_OR_RETURN(const chaos::Plan plan, drawChaos(spec));
  CHAOSBED_ASSIGN_OR_RETURN(chaos::RunClaim claim, claimThisHost(options.progress));
  CHAOSBED_ASSIGN_OR_RETURN(const std::string data_path, stageDataset(spec, claim));
  ExperimentOutcome outcome;
  CHAOSBED_ASSIGN_OR_RETURN(const std::string run_id, openResultsDir(spec, options, &outcome.dir));
  const std::string& dir = outcome.dir;
  // A summary exists from the start (no strategy yet, not complete) and is replaced atomically after each
  // strategy, so that a run that dies or fills the disk still leaves a parseable one.
  CHAOSBED_ASSIGN_OR_RETURN(Provenance provenance, recordTheStart(spec, dir));
  RunRecord record{&provenance, &plan.rates, nullptr};
  CHAOSBED_RETURN_IF_ERROR(writeSummary(dir, spec, {}, false, record));
  CHAOSBED_ASSIGN_OR_RETURN(auto events, chaos::EventLog::open(dir + "/events.jsonl"));
  RunServices run;
  CHAOSBED_RETURN_IF_ERROR(startControlPlane(spec, options, dir, run));
  CHAOSBED_RETURN_IF_ERROR(startAgents(spec, options, dir, run_id, run, record));
  CHAOSBED_RETURN_IF_ERROR(startMetrics(spec, options, provenance, run_id, claim, run));
  warnIfQuotasOverlap(spec);
  if (FILE* out = options.progress)
    std::fprintf(out, "chaosbed run %s: %zu strateg%s, %zu planned chaos action(s); results in %s\n",
                 spec.metadata.name.c_str(), spec.strategies.size(), spec.strategies.size() == 1 ? "y" : "ies",
                 plan.actions.size(), dir.c_str());

  ProgressPrinter progress(options.progress, options.tty, spec.training.target_accuracy);
  const RunContext ctx{.spec = &spec,
                       .out_dir = dir,
                       .run_id = run_id,
                       .store_address = run.node_store_address,
                       .hosts = run.hosts.get(),
                       .agents = run.agents.get(),
                       .secret_file = run.secret_file,
                       .data_path = data_path,
                       .store = run.store.get(),
                       .events = events.get(),
                       .plan = &plan,
                       .interrupted = options.interrupted,
                       .metrics = run.metrics.get(),
                       .claim = &claim,
                       .await_scrape = options.metrics_await_scrape || spec.metrics.await_scrape,
                       .on_progress = [&progress](const Progress& p) { progress.update(p); }};
  const Status failure = runStrategies(ctx, options, progress, record, outcome);
  outcome.interrupted = options.interrupted && options.interrupted->load();
  outcome.complete = !outcome.interrupted && failure.isOk();
  provenance.end();
  const Status written = writeResults(spec, options, record, run.metrics.get(), outcome);
  if (run.metrics) awaitFinalScrape(*run.metrics, ctx.await_scrape);
  if (!failure.isOk()) return failure;
  if (!written.isOk()) return written;
  return outcome;
}

}  // namespace chaosbed::run
