// `chaosbed bench train [--json] [--bench_train_s S] [--model mlp|cnn|resnet] [--layers ...] [--batch N]`:
// training-step throughput of a model on ONE BLAS thread: forward + backward + SGD update per step, on a pool
// of pre-generated batches (so data loading is not measured, as in bench/torch_train.py). Reports samples/s
// and the GFLOP/s of the GEMMs executed (Model::flopsPerStep; for a convolutional net its convolutions as
// GEMMs), over wall time, and samples per CPU second of this process (samples_per_cpu_s), which stays
// meaningful on a machine shared with other busy processes. A convolutional net takes 28 x 28 images in 10
// classes (Fashion-MNIST's shape).

#include <cblas.h>
#include <gflags/gflags.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/random.h"
#include "core/model/mlp.h"
#include "core/model/model.h"
#include "core/optim/sgd.h"
#include "experiments/cli/cli.h"

DEFINE_double(bench_train_s, 3.0, "seconds to measure (after a warm-up)");
DECLARE_string(model);
DECLARE_string(layers);
DECLARE_int32(batch);
DECLARE_bool(json);

namespace chaosbed::cli {
namespace {

constexpr int kPoolBatches = 16;
constexpr int kWarmupSteps = 200;

double processCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

int runBenchTrain(int argc, char** argv) {
  if (argc != 1) {
    std::fprintf(stderr, "chaosbed bench train: unexpected argument '%s'\n", argv[1]);
    return kExitUsage;
  }
  auto kind = model::parseKind(FLAGS_model);
  if (!kind.isOk()) {
    std::fprintf(stderr, "chaosbed bench train: --model: %s\n", kind.status().message().c_str());
    return kExitUsage;
  }
  if (*kind != model::Kind::kMlp && !gflags::GetCommandLineFlagInfoOrDie("layers").is_default) {
    std::fprintf(stderr, "chaosbed bench train: --layers applies only to --model mlp\n");
    return kExitUsage;
  }
  auto layers = model::parseLayers(*kind == model::Kind::kMlp ? FLAGS_layers : "784,10");
  if (!layers.isOk()) {
    std::fprintf(stderr, "chaosbed bench train: --layers: %s\n", layers.status().message().c_str());
    return kExitUsage;
  }
  if (FLAGS_batch < 1 || !(FLAGS_bench_train_s > 0)) {
    std::fprintf(stderr, "chaosbed bench train: --batch and --bench_train_s must be positive\n");
    return kExitUsage;
  }
  const size_t batch = static_cast<size_t>(FLAGS_batch);
  openblas_set_num_threads(1);
  auto created = model::create(*kind, *layers, batch);
  if (!created.isOk()) {
    std::fprintf(stderr, "chaosbed bench train: %s\n", created.status().message().c_str());
    return kExitUsage;
  }
  model::Model& net = **created;
  auto sgd = optim::Sgd::create({.lr = 0.01f, .momentum = 0.9f, .weight_decay = 0.0f}, net.numParameters());
  if (!sgd.isOk()) {
    std::fprintf(stderr, "chaosbed bench train: %s\n", sgd.status().message().c_str());
    return kExitUsage;
  }
  net.initialize(1);

  // Inputs uniform in [0, 1) like scaled pixels; labels uniform over the classes.
  data::Rng rng(7);
  std::vector<std::vector<float>> inputs(kPoolBatches, std::vector<float>(batch * net.inputDims()));
  std::vector<std::vector<uint8_t>> labels(kPoolBatches, std::vector<uint8_t>(batch));
  for (int b = 0; b < kPoolBatches; ++b) {
    for (float& x : inputs[b]) x = data::uniformFloat(rng);
    for (uint8_t& y : labels[b]) y = static_cast<uint8_t>(data::uniformBelow(rng, net.numClasses()));
  }

  auto step = [&](int64_t i) {
    const int b = static_cast<int>(i % kPoolBatches);
    // Inputs and labels were validated when generated; a failure here would be a bug in the model or Sgd.
    const bool ok = net.computeGradients(inputs[b], labels[b]).isOk() &&
                    sgd->apply(net.parameters(), net.gradients()).isOk();
    return ok;
  };
  for (int i = 0; i < kWarmupSteps; ++i)
    if (!step(i)) return kExitInfrastructure;

  using Clock = std::chrono::steady_clock;
  const double cpu_start = processCpuSeconds();
  const auto start = Clock::now();
  const auto until = start + std::chrono::duration<double>(FLAGS_bench_train_s);
  int64_t steps = 0;
  Clock::time_point now;
  do {
    for (int i = 0; i < 64; ++i, ++steps)  // read the clock every 64 steps
      if (!step(steps)) return kExitInfrastructure;
    now = Clock::now();
  } while (now < until);
  const double seconds = std::chrono::duration<double>(now - start).count();
  const double cpu_seconds = processCpuSeconds() - cpu_start;
  const double samples_per_s = static_cast<double>(steps) * static_cast<double>(batch) / seconds;
  const double gflops = net.flopsPerStep(batch) * static_cast<double>(steps) / seconds / 1e9;
  const double samples_per_cpu_s = static_cast<double>(steps) * static_cast<double>(batch) / cpu_seconds;

  const std::string shape = *kind == model::Kind::kMlp ? "mlp " + FLAGS_layers : FLAGS_model;
  std::printf("bench train: %s, batch %zu, 1 thread: %lld steps in %.2f s, %.0f samples/s, %.1f GFLOP/s "
              "(GEMMs); %.0f samples per CPU second\n",
              shape.c_str(), batch, static_cast<long long>(steps), seconds, samples_per_s, gflops,
              samples_per_cpu_s);
  if (FLAGS_json) {
    nlohmann::json j;
    j["samples_per_s"] = samples_per_s;
    j["gflops"] = gflops;
    j["samples_per_cpu_s"] = samples_per_cpu_s;
    j["steps"] = steps;
    j["batch"] = batch;
    j["threads"] = 1;
    j["model"] = FLAGS_model;
    j["parameters"] = net.numParameters();
    std::printf("%s\n", j.dump().c_str());
  }
  return kExitPass;
}

}  // namespace chaosbed::cli
