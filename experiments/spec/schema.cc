#include "experiments/spec/schema.h"

#include "core/config/config.h"
#include "core/config/schema.h"
#include "experiments/spec/spec.h"

namespace chaosbed::spec {
namespace {

// Documents that lead parseExperimentSpec into each of its branches. They need not be valid (their errors
// are dropped); they need to reach every getter. A key that is read only in a branch no probe reaches shows
// up in SpecSchema::untyped_keys. The getters type a key whether it is present or not, so a probe's maps are
// best left empty: a required key is seen as required only where some probe leaves it out.
constexpr const char* kProbes[] = {
    // Everything absent: the required keys, the defaults, the non-synthetic data branch.
    "seed: 0",
    R"(
metadata: {name: p, labels: {team: x}}
cluster: {workers: 2, failure_detection: {}, hosts: {netns: 1, placement: {worker-0: 0}}}
data: {dataset: synthetic}
model: {layers: [2, 2]}
workload: {emulate: {}}
strategies:
  - {name: mirrored, training: {}}
  - {name: parameter_server}
  - {}
sweep: {grid: {cluster.workers: [1]}, repeats: 1}
chaos:
  faults:
    - {}
    - {name: a, action: kill, at_s: 1, target: {role: worker, index: 0}, restart_after: never}
    - {name: b, action: kill, at_s: [1], target: {role: worker, index: [0]}, restart_after: {fixed_s: 1}}
    - {name: c, action: preempt, profile: aws, schedule: {poisson: {rate_per_node_hour: 1}},
       target: {role: worker, count: 1}, params: {grace_s: 1}, restart_after: {exponential: {}}}
    - {name: d, action: preempt, schedule: {poisson: {expected_per_run: 1}}, target: {nodes: worker-0}}
    - {name: e, action: slow, schedule: {wave: {fraction: 0.5, at_s: 1}}, target: {role: worker, fraction: 0.5},
       duration_s: 1, params: {slowdown: {lognormal: {}}}}
    - {name: f, action: slow, schedule: {wave: {count: 1, rate_per_hour: 1, at_s: [1]}},
       target: {nodes: [worker-0]}, params: {cpu_fraction: 0.5, slowdown: {pareto: {}}}}
    - {name: g, action: slow, schedule: {at_s: 1}, params: {slowdown: {bimodal: {}}}}
    - {name: h, action: link, when: {node: worker-0, step: 1, after_s: 1},
       target: {between: [{role: worker, index: 0}, {nodes: worker-1}]},
       params: {bandwidth_mbps: 1, latency_ms: 1, partition: true, via: auto}}
    - {name: i, action: transport_error, when: {epoch: 1}, target: {between: [{role: worker, index: [0]},
       {role: ps, count: 1}]}, params: {error: drop, nth: 1, count: 1}}
    - {name: m, action: link, at_s: 1, target: {between: [{role: worker, fraction: 0.5}, {nodes: [worker-1]}]}}
    - {name: j, schedule: {trace: {}}}
    - {name: k, action: kill, schedule: {trace: {path: probe.csv, format: capacity, time_unit: h, fleet_size: 1,
       start_s: 0}}, target: {role: worker}}
    - {name: l, action: pause, schedule: {at_s: [1]}, target: {role: worker}, duration_s: 1}
)",
    // Defaults that follow other fields (the per-strategy recipe follows training, shards the servers, the
    // data path the data set, training.seed the seed) differ from the first probes', so none is published.
    R"(
seed: 7
cluster: {workers: 1, servers: 3, hosts: {list: []}}
data: {dataset: mnist}
training: {learning_rate: 0.5, momentum: 0.5, batch_per_worker: 8, weight_decay: 0.5}
strategies: [{name: mirrored, training: {}}, {name: parameter_server}]
sweep: {seeds: [1]}
)",
    "cluster: {workers: 1, hosts: {agents: 1, listen: 127.0.0.1, names: [a]}}",
};

}  // namespace

SpecSchema experimentSpecSchema() {
  config::SchemaRecorder recorder;
  {
    config::SchemaRecorder::Scope scope(&recorder);
    for (const char* probe : kProbes) {
      config::Diagnostics ignored;
      std::optional<YAML::Node> doc = config::loadYamlString(probe, "probe.yaml", &ignored);
      if (doc) parseExperimentSpec(*doc, "probe.yaml", &ignored);
    }
  }
  SpecSchema out;
  out.schema = recorder.toJsonSchema("chaosbed experiment spec (" + std::string(kApiVersion) + ")");
  // The parser compares these two with its constants rather than through oneOf.
  out.schema["properties"]["apiVersion"]["const"] = kApiVersion;
  out.schema["properties"]["kind"]["const"] = kKind;
  out.untyped_keys = recorder.untypedKeys();
  return out;
}

}  // namespace chaosbed::spec
