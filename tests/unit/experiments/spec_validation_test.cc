// experiments/spec: bad specs give exact `file:line:col: field: message` diagnostics, all of them at once.

#include <gtest/gtest.h>

#include <cctype>
#include <ostream>

#include <string>
#include <vector>

#include "experiments/spec/spec.h"

namespace chaosbed::spec {
namespace {

// Parses `text` as the file "t.yaml"; returns every diagnostic as text.
std::vector<std::string> diagnose(const std::string& text) {
  config::Diagnostics d;
  std::optional<YAML::Node> doc = config::loadYamlString(text, "t.yaml", &d);
  std::optional<ExperimentSpec> spec;
  if (doc) spec = parseExperimentSpec(*doc, "t.yaml", &d);
  EXPECT_EQ(spec.has_value(), d.empty());
  std::vector<std::string> out;
  for (const config::Diagnostic& x : d.all()) out.push_back(x.toString());
  return out;
}

// A minimal valid spec; the cases below replace its lines one at a time.
const char* const kHead =
    "apiVersion: chaosbed/v1alpha1\n"                   // 1
    "kind: Experiment\n"                                // 2
    "metadata: {name: t}\n";                            // 3
const char* const kCluster = "cluster: {workers: 4, servers: 1}\n";                  // 4
const char* const kData = "data: {dataset: synthetic, dims: 8, classes: 3}\n";      // 5
const char* const kStrategies = "strategies:\n  - name: mirrored\n  - name: parameter_server\n";  // 6-8

// The spec as a results directory's spec.yaml holds it, parsed back; nullopt (and a failure) if it does not parse.
std::optional<ExperimentSpec> reparsed(const ExperimentSpec& s) {
  config::Diagnostics d;
  auto again = parseExperimentSpec(YAML::Load(emitExperimentSpec(s)), "t.yaml", &d);
  EXPECT_TRUE(again.has_value()) << d.toString();
  return again;
}

struct BadSpec {
  const char* what;
  std::string text;
  std::vector<std::string> errors;
};

// gtest prints a parameter with PrintTo: the case's description, not its bytes.
void PrintTo(const BadSpec& b, std::ostream* os) { *os << b.what; }

class BadSpecTest : public ::testing::TestWithParam<BadSpec> {};

TEST_P(BadSpecTest, ReportsExactLocationAndMessage) {
  EXPECT_EQ(diagnose(GetParam().text), GetParam().errors) << GetParam().what;
}

std::string spec(const std::string& cluster, const std::string& data, const std::string& strategies,
                 const std::string& tail = "") {
  return std::string(kHead) + cluster + data + strategies + tail;
}

const BadSpec kBadSpecs[] = {
    {"unknown key with did-you-mean",
     spec("cluster: {wokers: 4, servers: 1}\n", kData, kStrategies),
     {"t.yaml:4:11: cluster.wokers: unknown field (did you mean 'workers'?)",
      "t.yaml:4:10: cluster.workers: missing required field"}},
    {"unknown top-level key",
     spec(kCluster, kData, kStrategies, "trainig: {learning_rate: 0.1}\n"),
     {"t.yaml:9:1: trainig: unknown field (did you mean 'training'?)"}},
    {"results that climb out of the working directory",
     spec(kCluster, kData, kStrategies, "output: {dir: ../../../../etc/cb}\n"),
     {"t.yaml:9:15: output.dir: '../../../../etc/cb' must not climb out of the directory chaosbed runs in ('..')"}},
    {"results at an absolute place chosen by the spec",
     spec(kCluster, kData, kStrategies, "output: {dir: /etc/cb}\n"),
     {"t.yaml:9:15: output.dir: '/etc/cb' must be relative to the directory chaosbed runs in (for results "
      "elsewhere, use --out)"}},
    {"wrong type",
     spec("cluster: {workers: four, servers: 1}\n", kData, kStrategies),
     {"t.yaml:4:20: cluster.workers: expected an integer, got 'four'"}},
    {"wrong type: a map where a number goes",
     spec(kCluster, kData, kStrategies, "training:\n  learning_rate: {value: 1}\n"),
     {"t.yaml:10:18: training.learning_rate: expected a number, got a map"}},
    {"out of range",
     spec("cluster: {workers: 0, servers: 1}\n", kData, kStrategies,
          "training:\n  momentum: 1.0\n  target_accuracy: 0\n"),
     {"t.yaml:4:20: cluster.workers: must be in [1, 1024], got 0",
      "t.yaml:10:13: training.momentum: must be in [0, 1), got 1.0",
      "t.yaml:11:20: training.target_accuracy: must be in (0, 1], got 0"}},
    {"bad enum",
     spec("cluster: {workers: 4, transport: tcp}\n", kData, kStrategies),
     {"t.yaml:4:34: cluster.transport: 'tcp' is not one of: ucx, nccl"}},
    {"emulated hosts need their number",
     spec("cluster: {workers: 4, hosts: netns}\n", kData, kStrategies),
     {"t.yaml:4:30: cluster.hosts: give the number of hosts: hosts: {netns: N}"}},
    {"emulated hosts: at least one",
     spec("cluster: {workers: 4, hosts: {netns: 0}}\n", kData, kStrategies),
     {"t.yaml:4:38: cluster.hosts.netns: must be in [1, 64], got 0"}},
    {"emulated hosts: one /24 of addresses",
     spec("cluster: {workers: 4, hosts: {netns: 65}}\n", kData, kStrategies),
     {"t.yaml:4:38: cluster.hosts.netns: must be in [1, 64], got 65"}},
    {"machines are not listed: their agents join",
     spec("cluster: {workers: 4, hosts: {list: [a:1]}}\n", kData, kStrategies),
     {"t.yaml:4:31: cluster.hosts.list: machines are not listed: start chaosbed agent on each (it joins the run "
      "through the results directory's agents.json) and say how many with hosts: {agents: N, listen: ADDRESS}"}},
    {"joining agents need their number",
     spec("cluster: {workers: 4, hosts: agents}\n", kData, kStrategies),
     {"t.yaml:4:30: cluster.hosts: give the number of hosts: hosts: {agents: N}"}},
    {"emulated or real hosts, not both",
     spec("cluster: {workers: 4, hosts: {netns: 2, agents: 2}}\n", kData, kStrategies),
     {"t.yaml:4:30: cluster.hosts: netns and agents exclude each other: emulated hosts on this machine, or real ones"}},
    {"the store never listens on every network",
     spec("cluster: {workers: 4, hosts: {agents: 2, listen: 0.0.0.0}}\n", kData, kStrategies),
     {"t.yaml:4:50: cluster.hosts.listen: 0.0.0.0 would listen on every network: name the address of the "
      "interface the agents reach this machine on"}},
    {"the store listens on an address, not a name",
     spec("cluster: {workers: 4, hosts: {agents: 2, listen: head-node:29500}}\n", kData, kStrategies),
     {"t.yaml:4:50: cluster.hosts.listen: expected an IPv4 address of this machine, optionally with :port (e.g. "
      "10.0.0.5 or 10.0.0.5:29500)"}},
    {"emulated hosts listen on their bridge",
     spec("cluster: {workers: 4, hosts: {netns: 2, listen: 10.0.0.5}}\n", kData, kStrategies),
     {"t.yaml:4:41: cluster.hosts.listen: emulated hosts reach the controller on their bridge; listen is for "
      "{agents: N}"}},
    {"one name per joining host",
     spec("cluster: {workers: 4, hosts: {agents: 3, names: [gpu-a, gpu-b]}}\n", kData, kStrategies),
     {"t.yaml:4:49: cluster.hosts.names: names 2 machine(s), but agents is 3: one name per host (a machine named "
      "twice runs two)"}},
    {"emulated hosts are numbered, not named",
     spec("cluster: {workers: 4, hosts: {netns: 2, names: [a, b]}}\n", kData, kStrategies),
     {"t.yaml:4:41: cluster.hosts.names: emulated hosts are numbered; names are for {agents: N}"}},
    {"a placement on a joining host that does not exist",
     spec("cluster: {workers: 4, hosts: {agents: 2, placement: {worker-1: 2}}}\n", kData, kStrategies),
     {"t.yaml:4:64: cluster.hosts.placement.worker-1: host 2 does not exist: hosts are 0..1"}},
    {"a placement names the spec's nodes",
     spec("cluster: {workers: 4, servers: 1, hosts: {netns: 2, placement: {ps-1: 1, worker-04: 0, chief-0: 0}}}\n",
          kData, kStrategies),
     {"t.yaml:4:65: cluster.hosts.placement.ps-1: no node is named 'ps-1': nodes are worker-0..worker-3, ps-0 and "
      "evaluator-0",
      "t.yaml:4:74: cluster.hosts.placement.worker-04: no node is named 'worker-04': nodes are worker-0..worker-3, ps-0 "
      "and evaluator-0",
      "t.yaml:4:88: cluster.hosts.placement.chief-0: no node is named 'chief-0': nodes are worker-0..worker-3, ps-0 and "
      "evaluator-0"}},
    {"a placement on a host that does not exist",
     spec("cluster: {workers: 4, hosts: {netns: 2, placement: {worker-1: 2}}}\n", kData, kStrategies),
     {"t.yaml:4:63: cluster.hosts.placement.worker-1: host 2 does not exist: hosts are 0..1"}},
    {"hosts is a word or a map",
     spec("cluster: {workers: 4, hosts: [1]}\n", kData, kStrategies),
     {"t.yaml:4:30: cluster.hosts: expected local, {netns: N} (N emulated hosts, network namespaces on this machine) "
      "or {agents: N} (N machines, each running chaosbed agent)"}},
    {"NCCL stays on one host",
     spec("cluster: {workers: 4, transport: nccl, hosts: {netns: 2}}\n", kData, kStrategies),
     {"t.yaml:4:40: cluster.hosts: emulated hosts carry data over UCX's TCP transport; transport: nccl runs on "
      "local hosts only"}},
    {"simulate is a flag",
     spec("cluster: {workers: 4, simulate: 256}\n", kData, kStrategies),
     {"t.yaml:4:33: cluster.simulate: expected true or false, got '256'"}},
    {"bad enum with did-you-mean",
     spec(kCluster, kData, "strategies:\n  - name: mirrored\n    on_failure: elastc\n"),
     {"t.yaml:8:17: strategies[0].on_failure: 'elastc' is not one of: restart, elastic (did you mean 'elastic'?)"}},
    {"duplicate label (a default label and an explicit one)",
     spec(kCluster, kData, "strategies:\n  - name: mirrored\n  - name: mirrored\n    label: mirrored\n"),
     {"t.yaml:9:5: strategies[1].label: duplicate label 'mirrored' (strategies[0] has it too); give each strategy "
      "a distinct label"}},
    {"missing required fields",
     "kind: Experiment\nmetadata: {description: x}\ncluster: {}\nstrategies: []\n",
     {"t.yaml:1:1: apiVersion: missing required field",
      "t.yaml:2:11: metadata.name: missing required field",
      "t.yaml:3:10: cluster.workers: missing required field",
      "t.yaml:4:13: strategies: needs at least one strategy, e.g. [{name: mirrored}]"}},
    {"options that do not apply to the strategy",
     spec(kCluster, kData,
          "strategies:\n  - name: mirrored\n    max_staleness: 2\n  - name: parameter_server\n"
          "    on_failure: elastic\n    backup_workers: 1\n"),
     {"t.yaml:8:5: strategies[0].max_staleness: applies only to parameter_server strategies",
      "t.yaml:10:5: strategies[1].on_failure: applies only to mirrored strategies (parameter_server workers carry "
      "on without a failed peer)",
      "t.yaml:11:5: strategies[1].backup_workers: applies only to mirrored strategies"}},
    {"options that do not apply to the dataset",
     spec(kCluster, "data: {dataset: fashion-mnist, dims: 8}\n", kStrategies),
     {"t.yaml:5:32: data.dims: applies only to dataset synthetic (fashion-mnist has 784 inputs and 10 classes)"}},
    {"failure detection that could not detect",
     spec("cluster:\n  workers: 4\n  failure_detection: {heartbeat_s: 10, timeout_s: 5, grace: 1}\n", kData,
          kStrategies),
     {"t.yaml:6:54: cluster.failure_detection.grace: unknown field (expected one of: heartbeat_s, timeout_s)",
      "t.yaml:6:40: cluster.failure_detection.timeout_s: timeout_s (5) must be at least heartbeat_s (10): a node "
      "cannot be declared lost before it was checked"}},
    {"failure detection out of range",
     spec("cluster: {workers: 4, failure_detection: {heartbeat_s: 0}}\n", kData, kStrategies),
     {"t.yaml:4:56: cluster.failure_detection.heartbeat_s: must be in (0, 3600], got 0"}},
    {"a strategy may not change what makes results compare",
     spec(kCluster, kData, "strategies:\n  - name: mirrored\n    training: {target_accuracy: 0.5, learning_rat: 1}\n"),
     {"t.yaml:8:16: strategies[0].training.target_accuracy: is shared by every strategy, so that their results "
      "compare; set it in the top-level training",
      "t.yaml:8:38: strategies[0].training.learning_rat: unknown field (did you mean 'learning_rate'?)"}},
    {"a transport error that no strategy of the spec can meet",
     spec(kCluster, kData, "strategies:\n  - name: parameter_server\n",
          "chaos:\n  faults:\n    - {name: e, action: transport_error, target: {role: worker}, at_s: 1,\n"
          "       params: {error: abort_collective}}\n"),
     {"t.yaml:11:17: chaos.faults[0].params.error: abort_collective fails a collective step, and no strategy of "
      "this spec has collectives (only mirrored does)"}},
    {"a link fault in the kernel needs emulated hosts",
     spec(kCluster, kData, kStrategies,
          "chaos:\n  faults:\n    - {name: l, action: link, at_s: 1, target: {between: [{nodes: worker-0}, {nodes: worker-1}]},\n"
          "       params: {bandwidth_mbps: 10, via: kernel}}\n"),
     {"t.yaml:12:37: chaos.faults[0].params.via: link faults in the kernel are faults between emulated hosts: set "
      "cluster.hosts: {netns: N}, or use via: auto"}},
    {"added latency is not the kernel's here",
     spec("cluster: {workers: 4, hosts: {netns: 4}}\n", kData, kStrategies,
          "chaos:\n  faults:\n    - {name: l, action: link, at_s: 1, target: {between: [{nodes: worker-0}, {nodes: worker-1}]},\n"
          "       params: {latency_ms: 5, via: kernel}}\n"),
     {"t.yaml:12:32: chaos.faults[0].params.via: added latency needs the in-process shaper (these kernels have no "
      "netem); use via: auto or shaper"}},
    {"who carries out a link fault: one of three",
     spec(kCluster, kData, kStrategies,
          "chaos:\n  faults:\n    - {name: l, action: link, at_s: 1, target: {between: [{nodes: worker-0}, {nodes: worker-1}]},\n"
          "       params: {partition: true, via: tc}}\n"),
     {"t.yaml:12:39: chaos.faults[0].params.via: 'tc' is not one of: auto, kernel, shaper"}},
    {"evaluation every zero steps",
     spec(kCluster, kData, kStrategies, "training: {eval_interval_steps: 0}\n"),
     {"t.yaml:9:33: training.eval_interval_steps: must be in [1, 1099511627776], got 0"}},
    {"wrong apiVersion and kind",
     "apiVersion: chaosbed/v1\nkind: Suite\nmetadata: {name: t}\n" + std::string(kCluster) + kData + kStrategies,
     {"t.yaml:1:13: apiVersion: unsupported version 'chaosbed/v1'; this chaosbed reads chaosbed/v1alpha1",
      "t.yaml:2:7: kind: unsupported kind 'Suite'; expected Experiment"}},
    {"YAML syntax error",
     std::string(kHead) + "cluster: {workers: 4\n" + kData,
     {"t.yaml:5:5: YAML syntax error: end of map flow not found"}},
    {"backup workers must leave one worker",
     spec(kCluster, kData, "strategies:\n  - {name: mirrored, backup_workers: 4}\n"),
     {"t.yaml:7:22: strategies[0].backup_workers: must be less than cluster.workers (4), got 4"}},
    {"a parameter server strategy needs servers",
     spec("cluster: {workers: 4, servers: 0}\n", kData, kStrategies),
     {"t.yaml:4:23: cluster.servers: must be >= 1: strategies[1] is a parameter_server strategy"}},
    {"layers must match the data",
     spec(kCluster, kData, kStrategies, "model: {layers: [784, 64, 10]}\n"),
     {"t.yaml:9:18: model.layers[0]: the first layer must be the data's input dims (8 for synthetic), got 784",
      "t.yaml:9:27: model.layers[2]: the last layer must be the number of classes (3 for synthetic), got 10"}},
    {"a convolutional net takes no layers",
     spec(kCluster, "data: {dataset: synthetic, dims: 64, classes: 3}\n", kStrategies,
          "model: {kind: cnn, layers: [64, 3]}\n"),
     {"t.yaml:9:20: model.layers: applies only to kind mlp (a cnn has a fixed shape)"}},
    {"a convolutional net needs square images",
     spec(kCluster, kData, kStrategies, "model: {kind: resnet}\n"),
     {"t.yaml:9:9: model.kind: resnet takes square one-channel images with a side that is a multiple of 4 and "
      "at least 8; data.dims 8 is not (784 = 28 x 28 is)"}},
    {"an unknown model kind",
     spec(kCluster, kData, kStrategies, "model: {kind: vgg16}\n"),
     {"t.yaml:9:15: model.kind: 'vgg16' is not one of: mlp, cnn, resnet"}},
    {"an unknown emulated model, and no network",
     spec(kCluster, kData, kStrategies, "workload: {emulate: {model: resnet-50, accelerator: v100}}\n"),
     {"t.yaml:9:29: workload.emulate.model: 'resnet-50' is not one of: resnet50, vgg16, bert-base, gpt2-small "
      "(did you mean 'resnet50'?)",
      "t.yaml:9:21: workload.emulate.network_gbps: missing required field"}},
    {"max_staleness must be null or >= 0",
     spec(kCluster, kData, "strategies:\n  - {name: parameter_server, max_staleness: -1}\n"),
     {"t.yaml:7:45: strategies[0].max_staleness: must be >= 0, got -1"}},
    {"chaos must be a map",
     spec(kCluster, kData, kStrategies, "chaos: [kill]\n"),
     {"t.yaml:9:8: chaos: expected a map, got a list"}},
    {"metrics listen address",
     spec(kCluster, kData, kStrategies, "metrics: {listen: localhost}\n"),
     {"t.yaml:9:19: metrics.listen: expected host:port, got 'localhost'"}},
    {"metrics listen beyond loopback",
     spec(kCluster, kData, kStrategies, "metrics: {listen: 0.0.0.0:9464}\n"),
     {"t.yaml:9:19: metrics.listen: '0.0.0.0' is not a loopback address (127.0.0.1, [::1], localhost); the endpoint "
      "is unauthenticated, so exposing it needs metrics.allow_remote: true"}},
    {"metrics listen on a name that may resolve anywhere",
     spec(kCluster, kData, kStrategies, "metrics: {listen: 'myhost:9464', allow_remote: false}\n"),
     {"t.yaml:9:19: metrics.listen: 'myhost' is not a loopback address (127.0.0.1, [::1], localhost); the endpoint "
      "is unauthenticated, so exposing it needs metrics.allow_remote: true"}},
    {"a relative targets directory",
     spec(kCluster, kData, kStrategies, "metrics: {targets_dir: targets}\n"),
     {"t.yaml:9:24: metrics.targets_dir: must be an absolute path (the directory Prometheus's file_sd watches) or "
      "'off'"}},
    {"empty file", "", {"t.yaml:1:1: the spec is empty; it needs at least apiVersion, kind, metadata, cluster and strategies"}},
    {"sweep value that breaks the spec",
     spec(kCluster, kData, kStrategies, "sweep:\n  grid:\n    cluster.workers: [2, 0]\n"),
     {"t.yaml:11:26: sweep.grid.cluster.workers[1]: with cluster.workers = 0: cluster.workers: must be in [1, 1024], "
      "got 0"}},
};

// "sweep value that breaks the spec" -> "SweepValueThatBreaksTheSpec", with the index for uniqueness.
std::string badSpecName(const ::testing::TestParamInfo<BadSpec>& info) {
  std::string name;
  bool upper = true;
  for (const char* c = info.param.what; *c; ++c) {
    if (!std::isalnum(static_cast<unsigned char>(*c))) {
      upper = true;
      continue;
    }
    name += upper ? char(std::toupper(static_cast<unsigned char>(*c))) : *c;
    upper = false;
  }
  return name + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Spec, BadSpecTest, ::testing::ValuesIn(kBadSpecs), badSpecName);

TEST(SpecValidation, ReportsEveryErrorInOnePass) {
  const std::string text =
      "apiVersion: chaosbed/v1alpha1\n"
      "kind: Experiment\n"
      "metadata: {name: 'bad name'}\n"
      "cluster: {workers: -2, transport: ucxx}\n"
      "training: {learning_rate: 0, batch_per_worker: 1.5}\n"
      "strategies:\n"
      "  - {name: mirored}\n"
      "  - {name: parameter_server, shards: 0, max_stalenes: 1}\n"
      "output: {dir: ''}\n";
  EXPECT_EQ(diagnose(text),
            (std::vector<std::string>{
                "t.yaml:3:12: metadata.name: 'bad name' may only use letters, digits, '.', '_' and '-' (at most 128)",
                "t.yaml:4:20: cluster.workers: must be in [1, 1024], got -2",
                "t.yaml:4:35: cluster.transport: 'ucxx' is not one of: ucx, nccl (did you mean 'ucx'?)",
                "t.yaml:5:48: training.batch_per_worker: expected an integer, got '1.5'",
                "t.yaml:5:27: training.learning_rate: must be > 0, got 0",
                "t.yaml:7:12: strategies[0].name: 'mirored' is not one of: mirrored, parameter_server (did you mean "
                "'mirrored'?)",
                "t.yaml:8:41: strategies[1].max_stalenes: unknown field (did you mean 'max_staleness'?)",
                "t.yaml:8:38: strategies[1].shards: must be in [1, 1024], got 0",
                "t.yaml:9:15: output.dir: must not be empty",
            }));
}

// What `chaos plan` and `run` would reject for the spec alone, validate rejects too, at the fault's place;
// and no number may be infinite.
TEST(SpecValidation, RejectsWhatTheChaosPlanOrTheRunWould) {
  struct Case {
    const char* what;
    std::string fault;      // one entry of chaos.faults, on line 11
    std::string location;   // the diagnostic's prefix
    std::string message;    // a part of its text
  };
  const Case cases[] = {
      {"a target index beyond the cluster", "{name: f, action: kill, target: {role: worker, index: 9}, at_s: 1}",
       "t.yaml:11:7: chaos.faults[0]", "has no index 9"},
      {"an unknown role", "{name: f, action: kill, target: {role: gpu, index: 0}, at_s: 1}", "t.yaml:11:7: chaos.faults[0]",
       "gpu"},
      {"every server down at once", "{name: f, action: kill, target: {role: ps}, at_s: 1}", "t.yaml:11:7: chaos.faults[0]",
       ""},
      {"an unbounded plan", "{name: f, action: pause, target: {role: worker}, duration_s: 0.001, "
                            "schedule: {poisson: {rate_per_node_hour: 1e12}}}",
       "t.yaml:11:7: chaos.faults[0]", "plans more than 100000 actions"},
      {"an infinite rate", "{name: f, action: pause, target: {role: worker}, duration_s: 1, "
                           "schedule: {poisson: {rate_per_node_hour: .inf}}}",
       "t.yaml:11:", "must be a finite number"},
      {"a duration under 1 ms", "{name: f, action: pause, target: {role: worker, index: 0}, at_s: 1, duration_s: 1e-7}",
       "t.yaml:11:", "duration_s: must be >= 0.001"},
      {"an infinite latency", "{name: f, action: link, target: {between: [{role: worker, index: 0}, {role: worker, index: 1}]}, "
                              "at_s: 1, duration_s: 1, "
                              "params: {latency_ms: .inf}}",
       "t.yaml:11:", "must be a finite number"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const auto errors = diagnose(spec(kCluster, kData, kStrategies, "chaos:\n  faults:\n    - " + c.fault + "\n"));
    ASSERT_EQ(errors.size(), 1u) << ::testing::PrintToString(errors);
    EXPECT_EQ(errors[0].rfind(c.location, 0), 0u) << errors[0];
    EXPECT_NE(errors[0].find(c.message), std::string::npos) << errors[0];
  }
  EXPECT_EQ(diagnose(spec(kCluster, kData, kStrategies, "training: {learning_rate: .inf}\n")),
            (std::vector<std::string>{"t.yaml:9:27: training.learning_rate: must be a finite number > 0, got .inf"}));
}

TEST(SpecValidation, ASpecOverOneMiBIsRefusedBeforeParsing) {
  config::Diagnostics d;
  const std::string text = std::string(kHead) + "# " + std::string(config::kMaxSpecBytes, 'x') + "\n";
  EXPECT_FALSE(config::loadYamlString(text, "big.yaml", &d).has_value());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(d.all()[0].toString().find("at most 1 MiB"), std::string::npos) << d.toString();
}

// Each strategy runs with its own recipe: training's fields, overridden per strategy; the rest is shared.
TEST(SpecValidation, AStrategyOverridesItsRecipeAndInheritsTheRest) {
  config::Diagnostics d;
  std::optional<ExperimentSpec> s = parseExperimentSpec(
      YAML::Load(spec(kCluster, kData,
                      "strategies:\n  - name: mirrored\n  - name: parameter_server\n"
                      "    training: {learning_rate: 0.02, momentum: 0.5}\n",
                      "training: {learning_rate: 0.1, batch_per_worker: 16}\n")),
      "t.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_EQ(s->strategies[0].recipe, (Recipe{16, 0.1, 0.9, 0}));
  EXPECT_EQ(s->strategies[1].recipe, (Recipe{16, 0.02, 0.5, 0}));
}

TEST(SpecValidation, AcceptsTheMinimalSpecWithDefaults) {
  config::Diagnostics d;
  std::optional<ExperimentSpec> s =
      parseExperimentSpec(YAML::Load(spec(kCluster, kData, kStrategies)), "dir/t.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_EQ(s->model.layers, (std::vector<int>{8, 64, 3}));
  EXPECT_EQ(s->training.seed, s->seed);
  ASSERT_EQ(s->strategies.size(), 2u);
  EXPECT_EQ(s->strategies[0].label, "mirrored");
  EXPECT_EQ(s->strategies[1].label, "parameter_server");
  EXPECT_EQ(s->strategies[1].shards, 1);
  EXPECT_EQ(s->strategies[1].max_staleness, std::nullopt);
  EXPECT_TRUE(s->hasParameterServer());
  EXPECT_EQ(s->strategy("parameter_server"), &s->strategies[1]);
  EXPECT_EQ(s->strategy("nope"), nullptr);
  EXPECT_TRUE(s->chaos.parsed.faults.empty());
  EXPECT_EQ(s->metrics.listen, "127.0.0.1:9464");
  EXPECT_FALSE(s->sweep.has_value());
}

TEST(SpecValidation, MetricsBeyondLoopbackNeedAllowRemote) {
  for (const char* listen : {"127.0.0.1:0", "localhost:9464", "'[::1]:9464'"}) {
    config::Diagnostics d;
    auto s = parseExperimentSpec(YAML::Load(spec(kCluster, kData, kStrategies, std::string("metrics: {listen: ") + listen + "}\n")),
                                 "t.yaml", &d);
    EXPECT_TRUE(s.has_value()) << listen << ": " << d.toString();
    if (s) {
      EXPECT_FALSE(s->metrics.allow_remote);
    }
  }
  config::Diagnostics d;
  auto s = parseExperimentSpec(
      YAML::Load(spec(kCluster, kData, kStrategies, "metrics: {listen: 0.0.0.0:9464, allow_remote: true}\n")), "t.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_TRUE(s->metrics.allow_remote);
  // The resolved spec keeps the permission: it reads back equal.
  auto again = reparsed(*s);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->metrics, s->metrics);
  EXPECT_NE(diagnose(spec(kCluster, kData, kStrategies, "metrics: {allow_remote: please}\n")), std::vector<std::string>{});
}

TEST(SpecValidation, RelativeDataPathIsAnchoredAtTheSpec) {
  config::Diagnostics d;
  std::optional<ExperimentSpec> s = parseExperimentSpec(
      YAML::Load(spec(kCluster, "data: {dataset: mnist, path: ../data/mnist}\n", kStrategies)),
      "/srv/specs/t.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_EQ(s->data.path, "/srv/data/mnist");
  EXPECT_EQ(s->model.layers, (std::vector<int>{784, 256, 128, 10}));
}

TEST(SpecValidation, EveryEmulationProfileIsAcceptedAndEmittedBack) {
  // The spec's choices are listed by hand (ConfigNode::oneOf takes literals); this keeps them equal to the
  // profiles core/model/emulation.cc knows.
  for (const std::string& m : model::modelProfileNames()) {
    for (const std::string& a : model::acceleratorProfileNames()) {
      SCOPED_TRACE(m + " on " + a);
      config::Diagnostics d;
      auto s = parseExperimentSpec(YAML::Load(spec(kCluster, kData, kStrategies,
                                                   "workload: {emulate: {model: " + m + ", accelerator: " + a +
                                                       ", network_gbps: 25}}\n")),
                                   "t.yaml", &d);
      ASSERT_TRUE(s.has_value()) << d.toString();
      EXPECT_EQ(s->workload.emulate.model, m);
      EXPECT_EQ(s->workload.emulate.network_gbps, 25);
      auto again = reparsed(*s);
      ASSERT_TRUE(again.has_value());
      EXPECT_EQ(again->workload, s->workload);
    }
  }
  EXPECT_EQ(model::modelProfileNames().size(), 4u);
  EXPECT_EQ(model::acceleratorProfileNames().size(), 3u);
}

TEST(SpecValidation, EmulatedHostsAndThePlacementAreEmittedBackAsTheyWereGiven) {
  // The results directory's spec.yaml of a run on emulated hosts must parse back to the same hosts (it was
  // once emitted as `hosts: netns`, which the parser refuses).
  for (const std::string hosts : {"{netns: 3}", "{netns: 3, placement: {ps-0: 2, evaluator-0: 1}}"}) {
    SCOPED_TRACE(hosts);
    config::Diagnostics d;
    auto s = parseExperimentSpec(
        YAML::Load(spec("cluster: {workers: 4, servers: 1, hosts: " + hosts + "}\n", kData, kStrategies)), "t.yaml", &d);
    ASSERT_TRUE(s.has_value()) << d.toString();
    EXPECT_EQ(s->cluster.hosts, Hosts::kNetns);
    EXPECT_EQ(s->cluster.netns_hosts, 3);
    auto again = reparsed(*s);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->cluster.hosts, Hosts::kNetns);
    EXPECT_EQ(again->cluster.netns_hosts, 3);
    EXPECT_EQ(again->cluster.placement, s->cluster.placement);
  }
}

TEST(SpecValidation, JoiningHostsAndTheirListenAddressAreEmittedBackAsTheyWereGiven) {
  config::Diagnostics d;
  auto s = parseExperimentSpec(
      YAML::Load(spec("cluster: {workers: 4, hosts: {agents: 3, listen: 10.1.2.3:29500, names: [a, b, a], "
                      "placement: {worker-3: 2}}}\n",
                      kData, kStrategies)),
      "t.yaml", &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_EQ(s->cluster.hosts, Hosts::kAgents);
  EXPECT_EQ(s->cluster.agent_hosts, 3);
  EXPECT_EQ(s->cluster.hostCount(), 3);
  EXPECT_EQ(s->cluster.listen, "10.1.2.3:29500");
  EXPECT_EQ(s->cluster.host_names, (std::vector<std::string>{"a", "b", "a"}));
  auto again = reparsed(*s);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->cluster, s->cluster);
  // Without listen: loopback, so agents on this machine only.
  auto local = parseExperimentSpec(YAML::Load(spec("cluster: {workers: 4, hosts: {agents: 2}}\n", kData, kStrategies)),
                                   "t.yaml", &d);
  ASSERT_TRUE(local.has_value()) << d.toString();
  EXPECT_EQ(local->cluster.listen, "127.0.0.1");
}

TEST(SpecValidation, AConvolutionalNetTakesTheImagesAsTheyAre) {
  config::Diagnostics d;
  std::optional<ExperimentSpec> s = parseExperimentSpec(
      YAML::Load(spec(kCluster, "data: {dataset: fashion-mnist}\n", kStrategies, "model: {kind: cnn}\n")), "t.yaml",
      &d);
  ASSERT_TRUE(s.has_value()) << d.toString();
  EXPECT_EQ(s->model.kind, "cnn");
  EXPECT_EQ(s->model.layers, (std::vector<int>{784, 10}));
  // The emitted spec (results' spec.yaml) parses back to the same model.
  auto again = reparsed(*s);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->model, s->model);
}

}  // namespace
}  // namespace chaosbed::spec
