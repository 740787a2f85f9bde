#include "experiments/run/node_config.h"

namespace chaosbed::run {

TrainingConfig trainingConfig(const spec::ExperimentSpec& s, const spec::StrategySpec& st) {
  TrainingConfig c;
  c.model = s.model.kind;
  c.emulate = s.workload.emulate;
  c.layers = s.model.layers;
  c.dataset = spec::name(s.data.dataset);
  c.data_path = s.data.path;
  if (s.data.dataset == spec::Dataset::kSynthetic) c.synthetic_samples = s.data.samples;
  c.batch_per_worker = st.recipe.batch_per_worker;
  c.learning_rate = st.recipe.learning_rate;
  c.momentum = st.recipe.momentum;
  c.weight_decay = st.recipe.weight_decay;
  c.seed = uint64_t(s.training.seed);
  c.target_accuracy = s.training.target_accuracy;
  c.time_limit_s = s.training.time_limit_s;
  c.eval_interval_s = s.training.eval_interval_s;
  c.eval_interval_steps = s.training.eval_interval_steps;
  c.checkpoint_interval_s = s.training.checkpoint_interval_s;
  c.max_steps = s.training.max_steps.value_or(0);
  c.collective_timeout_s = s.training.collective_timeout_s;
  return c;
}

StrategyOptions strategyOptions(const spec::ExperimentSpec& s, const spec::StrategySpec& st) {
  StrategyOptions o;
  o.kind = st.kind;
  o.label = st.label;
  o.elastic = st.on_failure == spec::OnFailure::kElastic;
  o.backup_workers = st.backup_workers;
  o.checkpoint_on_notice = st.checkpoint_on_notice;
  o.job_restart = st.on_server_failure == spec::OnServerFailure::kJobRestart;
  o.max_staleness = st.max_staleness;
  o.shards = st.shards > 0 ? st.shards : s.cluster.servers;
  o.nccl = o.kind == StrategyKind::kMirrored && s.cluster.transport == spec::Transport::kNccl;
  return o;
}

}  // namespace chaosbed::run
