#pragma once
// ExperimentSpec: a chaosbed experiment file (YAML), parsed, defaulted and validated.
//
//   apiVersion: chaosbed/v1alpha1          # required, exactly this
//   kind: Experiment                       # required
//   metadata: {name: spot-preemption, description: ..., labels: {team: ml}}   # name required
//   seed: 42                               # default 1; training.seed defaults to it
//   cluster: {workers: 4, servers: 1, cpu_per_node: 0.4, transport: ucx,
//             hosts: local | {netns: N},   # N emulated hosts: network namespaces on this machine
//             failure_detection: {heartbeat_s: 5, timeout_s: 30}}
//   model: {kind: mlp, layers: [784, 256, 128, 10]}    # layers: data dims first, classes last; kind: mlp | cnn | resnet (no layers)
//   data: {dataset: fashion-mnist, path: /usr/share/datasets/fashion-mnist}
//         # synthetic: {dataset: synthetic, samples: 8192, dims: 32, classes: 4}
//   training: {batch_per_worker, learning_rate, momentum, weight_decay, seed, target_accuracy, time_limit_s,
//              eval_interval_s, eval_interval_steps, sustained_evals, checkpoint_interval_s, max_steps,
//              collective_timeout_s}
//   strategies:                            # required, at least one; labels unique
//     - {name: mirrored, label: m, on_failure: restart|elastic, backup_workers: 0, checkpoint_on_notice: false,
//        training: {learning_rate: 0.1}}     # recipe overrides: batch_per_worker, learning_rate, momentum, weight_decay
//     - {name: parameter_server, on_server_failure: shard_restart|job_restart, max_staleness: null, shards: 1,
//        checkpoint_on_notice: false}
//   chaos: {...}                           # parsed by chaos::parseChaosSpec (chaos/model/spec.h)
//   metrics: {listen: 127.0.0.1:9464, push_gateway: http://host:9091, allow_remote: false, await_scrape: false,
//             targets_dir: /run/chaosbed-targets}   # file_sd announcements; off = none
//            # listen must be loopback (127.0.0.0/8, [::1], localhost) unless allow_remote: true
//   output: {dir: results}
//   sweep: {grid: {cluster.workers: [2, 4, 8]}, repeats: 3}   # or seeds: [1, 2, 3]
//
// Contract: parsing never throws and never stops at the first problem; every problem becomes a
// config::Diagnostic "file:line:col: field: message". Options that do not apply to a strategy or dataset
// are errors, not silently ignored. The result has every default filled in; emitExperimentSpec() writes it
// back as YAML that parses to an equal spec.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/model/emulation.h"
#include "core/strategies/strategy_kind.h"
#include "chaos/model/spec.h"
#include "core/config/config.h"
#include "transports/base/status.h"

namespace chaosbed::spec {

inline constexpr const char* kApiVersion = "chaosbed/v1alpha1";
inline constexpr const char* kKind = "Experiment";

enum class Transport : uint8_t { kUcx, kNccl };
enum class Hosts : uint8_t { kLocal, kNetns, kAgents };
enum class Dataset : uint8_t { kFashionMnist, kMnist, kSynthetic };
using ::chaosbed::StrategyKind;  // core/strategies/strategy_kind.h: one enum from the spec to the nodes
enum class OnFailure : uint8_t { kRestart, kElastic };
enum class OnServerFailure : uint8_t { kShardRestart, kJobRestart };

// The spelling used in spec files: "ucx", "netns", "fashion-mnist", "parameter_server", "shard_restart", ...
const char* name(Transport v);
const char* name(Hosts v);
const char* name(Dataset v);
const char* name(StrategyKind v);
const char* name(OnFailure v);
const char* name(OnServerFailure v);

struct Metadata {
  std::string name;  // [A-Za-z0-9._-]+: it names result directories and Prometheus label values
  std::string description;
  std::map<std::string, std::string> labels;
  bool operator==(const Metadata&) const = default;
};

// How long the cluster takes to declare a silent node lost (a vanished host, a node paused for too long).
// Liveness is checked every heartbeat_s; a node whose heartbeat has not changed for timeout_s is declared
// lost and fenced (SIGKILL), so that the strategy recovers as from a crash. The detection delay lies in
// [timeout_s - heartbeat_s, timeout_s + heartbeat_s]. The defaults are PyTorch elastic's keep-alive (every
// 5 s) and a timeout between its 15 s (3 missed keep-alives) and TensorFlow's collective health check
// (every 30 s, 10 s timeout); see docs/design.md.
struct FailureDetectionSpec {
  double heartbeat_s = 5;   // (0, 3600]
  double timeout_s = 30;    // [heartbeat_s, 86400]
  bool operator==(const FailureDetectionSpec&) const = default;
};

struct ClusterSpec {
  int workers = 0;           // required, in [1, 1024]
  int servers = 1;           // parameter-server processes; >= 1 when a parameter_server strategy is listed
  double cpu_per_node = 0;   // CPU quota per node in cores; 0 = no quota
  Transport transport = Transport::kUcx;
  Hosts hosts = Hosts::kLocal;
  int netns_hosts = 0;       // hosts: {netns: N}: N in [1, kMaxNetnsHosts]; 0 otherwise
  // hosts: {agents: N, listen: ADDRESS}: N host agents join (chaosbed agent, started by srun, mpirun, a pod or
  // by hand on each machine); the controller's store listens on ADDRESS (an IPv4 address of this machine,
  // optionally :port; never a wildcard). agent_hosts is 0 otherwise.
  int agent_hosts = 0;
  std::string listen = "127.0.0.1";
  // hosts: {agents: N, names: [machine, ...]}: host i is the machine named names[i] (its hostname, or the
  // hostname's first label): an agent joins as the first free host of its machine's name, and placement
  // then puts nodes on machines by name. Empty: hosts are numbered in the order the agents join.
  std::vector<std::string> host_names;
  // hosts: {netns | agents: N, placement: {node: host}}: nodes placed by name; the others round-robin in
  // launch order (workers, servers, the evaluator) over every host.
  std::map<std::string, int> placement;
  int hostCount() const { return hosts == Hosts::kNetns ? netns_hosts : hosts == Hosts::kAgents ? agent_hosts : 0; }
  // Nodes take part in the control plane only (ready, stats, events, membership, link commands) and train
  // nothing: for measuring the controller and the store at scale. Results carry no accuracy.
  bool simulate = false;
  FailureDetectionSpec failure_detection;
  bool operator==(const ClusterSpec&) const = default;
};

struct ModelSpec {
  std::string kind = "mlp";  // mlp | cnn | resnet (core/model/model.h)
  std::vector<int> layers;   // mlp default {dims, 256, 128, classes}; cnn, resnet: {dims, classes}
  bool operator==(const ModelSpec&) const = default;
};

struct DataSpec {
  Dataset dataset = Dataset::kFashionMnist;
  std::string path;      // fashion-mnist/mnist: directory of the IDX files (relative: to the spec's folder)
  int64_t samples = 0;   // synthetic only (default 8192); 0 for the image datasets
  int dims = 784;        // input features: 784 for the image datasets; synthetic default 32
  int classes = 10;      // 10 for the image datasets; synthetic default 4
  bool operator==(const DataSpec&) const = default;
};

struct TrainingSpec {
  int batch_per_worker = 64;
  double learning_rate = 0.05;
  double momentum = 0.9;               // [0, 1)
  double weight_decay = 0;
  int64_t seed = 1;                    // default: the top-level seed
  double target_accuracy = 0.85;       // (0, 1]
  double time_limit_s = 300;
  double eval_interval_s = 1.0;  // snapshots that often; by steps, how often the newest one is evaluated
  // Snapshots every N mini-batch gradients instead (the unit of the summary's `steps`: a synchronous step of
  // W workers is W of them), so that strategies are evaluated after equal amounts of training, and a TTA is
  // resolved to N (the evaluator evaluates every snapshot around a crossing of the target). 0: by seconds.
  int64_t eval_interval_steps = 0;
  // The target counts as reached (and the run stops) at the k-th consecutive evaluation at or above it;
  // tta_sustained_seconds is the first of those k. tta_seconds stays the first crossing.
  int sustained_evals = 3;                // [1, 100]
  double checkpoint_interval_s = 5.0;
  std::optional<int64_t> max_steps;    // per worker; none = until the target or the time limit
  // A collective (or a PS round trip) that makes no progress this long fails with Timeout: a paused or
  // partitioned peer then costs a recovery instead of a hang.
  double collective_timeout_s = 60;
  bool operator==(const TrainingSpec&) const = default;
};

// The fields of `training` that make a strategy's recipe. Each strategy may override them
// (strategies[i].training), so that strategies are compared each at its own best settings (`chaosbed
// tune`); everything else in `training` (target, limits, intervals, seed) is shared, or the results would not
// compare.
struct Recipe {
  int batch_per_worker = 64;
  double learning_rate = 0.05;
  double momentum = 0.9;
  double weight_decay = 0;
  bool operator==(const Recipe&) const = default;
};

struct StrategySpec {
  StrategyKind kind = StrategyKind::kMirrored;  // `name:` in the file
  std::string label;                            // unique; default: the name
  Recipe recipe;                                // resolved: training's, overridden by strategies[i].training
  bool checkpoint_on_notice = false;            // checkpoint when a preemption notice arrives
  // mirrored only
  OnFailure on_failure = OnFailure::kRestart;
  int backup_workers = 0;                       // [0, workers - 1]
  // parameter_server only
  OnServerFailure on_server_failure = OnServerFailure::kShardRestart;
  std::optional<int> max_staleness;             // none = fully asynchronous; 0 = synchronous PS
  int shards = 0;                               // default: cluster.servers
  bool operator==(const StrategySpec&) const = default;
};

// The `chaos:` section: the YAML as written (for the resolved spec and the results directory) and its parse.
struct ChaosSection {
  YAML::Node yaml;          // null when the spec has no chaos section
  chaos::ChaosSpec parsed;  // from chaos::parseChaosSpec
  // Equal when the YAML is equal (the parse is a function of it).
  bool operator==(const ChaosSection& other) const;
};

struct MetricsSpec {
  std::string listen = "127.0.0.1:9464";  // host:port of the Prometheus exporter; port 0 = any free port
  std::string push_gateway;               // empty = none; else [http://]host:port[/path] (pushed with a 10 s deadline)
  // The exporter is unauthenticated: a listen host other than loopback is an error unless this is set.
  bool allow_remote = false;
  // Each strategy starts training only once a scrape has seen its series at zero, and the run exits only
  // once a scrape has taken its final values (each wait bounded): for CI, where Prometheus must see every run.
  bool await_scrape = false;
  // Where the run announces its endpoint to Prometheus's file_sd (experiments/run/prometheus_targets.h):
  // empty = the host's default (/run/chaosbed-targets as root), "off" = nowhere.
  std::string targets_dir;
  bool operator==(const MetricsSpec&) const = default;
};

struct OutputSpec {
  std::string dir = "results";  // relative to the working directory of `chaosbed run`
  bool operator==(const OutputSpec&) const = default;
};

struct SweepAxis {
  std::string path;                 // dotted path into the spec ("cluster.workers")
  std::vector<std::string> values;  // each value as YAML text ("8", "null", "[784, 64, 10]")
  bool operator==(const SweepAxis&) const = default;
};

struct SweepSpec {
  std::vector<SweepAxis> grid;  // in file order; the sweep is their cross product
  std::vector<int64_t> seeds;   // one run per seed for each grid point; default: seed, seed+1, ... (repeats)
  bool operator==(const SweepSpec&) const = default;
};

// One run of a sweep: the overrides to apply (in order) and the top-level seed.
struct SweepPoint {
  std::vector<std::pair<std::string, std::string>> overrides;  // (path, YAML value)
  int64_t seed = 0;
  bool operator==(const SweepPoint&) const = default;
};

// workload.emulate: the small real model behaves on the wire and the clock like a named large one
// (core/model/emulation.h). Disabled (emulate.model empty) unless given.
struct WorkloadSpec {
  model::EmulationSpec emulate;
  bool operator==(const WorkloadSpec&) const = default;
};

struct ExperimentSpec {
  std::string api_version = kApiVersion;
  std::string kind = kKind;
  Metadata metadata;
  int64_t seed = 1;
  ClusterSpec cluster;
  ModelSpec model;
  WorkloadSpec workload;
  DataSpec data;
  TrainingSpec training;
  std::vector<StrategySpec> strategies;
  ChaosSection chaos;
  MetricsSpec metrics;
  OutputSpec output;
  std::optional<SweepSpec> sweep;

  bool hasParameterServer() const;
  const StrategySpec* strategy(const std::string& label) const;  // nullptr when no strategy has the label
  bool operator==(const ExperimentSpec&) const = default;
};

// Parses and validates a spec document; `file` names it in diagnostics and anchors relative paths. Every
// problem is added to `diagnostics`; returns nullopt when there was any.
std::optional<ExperimentSpec> parseExperimentSpec(const YAML::Node& doc, const std::string& file,
                                                  config::Diagnostics* diagnostics);

// Reads `path`, applies `overrides` ("cluster.workers=8", see core/config/override.h) in order, and parses.
// An unreadable file, a YAML syntax error or a bad override is a diagnostic like any other.
std::optional<ExperimentSpec> readExperimentSpec(const std::string& path, const std::vector<std::string>& overrides,
                                                 config::Diagnostics* diagnostics);

// readExperimentSpec as a Result: InvalidArgument with one diagnostic per line.
Result<ExperimentSpec> loadExperimentSpec(const std::string& path, const std::vector<std::string>& overrides = {});

// What the spec needs from this machine, checked by `validate` and `run` before anything starts: the data
// set's IDX files (raw or .gz) under data.path. Errors point at data.path (or data.dataset when the path is
// the default) in `file`.
void checkDataFiles(const std::string& file, const ExperimentSpec& spec, config::Diagnostics* diagnostics);

// What is wrong with a Pushgateway address ([http://]host:port[/path]), or "" when nothing is: the rule of
// metrics.push_gateway, shared by the --push_gateway flag.
std::string pushGatewayProblem(std::string_view url);

// The resolved spec (every default filled in) as YAML text; parseExperimentSpec of it gives an equal spec.
std::string emitExperimentSpec(const ExperimentSpec& spec);

// The runs of a sweep: the cross product of the grid (the first axis varies slowest) times the seeds.
std::vector<SweepPoint> sweepPoints(const SweepSpec& sweep);

}  // namespace chaosbed::spec
