// Single-node training on the real Fashion-MNIST (skipped when the Debian package dataset-fashion-mnist is
// absent), in-process through the library and end to end through `chaosbed train`.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/data/batches.h"
#include "core/data/dataset.h"
#include "core/model/mlp.h"
#include "core/optim/sgd.h"

namespace chaosbed {
namespace {

bool haveFashionMnist() {
  return std::filesystem::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

CommandResult runChaosbed(const std::string& args) {
  CommandResult r;
  const std::string cmd = std::string(CHAOSBED_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);  // waits for the child
  if (status != -1 && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

std::string lastLine(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

TEST(TrainFashionMnist, ThousandStepsReachEightyPercentInProcess) {
  if (!haveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST in " << data::kFashionMnistDir << ": run scripts/install-deps.sh";
  auto splits = data::loadMnistLayout(data::kFashionMnistDir);
  ASSERT_TRUE(splits.isOk()) << splits.status().toString();
  EXPECT_EQ(splits->train.size(), 60000u);
  EXPECT_EQ(splits->test.size(), 10000u);
  EXPECT_EQ(splits->train.dims, 784u);
  auto mlp = model::Mlp::create(model::defaultLayers(), 1000);
  auto sgd = optim::Sgd::create({.lr = 0.03f, .momentum = 0.9f}, mlp->numParameters());
  auto it = data::BatchIterator::create(splits->train, {0, 1}, 1, 64);
  ASSERT_TRUE(mlp.isOk() && sgd.isOk() && it.isOk());
  mlp->initialize(1);
  data::Batch batch;
  for (int step = 0; step < 1000; ++step) {
    ASSERT_TRUE(it->next(batch).isOk());
    ASSERT_TRUE(mlp->computeGradients(batch.images, batch.labels).isOk());
    ASSERT_TRUE(sgd->apply(mlp->parameters(), mlp->gradients()).isOk());
  }
  auto r = mlp->evaluate(splits->test);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_GT(r->accuracy, 0.80);
  EXPECT_LT(r->loss, 0.6);
}

TEST(TrainFashionMnist, CliReportsJsonAndExitsOneWhenTargetMissed) {
  if (!haveFashionMnist()) GTEST_SKIP() << "no Fashion-MNIST in " << data::kFashionMnistDir << ": run scripts/install-deps.sh";
  // Target 0.99 is out of reach: the run stops at the step limit and says so.
  const CommandResult r = runChaosbed("train --max_steps 1000 --target 0.99 --eval_interval_s 0.5 --json");
  ASSERT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("target accuracy 0.9900 not reached"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(lastLine(r.output), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_TRUE(j["tta_seconds"].is_null());
  EXPECT_EQ(j["steps"], 1000);
  EXPECT_GT(j["final_accuracy"].get<double>(), 0.80);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
}

TEST(TrainCli, ReachesTargetOnSyntheticData) {
  const CommandResult r = runChaosbed("train --dataset synthetic --target 0.9 --time_limit_s 60 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(lastLine(r.output), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  ASSERT_TRUE(j["tta_seconds"].is_number());
  EXPECT_GT(j["tta_seconds"].get<double>(), 0.0);
  EXPECT_GE(j["final_accuracy"].get<double>(), 0.9);
}

TEST(TrainCli, MissingDatasetIsInfrastructureErrorWithHint) {
  const std::string dir = testing::TempDir() + "/no-such-dataset";
  const CommandResult r = runChaosbed("train --data_dir " + dir);
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find(dir + "/train-images-idx3-ubyte.gz: no such file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scripts/install-deps.sh"), std::string::npos) << r.output;
}

TEST(TrainCli, BadFlagsAreUsageErrors) {
  const CommandResult layers = runChaosbed("train --dataset synthetic --layers 784,abc,10");
  EXPECT_EQ(layers.exit_code, 2) << layers.output;
  EXPECT_NE(layers.output.find("--layers"), std::string::npos) << layers.output;
  const CommandResult lr = runChaosbed("train --dataset synthetic --lr -1");
  EXPECT_EQ(lr.exit_code, 2) << lr.output;
  EXPECT_NE(lr.output.find("lr must be positive"), std::string::npos) << lr.output;
  const CommandResult dataset = runChaosbed("train --dataset cifar");
  EXPECT_EQ(dataset.exit_code, 2) << dataset.output;
  EXPECT_NE(dataset.output.find("'cifar'"), std::string::npos) << dataset.output;
}

}  // namespace
}  // namespace chaosbed
