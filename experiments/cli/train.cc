// `chaosbed train`: single-node training to a target test accuracy, with time-to-accuracy measured as
// docs/design.md defines it (parameter snapshots at fixed wall intervals, evaluated off the critical path by
// core/eval's SnapshotEvaluator).
//   chaosbed train [--model mlp|cnn|resnet] [--dataset fashion-mnist|mnist|synthetic] [--data_dir DIR]
//                  [--layers 784,256,128,10 (mlp)]
//                  [--batch 64] [--lr L] [--momentum M] [--weight_decay W] [--seed S] [--target 0.85]
//                  [--time_limit_s T] [--eval_interval_s I] [--max_steps N] [--json]
// Exit: 0 target reached, 1 not reached (time limit, step limit or divergence), 2 usage, 4 infrastructure
// (dataset missing or unreadable).

#include <cblas.h>
#include <gflags/gflags.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/batches.h"
#include "core/data/dataset.h"
#include "core/eval/snapshot_evaluator.h"
#include "core/model/mlp.h"
#include "core/model/model.h"
#include "core/optim/sgd.h"
#include "experiments/cli/cli.h"

DEFINE_string(dataset, "fashion-mnist", "fashion-mnist, mnist (IDX files in --data_dir) or synthetic");
DEFINE_string(data_dir, chaosbed::data::kFashionMnistDir,
              "directory of the IDX files (train-images-idx3-ubyte.gz, ...)");
DEFINE_string(model, "mlp", "mlp, cnn (LeNet-5-class) or resnet (a small residual net); see core/model/cnn.h");
DEFINE_string(layers, "784,256,128,10", "MLP layer sizes, input first, classes last (--model mlp only)");
DEFINE_int32(batch, 64, "samples per step");
DEFINE_double(lr, 0.03, "SGD learning rate (with the default momentum 0.9: 0.85 test accuracy on Fashion-MNIST in about 1600 steps)");
DEFINE_double(momentum, 0.9, "SGD momentum");
DEFINE_double(weight_decay, 0.0, "SGD weight decay (L2)");
DEFINE_double(target, 0.85, "target test accuracy for time-to-accuracy");
DEFINE_double(time_limit_s, 120.0, "stop training after this many wall seconds");
DEFINE_double(eval_interval_s, 0.5, "wall seconds between parameter snapshots");
DEFINE_int64(max_steps, 0, "stop after this many steps (0: no step limit)");
DECLARE_bool(json);
DECLARE_int64(seed);

namespace chaosbed::cli {
namespace {

constexpr uint64_t kDefaultSeed = 1;
// How long the final evaluation may take after training stopped (a few passes over the test set).
constexpr auto kDrainTimeout = std::chrono::seconds(120);

int usageError(const std::string& what) {
  std::fprintf(stderr, "chaosbed train: %s\n", what.c_str());
  return kExitUsage;
}

// A failure after the flags and the data were validated: a bug or a broken environment, not a usage error.
int internalError(const Status& status) {
  std::fprintf(stderr, "chaosbed train: %s\n", status.message().c_str());
  return kExitInfrastructure;
}

Result<data::DatasetSplits> loadData() {
  if (FLAGS_dataset == "synthetic") return data::makeSynthetic({});
  std::string dir = FLAGS_data_dir;
  if (FLAGS_dataset == "mnist" && gflags::GetCommandLineFlagInfoOrDie("data_dir").is_default)
    dir = "/usr/share/datasets/mnist";
  return data::loadMnistLayout(dir);
}

double secondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace

int runTrain(int argc, char** argv) {
  if (argc != 1) return usageError(std::string("unexpected argument '") + argv[1] + "'; all options are --flags");
  if (FLAGS_dataset != "fashion-mnist" && FLAGS_dataset != "mnist" && FLAGS_dataset != "synthetic")
    return usageError("--dataset: '" + FLAGS_dataset + "' is not one of fashion-mnist, mnist, synthetic");
  if (FLAGS_batch < 1) return usageError("--batch: must be positive, got " + std::to_string(FLAGS_batch));
  if (!(FLAGS_target > 0 && FLAGS_target <= 1))
    return usageError("--target: must be in (0, 1], got " + std::to_string(FLAGS_target));
  if (!(FLAGS_time_limit_s > 0))
    return usageError("--time_limit_s: must be positive, got " + std::to_string(FLAGS_time_limit_s));
  if (!(FLAGS_eval_interval_s > 0))
    return usageError("--eval_interval_s: must be positive, got " + std::to_string(FLAGS_eval_interval_s));
  if (FLAGS_max_steps < 0) return usageError("--max_steps: must not be negative");
  const optim::SgdOptions sgd_options{.lr = static_cast<float>(FLAGS_lr),
                                      .momentum = static_cast<float>(FLAGS_momentum),
                                      .weight_decay = static_cast<float>(FLAGS_weight_decay)};
  if (Status s = optim::validate(sgd_options); !s.isOk()) return usageError(s.message());
  auto kind = model::parseKind(FLAGS_model);
  if (!kind.isOk()) return usageError("--model: " + kind.status().message());
  if (*kind != model::Kind::kMlp && !gflags::GetCommandLineFlagInfoOrDie("layers").is_default)
    return usageError("--layers: applies only to --model mlp (a " + FLAGS_model + " has a fixed shape)");
  auto layers = model::parseLayers(FLAGS_layers);
  if (!layers.isOk()) return usageError("--layers: " + layers.status().message());
  const uint64_t seed = FLAGS_seed < 0 ? kDefaultSeed : static_cast<uint64_t>(FLAGS_seed);

  auto data = loadData();
  if (!data.isOk()) {
    std::fprintf(stderr, "chaosbed train: cannot load the %s dataset: %s\n", FLAGS_dataset.c_str(),
                 data.status().message().c_str());
    if (data.status().code() == StatusCode::kNotFound)
      std::fprintf(stderr, "chaosbed train: run scripts/install-deps.sh (Debian package dataset-fashion-mnist) "
                           "or point --data_dir at the IDX files\n");
    return kExitInfrastructure;
  }
  const data::Dataset& train_set = data->train;
  // A convolutional net takes the images as they are: its input and output sizes come from the data.
  if (*kind != model::Kind::kMlp) *layers = {train_set.dims, static_cast<size_t>(train_set.num_classes)};
  if (layers->front() != train_set.dims || layers->back() < static_cast<size_t>(train_set.num_classes)) {
    return usageError("--layers: the model takes " + std::to_string(layers->front()) + " inputs and has " +
                      std::to_string(layers->back()) + " outputs; the dataset has " + std::to_string(train_set.dims) +
                      " dims and " + std::to_string(train_set.num_classes) + " classes");
  }

  // One BLAS thread: the training loop owns one core, the snapshot evaluator the other.
  openblas_set_num_threads(1);
  auto created = model::create(*kind, *layers, static_cast<size_t>(FLAGS_batch));
  if (!created.isOk()) return usageError("--model " + FLAGS_model + ": " + created.status().message());
  model::Model& net = **created;
  auto sgd = optim::Sgd::create(sgd_options, net.numParameters());
  auto batches = data::BatchIterator::create(train_set, {0, 1}, seed, static_cast<size_t>(FLAGS_batch));
  auto evaluator =
      eval::SnapshotEvaluator::create(*layers, data->test, {.target_accuracy = FLAGS_target, .kind = *kind});
  for (const Status& s : {sgd.status(), batches.status(), evaluator.status()}) {
    if (!s.isOk()) return internalError(s);
  }
  net.initialize(seed);
  eval::SnapshotEvaluator& ev = **evaluator;

  const std::string shape = *kind == model::Kind::kMlp ? "mlp " + FLAGS_layers : FLAGS_model;
  std::printf("train: %s, %zu train / %zu test samples, model %s (%zu parameters), batch %d, lr %g, momentum %g, weight decay %g, "
              "seed %llu, target %.4f\n",
              FLAGS_dataset.c_str(), train_set.size(), data->test.size(), shape.c_str(), net.numParameters(), FLAGS_batch,
              FLAGS_lr, FLAGS_momentum, FLAGS_weight_decay, static_cast<unsigned long long>(seed), FLAGS_target);
  std::fflush(stdout);

  data::Batch batch;
  int64_t steps = 0;
  uint64_t samples = 0;
  double next_snapshot = FLAGS_eval_interval_s;
  bool diverged = false;
  float loss = 0;
  const auto start = SteadyClock::now();
  double elapsed = 0;
  while (true) {
    if (Status s = batches->next(batch); !s.isOk()) return internalError(s);
    auto step_loss = net.computeGradients(batch.images, batch.labels);
    if (!step_loss.isOk()) return internalError(step_loss.status());
    loss = *step_loss;
    if (!std::isfinite(loss)) {
      diverged = true;
      break;
    }
    if (Status s = sgd->apply(net.parameters(), net.gradients()); !s.isOk()) return internalError(s);
    ++steps;
    samples += batch.size;
    elapsed = secondsSince(start);
    if (elapsed >= next_snapshot) {
      if (Status s = ev.submit(elapsed, steps, {net.parameters().begin(), net.parameters().end()}); !s.isOk())
        return internalError(s);
      while (next_snapshot <= elapsed) next_snapshot += FLAGS_eval_interval_s;
      char last_text[64] = "not evaluated yet";
      if (const auto last = ev.latest())
        std::snprintf(last_text, sizeof last_text, "t=%.2fs accuracy=%.4f", last->time_s, last->accuracy);
      std::printf("t=%7.2fs step=%8lld epoch=%3llu loss=%.4f last snapshot: %s\n", elapsed,
                  static_cast<long long>(steps), static_cast<unsigned long long>(batches->epoch()), loss, last_text);
      std::fflush(stdout);
    }
    if (ev.targetReached() || elapsed >= FLAGS_time_limit_s || (FLAGS_max_steps > 0 && steps >= FLAGS_max_steps))
      break;
  }
  const double train_seconds = secondsSince(start);

  // The final parameters are one more snapshot: the final accuracy, and possibly the TTA at the limit.
  if (!diverged) {
    if (Status s = ev.submit(train_seconds, steps, {net.parameters().begin(), net.parameters().end()}); !s.isOk())
      return internalError(s);
  }
  if (Status s = ev.drain(deadlineIn(kDrainTimeout)); !s.isOk()) {
    std::fprintf(stderr, "chaosbed train: evaluation failed: %s\n", s.message().c_str());
    return kExitInfrastructure;
  }
  const std::optional<double> tta = ev.timeToAccuracy();
  const std::optional<eval::SnapshotRecord> final_record = ev.latest();
  const double final_accuracy = final_record ? final_record->accuracy : 0.0;
  const double samples_per_s = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0.0;

  if (diverged) std::printf("training diverged at step %lld (loss %g): lower --lr\n", static_cast<long long>(steps), loss);
  if (tta) {
    std::printf("time to accuracy %.4f: %.3f s\n", FLAGS_target, *tta);
  } else {
    std::printf("target accuracy %.4f not reached in %.3f s (%lld steps)\n", FLAGS_target, train_seconds,
                static_cast<long long>(steps));
  }
  std::printf("final accuracy: %.4f (loss %.4f) after %lld steps, %.1f s, %.0f samples/s\n", final_accuracy,
              final_record ? final_record->loss : 0.0, static_cast<long long>(steps), train_seconds, samples_per_s);
  if (FLAGS_json) {
    nlohmann::json j;
    j["tta_seconds"] = tta ? nlohmann::json(*tta) : nlohmann::json(nullptr);
    j["final_accuracy"] = final_accuracy;
    j["steps"] = steps;
    j["samples_per_s"] = samples_per_s;
    std::printf("%s\n", j.dump().c_str());
  }
  return tta ? kExitPass : kExitAssertionFailed;
}

}  // namespace chaosbed::cli
