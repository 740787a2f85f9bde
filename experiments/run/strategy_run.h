#pragma once
// Runs one strategy of an experiment: launches its nodes as processes, hosts its control plane (membership,
// stop), executes the experiment's chaos plan against it, and measures it (docs/design.md 4, "Metric definitions").
//
// The supervisor is the membership authority, like a Kubernetes operator or torchrun's rendezvous:
// - a node that dies on its own (crash, kill -9 by hand) is replaced after cluster.restart_after_s; a node
//   that chaos killed or preempted is replaced when the fault's restart_after says (maybe never);
// - mirrored/restart: when every lost worker is back, it publishes a generation with rollback (everyone
//   restores the last checkpoint); mirrored/elastic: at once a generation without the lost worker, and one
//   with it (joined) when its replacement is ready;
// - parameter_server: a worker or a shard comes back on its own (shard_restart); job_restart restarts every
//   node of the job, which then resumes from the checkpoints.
// Training stops when the evaluator reports the target accuracy, at the time limit, on interrupt, or when
// every worker has ended; each node then finishes its step and exits.

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chaos/event_log.h"
#include "chaos/model/fault.h"
#include "chaos/host_state.h"
#include "chaos/agent/host_agents.h"
#include "core/isolation/emulated_hosts.h"
#include "core/metrics/accounting.h"
#include "core/metrics/exporter.h"
#include "experiments/run/fault_episodes.h"
#include "experiments/spec/spec.h"
#include "transports/bootstrap/store.h"

namespace chaosbed::run {

// One evaluated snapshot, with the state of the run when its result arrived.
struct EvalPoint {
  double time_s = 0;  // the snapshot's time since the start of training
  int64_t step = 0;
  double accuracy = 0;
  double loss = 0;
  int64_t samples = 0;  // worker samples processed so far
  int alive = 0;        // nodes running
  bool refined = false;  // evaluated to resolve a crossing of the target (experiments/run/tta.h)
};

// One node's time so far, summed over its incarnations: a row of node_timeseries.csv. Between two samples
// of a node, the growth of each category is where its time went; what no category grew by (interval -
// growth of wall) it was not running: dead, or not yet restarted.
struct NodeSample {
  double time_s = 0;  // since the start of training
  std::string node;
  double wall_seconds = 0;
  std::array<double, kTimeCategories> seconds{};  // by TimeCategory
};

struct StrategyResult {
  std::string label;
  std::string kind;  // "mirrored" | "parameter_server"
  spec::Recipe recipe;  // the training recipe it ran with
  std::optional<double> tta_seconds;            // the first evaluation at or above the target
  std::optional<double> tta_sustained_seconds;  // the first of sustained_evals consecutive ones (tta.h)
  std::optional<int64_t> tta_steps;             // the gradients in that snapshot's parameters
  // How late the sustained TTA can be: its distance to the evaluated snapshot before it; without a TTA, the
  // median time between paced evaluations.
  double tta_resolution_s = 0;
  std::optional<int64_t> tta_resolution_steps;
  double final_accuracy = 0;
  double final_loss = 0;
  double wall_seconds = 0;   // start of training to stop
  std::map<std::string, std::string> host_addresses;  // hosts: {netns: N}: each node's host; empty: local
  NodeStats workers;         // summed over every worker incarnation
  NodeStats servers;         // summed over every server incarnation
  int failures = 0;          // nodes lost (faults and crashes)
  // Processes that died during training of something neither the chaos plan nor the controller did (a
  // signal or a non-zero exit): a bug or a machine problem, and a failure that no fault explains, which
  // the results then count. A run whose list is not empty measured more than its faults.
  struct Crash {
    std::string node;  // "worker-1#0": node and incarnation
    std::string how;   // "killed by signal 6 (SIGABRT)", "exited with code 3"
    double t = 0;      // run seconds
  };
  std::vector<Crash> crashes;
  int recoveries = 0;        // failures after which training progressed again
  std::vector<double> recovery_seconds;
  std::vector<std::string> recovery_causes;  // what each episode of recovery_seconds recovered from
  std::vector<FaultEpisode> fault_episodes;  // per applied fault: until the workers' pace was back
  // The longest stretch of training time in which the workers completed no step (checked every 500 ms, so
  // to that resolution): a stall shows here whatever its cause.
  double longest_stall_seconds = 0;
  // The worst |wall - booked| / wall over the final reports of worker and server processes (a process killed
  // mid-interval sends none), and which process it was ("worker-1#0": node and incarnation).
  double accounting_residual = 0;
  std::string accounting_residual_node;
  // A node the others spent more than half their time waiting for (diagnoseBottleneck); none otherwise.
  struct Bottleneck {
    std::string node;              // "ps-0", or the straggling "worker-2"
    double waiting_fraction = 0;   // of the workers' wall, waiting for it (server or peer idle)
    std::string why;               // what the node itself did meanwhile, in words
  };
  std::optional<Bottleneck> bottleneck;
  int faults_applied = 0;
  int64_t chaos_leaks = 0;
  std::vector<EvalPoint> timeline;
  std::vector<NodeSample> node_samples;  // every node about once a second, and at the end
  // "target", "time_limit", "workers_ended", "interrupted", "error: ...", "host_lost: ..." (the run fails)
  std::string stop_reason;
  // workload.emulate: the emulated job's wire time / compute time for this strategy's traffic pattern.
  std::optional<double> target_comm_compute_ratio;
  // The controller's own cost while this strategy trained (start to stop): the figures that limit how many
  // nodes one controller can drive (docs/design.md, "Scale").
  struct ControlPlane {
    int64_t events = 0;                   // node events taken from the store
    int64_t malformed_events = 0;         // and refused: malformed, of an unknown type or with unknown fields
    std::vector<double> event_latency_s;  // per event: from the node's append to the controller's read
    // Per tick of the supervisor's loop during training: how long it took up exits, replacements, events,
    // liveness and Supervision's decisions (a long pass delays every one of them).
    std::vector<double> supervision_pass_s;
    double cpu_seconds = 0;               // the controller process's user + system time
    double wall_seconds = 0;              // over which cpu_seconds was spent
    int64_t peak_rss_bytes = 0;           // the controller process's peak resident set so far (ru_maxrss)
    nlohmann::json toJson() const;
  } control_plane;

  // Samples rolled back: by workers (restored checkpoints) and by servers (shards restored to a checkpoint).
  int64_t samplesLost() const { return workers.samples_lost + servers.samples_lost; }
  double goodputSamplesPerSecond() const;
  double idleFraction() const;
  // The workers' transfer seconds / compute seconds (0 without compute).
  double commComputeRatio() const;
  // measured / target - 1 under workload.emulate (nullopt without a target or without compute).
  std::optional<double> commComputeOffBy() const;
  // Whether that is within kEmulationRatioTolerance (results.h): the one verdict the summary, the terminal
  // and the report show. nullopt where commComputeOffBy() is.
  std::optional<bool> commComputeOnTarget() const;
  nlohmann::json toJson() const;  // the summary.json entry (issue contract: tta_seconds, final_accuracy, ...)
  nlohmann::json recoveryEpisodes() const;  // [{seconds, cause}] in the order they ended
  nlohmann::json faultEpisodesJson() const;
  nlohmann::json crashesJson() const;
  // The longest detection delay of a fault that ended a node (from the fault to the exit the strategy
  // saw: a kill in milliseconds, a vanish after failure_detection.timeout_s); 0 without such a fault.
  double detectionSeconds() const;
  // Per role, the node-seconds of wall time and of each category, summed over every process.
  nlohmann::json nodeSeconds() const;
};

// What one line of live progress shows.
struct Progress {
  std::string label;
  double elapsed_s = 0;
  double time_limit_s = 0;
  std::optional<double> accuracy;      // of the latest evaluation
  std::optional<double> accuracy_at_s; // its snapshot time
  int64_t steps = 0;  // the workers' steps so far (the printer shows their rate since its last line)
  int alive = 0;
  int nodes = 0;
  int faults = 0;         // applied so far
  int faults_active = 0;  // in effect now
};

struct RunContext {
  const spec::ExperimentSpec* spec = nullptr;
  std::string out_dir;          // the results directory of the run
  std::string run_id;
  std::string store_address;    // the StoreServer the nodes connect to
  // hosts: {netns: N}: the emulated hosts (their kernels carry link faults between them); null otherwise.
  const EmulatedHosts* hosts = nullptr;
  // hosts: {netns | agents: N}: the host agents that run and fault the nodes (placed round-robin in launch
  // order, or by the spec's placement); null: local, this process's own launcher.
  chaos::HostAgents* agents = nullptr;
  std::string secret_file;      // the run's Secret (mode 0600), handed to the nodes by path
  std::string data_path;        // where nodes load the dataset from, when not the spec's data.path (a raw copy)
  Store* store = nullptr;       // the controller's own client of it
  chaos::EventLog* events = nullptr;   // events.jsonl
  const chaos::Plan* plan = nullptr;   // the drawn chaos schedule (shared by every strategy)
  const std::atomic<bool>* interrupted = nullptr;
  MetricsExporter* metrics = nullptr;  // optional
  // The run's claim on the host's register (chaos/host_state.h): where fault state lives, and the prefix
  // of its cgroup groups. Null: state in the results directory and groups named after run_id.
  const chaos::RunClaim* claim = nullptr;
  // metrics.await_scrape: each strategy starts training only once a scrape has seen its series at zero, and
  // the run exits only once a scrape has taken its final values (awaitScrape).
  bool await_scrape = false;
  std::function<void(const Progress&)> on_progress;  // about twice per second
};

Result<StrategyResult> runStrategy(const RunContext& ctx, const spec::StrategySpec& strategy);

// The median time between consecutive paced evaluations (0 with fewer than two): how coarsely a run that
// reached no TTA was watched.
double medianEvalGap(const std::vector<EvalPoint>& timeline);

// What the controller read of the workers at one instant: their samples so far and the nodes running.
struct Observation {
  double t = 0;
  int64_t samples = 0;
  int alive = 0;
};
// The observation at time t from readings in time order (`history`, then `latest`, the freshest): samples
// interpolated between the readings on either side of t (from 0 at time 0 before the first), the nodes alive
// as the last reading at or before t saw them. An evaluation's row is thus what was true at its snapshot's
// instant, not when the controller got to its event (which can be seconds later, in a burst).
Observation observationAt(const std::vector<Observation>& history, const Observation& latest, double t);

// Waits for a scrape that begins after the call (at most kAwaitScrapeLimit); warns once, naming `what`, when
// none comes. Returns whether one did.
inline constexpr std::chrono::seconds kAwaitScrapeLimit{20};
bool awaitScrape(MetricsExporter& metrics, const std::string& what);

}  // namespace chaosbed::run
