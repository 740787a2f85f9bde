#include "core/strategies/strategy.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace chaosbed {

namespace {
Result<data::DatasetSplits> loadDatasets(const TrainingConfig& config, Splits which);
}  // namespace

nlohmann::json StrategyOptions::toJson() const {
  nlohmann::json j = {{"kind", strategyKindName(kind)},
                      {"label", label},
                      {"elastic", elastic},
                      {"backup_workers", backup_workers},
                      {"checkpoint_on_notice", checkpoint_on_notice},
                      {"job_restart", job_restart},
                      {"shards", shards},
                      {"nccl", nccl}};
  j["max_staleness"] = max_staleness ? nlohmann::json(*max_staleness) : nlohmann::json(nullptr);
  return j;
}

StrategyOptions StrategyOptions::fromJson(const nlohmann::json& j) {
  StrategyOptions o;
  const std::string kind = j.at("kind").get<std::string>();
  const auto parsed = parseStrategyKind(kind);
  if (!parsed) throw std::invalid_argument("strategy.kind: unknown kind '" + kind + "'");
  o.kind = *parsed;
  o.label = j.value("label", std::string());
  o.elastic = j.value("elastic", false);
  o.backup_workers = j.value("backup_workers", 0);
  o.checkpoint_on_notice = j.value("checkpoint_on_notice", false);
  o.job_restart = j.value("job_restart", false);
  o.shards = j.value("shards", 1);
  o.nccl = j.value("nccl", false);
  if (j.contains("max_staleness") && !j["max_staleness"].is_null()) o.max_staleness = j["max_staleness"].get<int>();
  return o;
}

nlohmann::json TrainingConfig::toJson() const {
  return {{"model", model},
          {"layers", layers},
          {"dataset", dataset},
          {"data_path", data_path},
          {"synthetic_samples", synthetic_samples},
          {"batch_per_worker", batch_per_worker},
          {"learning_rate", learning_rate},
          {"momentum", momentum},
          {"weight_decay", weight_decay},
          {"seed", seed},
          {"target_accuracy", target_accuracy},
          {"time_limit_s", time_limit_s},
          {"eval_interval_s", eval_interval_s},
          {"eval_interval_steps", eval_interval_steps},
          {"checkpoint_interval_s", checkpoint_interval_s},
          {"collective_timeout_s", collective_timeout_s},
          {"max_steps", max_steps},
          {"emulate", {{"model", emulate.model},
                       {"accelerator", emulate.accelerator},
                       {"network_gbps", emulate.network_gbps},
                       {"batch_per_worker", emulate.batch_per_worker},
                       {"max_gradient_mb", emulate.max_gradient_mb}}}};
}

TrainingConfig TrainingConfig::fromJson(const nlohmann::json& j) {
  TrainingConfig c;
  c.model = j.value("model", c.model);
  c.layers = j.value("layers", c.layers);
  c.dataset = j.value("dataset", c.dataset);
  c.data_path = j.value("data_path", c.data_path);
  c.synthetic_samples = j.value("synthetic_samples", c.synthetic_samples);
  c.batch_per_worker = j.value("batch_per_worker", c.batch_per_worker);
  c.learning_rate = j.value("learning_rate", c.learning_rate);
  c.momentum = j.value("momentum", c.momentum);
  c.weight_decay = j.value("weight_decay", c.weight_decay);
  c.seed = j.value("seed", c.seed);
  c.target_accuracy = j.value("target_accuracy", c.target_accuracy);
  c.time_limit_s = j.value("time_limit_s", c.time_limit_s);
  c.eval_interval_s = j.value("eval_interval_s", c.eval_interval_s);
  c.eval_interval_steps = j.value("eval_interval_steps", c.eval_interval_steps);
  c.checkpoint_interval_s = j.value("checkpoint_interval_s", c.checkpoint_interval_s);
  c.collective_timeout_s = j.value("collective_timeout_s", c.collective_timeout_s);
  c.max_steps = j.value("max_steps", c.max_steps);
  if (j.contains("emulate")) {
    const nlohmann::json& e = j.at("emulate");
    c.emulate.model = e.value("model", c.emulate.model);
    c.emulate.accelerator = e.value("accelerator", c.emulate.accelerator);
    c.emulate.network_gbps = e.value("network_gbps", c.emulate.network_gbps);
    c.emulate.batch_per_worker = e.value("batch_per_worker", c.emulate.batch_per_worker);
    c.emulate.max_gradient_mb = e.value("max_gradient_mb", c.emulate.max_gradient_mb);
  }
  return c;
}

Result<data::DatasetSplits> loadTrainingData(const TrainingConfig& config, Splits which) {
  if (config.layers.size() < 2) return Status::invalidArgument("model.layers: needs at least two sizes");
  CHAOSBED_ASSIGN_OR_RETURN(data::DatasetSplits splits, loadDatasets(config, which));
  const data::Dataset& loaded = which == Splits::kTest ? splits.test : splits.train;
  if (loaded.dims != static_cast<size_t>(config.layers.front()) || loaded.num_classes != config.layers.back())
    return Status::invalidArgument("model.layers: " + config.dataset + " has " + std::to_string(loaded.dims) +
                                   " dims and " + std::to_string(loaded.num_classes) +
                                   " classes, but the layers start with " + std::to_string(config.layers.front()) +
                                   " and end with " + std::to_string(config.layers.back()));
  return splits;
}

Result<std::unique_ptr<model::Model>> makeModel(const TrainingConfig& config, size_t max_batch) {
  CHAOSBED_ASSIGN_OR_RETURN(model::Kind kind, model::parseKind(config.model));
  std::vector<size_t> layers;
  for (int l : config.layers) {
    if (l <= 0) return Status::invalidArgument("model.layers: sizes must be positive, got " + std::to_string(l));
    layers.push_back(static_cast<size_t>(l));
  }
  CHAOSBED_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::create(kind, layers, max_batch));
  m->initialize(config.seed);
  CHAOSBED_ASSIGN_OR_RETURN(std::optional<model::EmulationPlan> plan, emulationPlan(config, m->numParameters()));
  if (plan) m->padTo(plan->padded_parameters);
  return m;
}

Result<std::optional<model::EmulationPlan>> emulationPlan(const TrainingConfig& config, size_t real_parameters) {
  if (!config.emulate.enabled()) return std::optional<model::EmulationPlan>();
  CHAOSBED_ASSIGN_OR_RETURN(model::EmulationPlan plan, model::planEmulation(config.emulate, real_parameters));
  return std::optional<model::EmulationPlan>(plan);
}

Result<EmulatedAccelerator> EmulatedAccelerator::create(NodeContext& ctx, size_t real_parameters, bool allreduce) {
  CHAOSBED_ASSIGN_OR_RETURN(std::optional<model::EmulationPlan> plan, emulationPlan(ctx.config, real_parameters));
  if (!plan) return EmulatedAccelerator(&ctx, std::nullopt, 0);
  const double ratio = plan->targetRatio(allreduce, ctx.workers);
  return EmulatedAccelerator(&ctx, model::EmulatedCompute(ratio), ratio);
}

void EmulatedAccelerator::afterCompute(SteadyClock::time_point compute_started) {
  if (!compute_) return;
  const double elapsed = std::chrono::duration<double>(SteadyClock::now() - compute_started).count();
  const double transfer = ctx_->accounting.seconds(TimeCategory::kTransfer);
  const double wait = compute_->waitSeconds(elapsed, transfer);
  if (compute_->computeSeconds() && !reported_) {
    reported_ = true;
    const double compute = *compute_->computeSeconds();
    ctx_->control.record(events::EmulationCalibrated{
        .compute_seconds = compute, .target_ratio = target_ratio_, .transfer_seconds = compute * target_ratio_});
  }
  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
}

namespace {

Result<data::DatasetSplits> loadDatasets(const TrainingConfig& config, Splits which) {
  if (config.dataset == "synthetic") {
    data::SyntheticOptions o;
    o.dims = size_t(config.layers.front());
    o.num_classes = config.layers.back();
    o.train_size = size_t(config.synthetic_samples);
    o.test_size = std::max<size_t>(256, o.train_size / 4);
    o.seed = config.seed;
    // Unit-scale inputs, well separated classes: a test set that a small MLP learns in seconds.
    o.separation = 1.0f;
    o.noise = 1.0f;
    CHAOSBED_ASSIGN_OR_RETURN(data::DatasetSplits splits, data::makeSynthetic(o));
    if (which == Splits::kTrain) splits.test = {};
    if (which == Splits::kTest) splits.train = {};
    return splits;
  }
  if (config.dataset == "fashion-mnist" || config.dataset == "mnist") {
    data::DatasetSplits splits;
    auto load = [&config](bool wanted, const char* split, data::Dataset& into) -> Status {
      if (!wanted) return Status::ok();
      CHAOSBED_ASSIGN_OR_RETURN(into, data::loadMnistSplit(config.data_path, split));
      return Status::ok();
    };
    Status status = load(which != Splits::kTest, "train", splits.train);
    if (status.isOk()) status = load(which != Splits::kTrain, "t10k", splits.test);
    if (status.code() == StatusCode::kNotFound)
      return status.withContext(config.dataset + " not found (scripts/install-deps.sh installs it)");
    if (!status.isOk()) return status;
    return splits;
  }
  return Status::invalidArgument("data.dataset: unknown dataset '" + config.dataset + "' (fashion-mnist, mnist or synthetic)");
}

}  // namespace

Deadline collectiveDeadline(const TrainingConfig& config) {
  return deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(config.collective_timeout_s)));
}

}  // namespace chaosbed
