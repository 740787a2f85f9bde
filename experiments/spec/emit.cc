// emitExperimentSpec (spec.h): a validated spec back to YAML, every default filled in, in the parser's own
// spelling, so that the results directory's spec.yaml parses back to the same spec.

#include <yaml-cpp/yaml.h>

#include "core/config/config.h"
#include "experiments/spec/spec.h"

namespace chaosbed::spec {
namespace {

void emitString(YAML::Emitter& e, const char* key, const std::string& value) {
  e << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}
void emitPlain(YAML::Emitter& e, const char* key, const std::string& value) {
  e << YAML::Key << key << YAML::Value << value;
}
void emitDouble(YAML::Emitter& e, const char* key, double value) { emitPlain(e, key, config::formatDouble(value)); }
void emitInt(YAML::Emitter& e, const char* key, int64_t value) { emitPlain(e, key, std::to_string(value)); }
void emitBool(YAML::Emitter& e, const char* key, bool value) { emitPlain(e, key, value ? "true" : "false"); }

}  // namespace

std::string emitExperimentSpec(const ExperimentSpec& spec) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  emitPlain(e, "apiVersion", spec.api_version);
  emitPlain(e, "kind", spec.kind);
  e << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  emitString(e, "name", spec.metadata.name);
  emitString(e, "description", spec.metadata.description);
  if (!spec.metadata.labels.empty()) {
    e << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
    for (const auto& [k, v] : spec.metadata.labels) emitString(e, k.c_str(), v);
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  emitInt(e, "seed", spec.seed);

  e << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  emitInt(e, "workers", spec.cluster.workers);
  emitInt(e, "servers", spec.cluster.servers);
  emitDouble(e, "cpu_per_node", spec.cluster.cpu_per_node);
  emitPlain(e, "transport", name(spec.cluster.transport));
  if (spec.cluster.hosts != Hosts::kLocal) {
    e << YAML::Key << "hosts" << YAML::Value << YAML::Flow << YAML::BeginMap;
    if (spec.cluster.hosts == Hosts::kNetns) {
      emitInt(e, "netns", spec.cluster.netns_hosts);
    } else {
      emitInt(e, "agents", spec.cluster.agent_hosts);
      emitPlain(e, "listen", spec.cluster.listen.c_str());
      if (!spec.cluster.host_names.empty()) {
        e << YAML::Key << "names" << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (const std::string& name : spec.cluster.host_names) e << name;
        e << YAML::EndSeq;
      }
    }
    if (!spec.cluster.placement.empty()) {
      e << YAML::Key << "placement" << YAML::Value << YAML::Flow << YAML::BeginMap;
      for (const auto& [node, host] : spec.cluster.placement) emitInt(e, node.c_str(), host);
      e << YAML::EndMap;
    }
    e << YAML::EndMap;
  } else {
    emitPlain(e, "hosts", name(spec.cluster.hosts));
  }
  emitBool(e, "simulate", spec.cluster.simulate);
  e << YAML::Key << "failure_detection" << YAML::Value << YAML::BeginMap;
  emitDouble(e, "heartbeat_s", spec.cluster.failure_detection.heartbeat_s);
  emitDouble(e, "timeout_s", spec.cluster.failure_detection.timeout_s);
  e << YAML::EndMap;
  e << YAML::EndMap;

  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  emitPlain(e, "kind", spec.model.kind);
  if (spec.model.kind == "mlp") {  // a convolutional net's shape is fixed and follows the data
    e << YAML::Key << "layers" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int l : spec.model.layers) e << l;
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;

  if (spec.workload.emulate.enabled()) {
    const model::EmulationSpec& em = spec.workload.emulate;
    e << YAML::Key << "workload" << YAML::Value << YAML::BeginMap << YAML::Key << "emulate" << YAML::Value
      << YAML::BeginMap;
    emitPlain(e, "model", em.model);
    emitPlain(e, "accelerator", em.accelerator);
    emitDouble(e, "network_gbps", em.network_gbps);
    if (em.batch_per_worker > 0) emitInt(e, "batch_per_worker", em.batch_per_worker);
    emitDouble(e, "max_gradient_mb", em.max_gradient_mb);
    e << YAML::EndMap << YAML::EndMap;
  }

  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  emitPlain(e, "dataset", name(spec.data.dataset));
  if (spec.data.dataset == Dataset::kSynthetic) {
    emitInt(e, "samples", spec.data.samples);
    emitInt(e, "dims", spec.data.dims);
    emitInt(e, "classes", spec.data.classes);
  } else {
    emitString(e, "path", spec.data.path);
  }
  e << YAML::EndMap;

  const TrainingSpec& t = spec.training;
  e << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  emitInt(e, "batch_per_worker", t.batch_per_worker);
  emitDouble(e, "learning_rate", t.learning_rate);
  emitDouble(e, "momentum", t.momentum);
  emitDouble(e, "weight_decay", t.weight_decay);
  emitInt(e, "seed", t.seed);
  emitDouble(e, "target_accuracy", t.target_accuracy);
  emitDouble(e, "time_limit_s", t.time_limit_s);
  // One of the two: the parser refuses both.
  if (t.eval_interval_steps > 0) emitInt(e, "eval_interval_steps", t.eval_interval_steps);
  else emitDouble(e, "eval_interval_s", t.eval_interval_s);
  emitInt(e, "sustained_evals", t.sustained_evals);
  emitDouble(e, "checkpoint_interval_s", t.checkpoint_interval_s);
  emitDouble(e, "collective_timeout_s", t.collective_timeout_s);
  e << YAML::Key << "max_steps" << YAML::Value;
  if (t.max_steps) e << std::to_string(*t.max_steps);
  else e << YAML::Null;
  e << YAML::EndMap;

  e << YAML::Key << "strategies" << YAML::Value << YAML::BeginSeq;
  for (const StrategySpec& s : spec.strategies) {
    e << YAML::BeginMap;
    emitPlain(e, "name", name(s.kind));
    emitString(e, "label", s.label);
    emitBool(e, "checkpoint_on_notice", s.checkpoint_on_notice);
    e << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
    emitInt(e, "batch_per_worker", s.recipe.batch_per_worker);
    emitDouble(e, "learning_rate", s.recipe.learning_rate);
    emitDouble(e, "momentum", s.recipe.momentum);
    emitDouble(e, "weight_decay", s.recipe.weight_decay);
    e << YAML::EndMap;
    if (s.kind == StrategyKind::kMirrored) {
      emitPlain(e, "on_failure", name(s.on_failure));
      emitInt(e, "backup_workers", s.backup_workers);
    } else {
      emitPlain(e, "on_server_failure", name(s.on_server_failure));
      e << YAML::Key << "max_staleness" << YAML::Value;
      if (s.max_staleness) e << std::to_string(*s.max_staleness);
      else e << YAML::Null;
      emitInt(e, "shards", s.shards);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;

  if (spec.chaos.yaml.IsDefined() && !spec.chaos.yaml.IsNull())
    e << YAML::Key << "chaos" << YAML::Value << spec.chaos.yaml;

  e << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap;
  emitString(e, "listen", spec.metrics.listen);
  if (!spec.metrics.push_gateway.empty()) emitString(e, "push_gateway", spec.metrics.push_gateway);
  emitBool(e, "allow_remote", spec.metrics.allow_remote);
  emitBool(e, "await_scrape", spec.metrics.await_scrape);
  if (!spec.metrics.targets_dir.empty()) emitString(e, "targets_dir", spec.metrics.targets_dir);
  e << YAML::EndMap;

  e << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  emitString(e, "dir", spec.output.dir);
  e << YAML::EndMap;

  if (spec.sweep) {
    e << YAML::Key << "sweep" << YAML::Value << YAML::BeginMap;
    if (!spec.sweep->grid.empty()) {
      e << YAML::Key << "grid" << YAML::Value << YAML::BeginMap;
      for (const SweepAxis& axis : spec.sweep->grid) {
        e << YAML::Key << axis.path << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (const std::string& v : axis.values) e << YAML::Load(v);
        e << YAML::EndSeq;
      }
      e << YAML::EndMap;
    }
    e << YAML::Key << "seeds" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (int64_t s : spec.sweep->seeds) e << s;
    e << YAML::EndSeq << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace chaosbed::spec
