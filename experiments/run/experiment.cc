#include "experiments/run/experiment.h"

#include <glog/logging.h>
#include <sys/resource.h>
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

Result<ExperimentOutcome> runExperiment(const spec::ExperimentSpec& spec, const ExperimentOptions& options) {
  FILE* out = options.progress;
  raiseDescriptorLimit();
  CHAOSBED_RETURN_IF_ERROR(checkNccl(spec));
  // Draw the chaos schedule once: every strategy meets the same faults at the same times.
  auto nodes = chaos::makeNodes({{"worker", spec.cluster.workers}, {"ps", spec.cluster.servers}, {"evaluator", 1}});
  auto plan = chaos::drawPlan(spec.chaos.parsed, nodes, uint64_t(spec.seed), spec.training.time_limit_s);
  if (!plan.isOk()) return Status::invalidArgument("chaos: " + plan.status().toString());
  if (!spec.chaos.parsed.allow_full_outage)
    if (Status s = chaos::checkBlastRadius(*plan, nodes); !s.isOk()) return Status::invalidArgument("chaos: " + s.toString());

  // Whatever a dead run left on this host (frozen or throttled nodes, its cgroups) is healed before this one
  // starts; then this run claims its own place in the host's register.
  CHAOSBED_ASSIGN_OR_RETURN(const std::string host_root, chaos::hostStateRoot());
  const chaos::HealReport healed = chaos::healDeadRuns(host_root);
  if (healed.runs > 0 && out)
    std::fprintf(out, "chaosbed run: healed what %d dead run(s) left: %d fault record(s), %d cgroup group(s)\n",
                 healed.runs, healed.records, healed.cgroups);
  for (const std::string& e : healed.errors) std::fprintf(stderr, "chaosbed run: warning: healing: %s\n", e.c_str());
  CHAOSBED_ASSIGN_OR_RETURN(chaos::RunClaim claim, chaos::RunClaim::create(host_root));
  // The nodes map one raw copy of the dataset, decoded once here: each node's memory is then its own state,
  // and 64 nodes do not each decompress 26 MB at start-up. Nodes on other machines (hosts: {agents: N})
  // cannot see this machine's copy: they read data.path, which every machine must have, as the binary.
  std::string data_path;
  if (spec.data.dataset != spec::Dataset::kSynthetic && spec.cluster.hosts != spec::Hosts::kAgents) {
    CHAOSBED_ASSIGN_OR_RETURN(data_path, claim.scratchDir());
    if (Status s = data::writeRawMnistLayout(spec.data.path, data_path); !s.isOk())
      return s.withContext("data.path");
  }

  ExperimentOutcome outcome;
  std::string run_id;
  if (!options.out_dir.empty()) {
    outcome.dir = options.out_dir;
    // A results directory holds one run: a second one would restore the first one's checkpoints as its own
    // and append to its events.
    if (Status s = checkFreshOutDir(outcome.dir); !s.isOk()) return s;
    std::error_code ec;
    std::filesystem::create_directories(outcome.dir, ec);
    if (!ec) std::filesystem::permissions(outcome.dir, std::filesystem::perms::owner_all, ec);  // holds the secret
    if (ec) return Status::ioError("cannot create " + outcome.dir + ": " + ec.message());
    run_id = std::filesystem::path(outcome.dir).filename().string() + "-" + std::to_string(getpid());
  } else {
    CHAOSBED_ASSIGN_OR_RETURN(outcome.dir, makeResultsDir(spec.output.dir, spec.metadata.name, &run_id));
  }
  const std::string& dir = outcome.dir;
  const std::string resolved_spec = spec::emitExperimentSpec(spec);
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(dir + "/spec.yaml", resolved_spec));
  // A summary exists from the start (no strategy yet, not complete) and is replaced atomically after each
  // strategy, so that a run that dies or fills the disk still leaves a parseable one.
  Provenance provenance = Provenance::atStart();
  provenance.spec_sha256 = sha256Hex(resolved_spec);
  if (!provenance.quiet)
    std::fprintf(stderr,
                 "chaosbed run: WARNING: %.0f%% of the %d cores' time was busy just before the start: the timings of "
                 "this run are not a quiet-machine measurement (summary.json: provenance.quiet = false)\n",
                 100 * provenance.cpu_busy_at_start, provenance.cores);
  RunRecord record{&provenance, &plan->rates, nullptr};
  CHAOSBED_RETURN_IF_ERROR(writeSummary(dir, spec, {}, false, record));
  CHAOSBED_ASSIGN_OR_RETURN(auto events, chaos::EventLog::open(dir + "/events.jsonl"));
  // The run's secret: every control connection proves it holds it (transports/bootstrap/secret.h). Nodes
  // read it from a 0600 file in the 0700 results directory; it is removed when the run ends.
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  };
  std::string secret_file = options.secret_file;
  RemoveOnExit remove_secret;
  Result<Secret> secret = Status::internal("no secret");
  if (secret_file.empty()) {
    secret = Secret::generate();
    secret_file = dir + "/.secret";
    ::unlink(secret_file.c_str());  // an earlier run's in a reused --out (unlink never follows a symlink)
    if (secret.isOk()) CHAOSBED_RETURN_IF_ERROR(secret->writeFile(secret_file));
    remove_secret.path = secret_file;
  } else {
    secret = Secret::readFile(secret_file);  // 0600, this user's, not a symlink: else refused, saying why
  }
  if (!secret.isOk()) return secret.status();
  // Emulated hosts (hosts: {netns: N}): the nodes reach the store on the fabric's address, the controller
  // on loopback; one server serves both.
  std::unique_ptr<EmulatedHosts> hosts;
  std::vector<net::FileDescriptor> fabric_listener;
  net::HostPort fabric_bound;
  if (spec.cluster.hosts == spec::Hosts::kNetns) {
    CHAOSBED_ASSIGN_OR_RETURN(hosts, EmulatedHosts::create(spec.cluster.netns_hosts));
    CHAOSBED_ASSIGN_OR_RETURN(net::FileDescriptor listener, hosts->listenInFabric(&fabric_bound));
    fabric_listener.push_back(std::move(listener));
  }
  // Host agents on real machines (hosts: {agents: N}) reach the store where the spec says; nothing else does.
  std::string store_listen = "127.0.0.1:0";
  if (spec.cluster.hosts == spec::Hosts::kAgents)
    store_listen = spec.cluster.listen + (spec.cluster.listen.find(':') == std::string::npos ? ":0" : "");
  CHAOSBED_ASSIGN_OR_RETURN(auto server, startStoreServer(store_listen, *secret, std::move(fabric_listener)));
  CHAOSBED_ASSIGN_OR_RETURN(auto store, connectStore(server->address(), *secret, deadlineIn(std::chrono::seconds(10))));

  // One agent per host owns the nodes there: started here in each emulated host, or joining from the
  // machines of a real cluster through agents.json (which names the store and the secret's file, not the
  // secret).
  std::unique_ptr<chaos::HostAgents> agents;
  RemoveOnExit remove_agents_file{dir + "/agents.json"};  // it names a run that is over
  if (spec.cluster.hosts != spec::Hosts::kLocal) {
    chaos::HostAgents::Options ao;
    ao.store = store.get();
    ao.config.store = hosts ? fabric_bound.toString() : server->address();
    ao.config.secret_file = secret_file;
    ao.config.run = run_id;
    ao.config.hosts = spec.cluster.hostCount();
    ao.config.host_names = spec.cluster.host_names;
    ao.config_path = dir + "/agents.json";
    ::unlink(ao.config_path.c_str());  // an earlier run's in a reused --out
    CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(ao.config_path, ao.config.toJson().dump(2) + "\n", 0600));
    ao.log_dir = dir + "/logs";
    ao.interrupted = options.interrupted;
    if (hosts)
      for (int h = 0; h < hosts->size(); ++h) ao.netns_fds.push_back(hosts->hostFd(h));
    else if (out) {
      std::fprintf(out, "waiting for %d host agent(s) to join: chaosbed agent --agent_config %s\n", ao.config.hosts,
                   ao.config_path.c_str());
      std::fflush(out);
    }
    CHAOSBED_ASSIGN_OR_RETURN(agents, chaos::HostAgents::start(std::move(ao)));
    record.hosts = nlohmann::json::array();
    for (int h = 0; h < agents->size(); ++h) {
      const chaos::HostAgents::Host& host = agents->host(h);
      record.hosts.push_back({{"host", h}, {"hostname", host.hostname}, {"address", host.address},
                              {"device", host.device}, {"agent_pid", host.pid}, {"launched_by", host.launched_by}});
    }
  }

  // One Prometheus endpoint for the whole run; loopback unless the spec or the caller allows more.
  std::unique_ptr<MetricsExporter> metrics;
  std::optional<PrometheusTarget> target;  // removed on return, after the final scrape (declared after metrics:
                                           // destroyed before the endpoint stops)
  const std::string listen = options.metrics_addr.empty() ? spec.metrics.listen : options.metrics_addr;
  if (listen != "off") {
    const bool allow_remote = options.metrics_allow_remote || spec.metrics.allow_remote;
    auto exporter = MetricsExporter::create(listen, allow_remote);
    if (!exporter.isOk()) return exporter.status().withContext("metrics endpoint " + listen);
    metrics = std::move(*exporter);
    if (!net::isLoopbackHost(listen.substr(0, listen.rfind(':'))))
      std::fprintf(stderr, "chaosbed run: warning: the metrics endpoint listens on %s, beyond loopback: anyone who "
                   "can reach that port reads this run's metrics (there is no authentication)\n",
                   metrics->address().c_str());
    metrics->setInfo("build", {{"version", provenance.version},
                               {"revision", provenance.commit + (provenance.dirty ? "-dirty" : "")}});
    metrics->setInfo("run", {{"experiment", spec.metadata.name}, {"run_id", run_id},
                             {"seed", std::to_string(spec.seed)}, {"spec_sha256", provenance.spec_sha256}});
    // Announced to Prometheus's file_sd, so that a run on any port is scraped (prometheus_targets.h).
    const std::string targets_dir = spec.metrics.targets_dir.empty() ? defaultTargetsDir() : spec.metrics.targets_dir;
    if (targets_dir != "off") {
      auto published = PrometheusTarget::publish(
          targets_dir, claim.owner(), metrics->address(),
          {{"experiment", spec.metadata.name}, {"run_id", run_id}, {"seed", std::to_string(spec.seed)}});
      if (published.isOk()) target.emplace(std::move(*published));
      else std::fprintf(stderr, "chaosbed run: warning: not announced to Prometheus: %s\n", published.status().toString().c_str());
    }
    if (out) {
      std::fprintf(out, "metrics: http://%s/metrics%s%s\n", metrics->address().c_str(),
                   target ? " (announced in " : "", target ? (target->path() + ")").c_str() : "");
      std::fflush(out);
    }
  }

  // Node isolation only isolates when the quotas fit the machine: the largest run's workers, shards and
  // evaluator.
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

  if (out)
    std::fprintf(out, "chaosbed run %s: %zu strateg%s, %zu planned chaos action(s); results in %s\n",
                 spec.metadata.name.c_str(), spec.strategies.size(), spec.strategies.size() == 1 ? "y" : "ies",
                 plan->actions.size(), dir.c_str());
  RunContext ctx;
  ctx.spec = &spec;
  ctx.out_dir = dir;
  ctx.run_id = run_id;
  ctx.store_address = hosts ? fabric_bound.toString() : server->address();
  ctx.hosts = hosts.get();
  ctx.agents = agents.get();
  ctx.secret_file = secret_file;
  ctx.data_path = data_path;
  ctx.store = store.get();
  ctx.events = events.get();
  ctx.plan = &*plan;
  ctx.interrupted = options.interrupted;
  ctx.metrics = metrics.get();
  ctx.claim = &claim;
  ctx.await_scrape = options.metrics_await_scrape || spec.metrics.await_scrape;
  ProgressPrinter progress(out, options.tty, spec.training.target_accuracy);
  ctx.on_progress = [&progress](const Progress& p) { progress.update(p); };

  Status failure;
  for (const auto& strategy : spec.strategies) {
    if (options.interrupted && options.interrupted->load()) break;
    auto r = runStrategy(ctx, strategy);
    if (!r.isOk()) {
      if (out && options.tty) std::fprintf(out, "\n");  // end the status line before the error
      failure = r.status().withContext(strategy.label);
      break;
    }
    progress.done(strategy.label, r->stop_reason);
    outcome.results.push_back(std::move(*r));
    // Interim files, so that a crash keeps what was measured; the final write below reports a failure.
    (void)writeSummary(dir, spec, outcome.results, false, record);
    (void)writeTimeseries(dir, outcome.results);
  }
  outcome.interrupted = options.interrupted && options.interrupted->load();
  outcome.complete = !outcome.interrupted && failure.isOk();
  // Every result file is attempted, whatever failed before it; the first failure is reported.
  provenance.end();
  Status written = writeSummary(dir, spec, outcome.results, outcome.complete, record);
  if (Status s = writeTimeseries(dir, outcome.results); !s.isOk() && written.isOk()) written = s;
  const Status report_written = report::writeReport(dir);
  if (!report_written.isOk()) std::fprintf(stderr, "chaosbed run: report.html: %s\n", report_written.toString().c_str());
  const std::string& gateway = options.push_gateway.empty() ? spec.metrics.push_gateway : options.push_gateway;
  if (metrics && !gateway.empty()) {
    if (Status s = metrics->push(gateway, spec.metadata.name, deadlineIn(kPushDeadline)); !s.isOk())
      std::fprintf(stderr, "chaosbed run: push to %s: %s\n", gateway.c_str(), s.toString().c_str());
  }
  if (out)
    std::fprintf(out, "\n%s%s%s%s%s%s\nresults: %s\n%s%s%s",
                 comparisonTable(outcome.results, spec.training.target_accuracy).c_str(),
                 spec.workload.emulate.enabled() ? (emulationNote(spec) + "\n").c_str() : "",
                 emulationWarnings(outcome.results).c_str(), bottleneckWarnings(outcome.results).c_str(),
                 resolutionWarnings(outcome.results).c_str(),
                 spec.cluster.simulate ? (std::string(kSimulatedNote) + "\n").c_str() : "",
                 dir.c_str(), report_written.isOk() ? "report:  " : "", report_written.isOk() ? dir.c_str() : "",
                 report_written.isOk() ? "/report.html\n" : "");
  // Let Prometheus scrape the final values (a batch job can also push them): with await_scrape, wait for that
  // scrape; otherwise linger until the next scrape of the scraper seen so far, or 1.5 s when none was seen.
  if (metrics) {
    if (ctx.await_scrape) {
      (void)awaitScrape(*metrics, "of the final values");  // it says when no scrape came
    } else {
      double linger_s = 1.5;
      if (auto interval = metrics->scrapeInterval()) linger_s = std::clamp(1.5 * *interval + 0.5, linger_s, 30.0);
      // Linger only: a scraper that does not come is not an error.
      (void)metrics->awaitScrape(deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(linger_s))));
    }
  }
  if (!failure.isOk()) return failure;
  if (!written.isOk()) return written;
  return outcome;
}

}  // namespace chaosbed::run
