// Model emulation: the derivation from the public figures, the padding cap, bad specs, and the calibration
// of the emulated compute.

#include <gtest/gtest.h>

#include "core/model/emulation.h"
#include "core/model/mlp.h"

namespace chaosbed::model {
namespace {

TEST(EmulationPlan, ResNet50OnV100At10GbpsFollowsThePublicFigures) {
  auto plan = planEmulation({.model = "resnet50", .accelerator = "v100", .network_gbps = 10, .batch_per_worker = 64},
                            1000);
  ASSERT_TRUE(plan.isOk()) << plan.status().toString();
  // 25.557M fp32 gradients; 4.09 G multiply-adds forward per image, x2 FLOPs, x3 for forward + backward; a
  // V100 at 25% of 125 TFLOP/s.
  const double bytes = 25.557e6 * 4;
  const double compute = 64 * (4.09e9 * 2 * 3) / (125e12 * 0.25);
  EXPECT_DOUBLE_EQ(plan->real_gradient_bytes, bytes);
  EXPECT_NEAR(plan->real_compute_s, compute, 1e-12);
  // A ring all-reduce over 4 workers moves 2 * 3/4 gradients through each 10 Gb/s link; a PS worker 2.
  EXPECT_NEAR(plan->wireSeconds(true, 4), 1.5 * bytes * 8 / 10e9, 1e-12);
  EXPECT_NEAR(plan->wireSeconds(false, 4), 2.0 * bytes * 8 / 10e9, 1e-12);
  EXPECT_NEAR(plan->targetRatio(true, 4), 1.5 * bytes * 8 / 10e9 / compute, 1e-9);
  // The gradient carried here is capped at 32 MiB (the default).
  EXPECT_EQ(plan->padded_parameters, size_t(32 * 1024 * 1024 / 4));
}

TEST(EmulationPlan, BertBaseOnA100At100Gbps) {
  auto plan = planEmulation({.model = "bert-base", .accelerator = "a100", .network_gbps = 100}, 1000);
  ASSERT_TRUE(plan.isOk());
  EXPECT_EQ(plan->spec.batch_per_worker, 32);  // the profile's default
  // 6 x parameters x 128 tokens per sequence, 32 sequences, 25% of 312 TFLOP/s.
  EXPECT_NEAR(plan->real_compute_s, 32 * (6 * 110e6 * 128) / (312e12 * 0.25), 1e-12);
  EXPECT_NEAR(plan->targetRatio(true, 4), 1.5 * 110e6 * 4 * 8 / 100e9 / plan->real_compute_s, 1e-9);
}

TEST(EmulationPlan, PaddingNeverShrinksTheSmallModelAndFollowsTheCap) {
  auto small_cap = planEmulation({.model = "vgg16", .accelerator = "h100", .network_gbps = 25, .max_gradient_mb = 1},
                                 1000);
  ASSERT_TRUE(small_cap.isOk());
  EXPECT_EQ(small_cap->padded_parameters, size_t(1024 * 1024 / 4));
  auto big_model = planEmulation({.model = "vgg16", .accelerator = "h100", .network_gbps = 25, .max_gradient_mb = 1},
                                 5'000'000);
  ASSERT_TRUE(big_model.isOk());
  EXPECT_EQ(big_model->padded_parameters, 5'000'000u);
}

TEST(EmulationPlan, RejectsUnknownProfilesAndBadNumbers) {
  auto model = planEmulation({.model = "resnet5O", .accelerator = "v100", .network_gbps = 10}, 1);
  ASSERT_FALSE(model.isOk());
  EXPECT_NE(model.status().message().find("resnet50, vgg16, bert-base, gpt2-small"), std::string::npos)
      << model.status().message();
  EXPECT_FALSE(planEmulation({.model = "resnet50", .accelerator = "tpu", .network_gbps = 10}, 1).isOk());
  EXPECT_FALSE(planEmulation({.model = "resnet50", .accelerator = "v100", .network_gbps = 0}, 1).isOk());
  EXPECT_FALSE(planEmulation({.model = "resnet50", .accelerator = "v100", .network_gbps = 10,
                              .batch_per_worker = -1}, 1).isOk());
}

TEST(EmulatedCompute, CalibratesInRoundsThenHoldsTheComputeFixed) {
  // Target ratio 2, rounds of 3 steps, 2 rounds.
  EmulatedCompute c(2.0, 3, 2);
  double transfer = 0.5;  // start-up: not a step's
  EXPECT_EQ(c.waitSeconds(0.01, transfer), 0.0);
  // Round 1: steps move 0.2, 0.4 and 0.3 s; no wait while calibrating.
  for (double t : {0.2, 0.4}) EXPECT_EQ(c.waitSeconds(0.01, transfer += t), 0.0);
  EXPECT_FALSE(c.computeSeconds().has_value());
  // The round's median, 0.3, over the ratio: 0.15 s of compute per step from now on.
  EXPECT_NEAR(c.waitSeconds(0.01, transfer += 0.3), 0.14, 1e-12);
  EXPECT_FALSE(c.computeSeconds().has_value()) << "one round of two is not the end of the calibration";
  // Round 2 measures 0.5, 0.6, 0.7 (the stretched compute changed the transfer): 0.3 s per step.
  EXPECT_NEAR(c.waitSeconds(0.02, transfer += 0.5), 0.13, 1e-12);
  EXPECT_NEAR(c.waitSeconds(0.02, transfer += 0.6), 0.13, 1e-12);
  EXPECT_NEAR(c.waitSeconds(0.02, transfer += 0.7), 0.28, 1e-12);
  ASSERT_TRUE(c.computeSeconds().has_value());
  EXPECT_NEAR(*c.computeSeconds(), 0.3, 1e-12);
  // Fixed from now on: a slow link (a fault) does not stretch the compute, and a step whose real compute
  // took longer than the emulated one does not wait.
  EXPECT_NEAR(c.waitSeconds(0.05, transfer += 5.0), 0.25, 1e-12);
  EXPECT_EQ(c.waitSeconds(0.4, transfer += 0.5), 0.0);
  EXPECT_NEAR(*c.computeSeconds(), 0.3, 1e-12);
}

TEST(ModelPadding, GrowsTheBuffersWithZerosTheModelNeverTouches) {
  auto mlp = Mlp::create({4, 3, 2}, 2);
  ASSERT_TRUE(mlp.isOk());
  const size_t real = mlp->numParameters();
  mlp->padTo(real + 100);
  EXPECT_EQ(mlp->numParameters(), real + 100);
  EXPECT_EQ(mlp->gradients().size(), real + 100);
  EXPECT_EQ(mlp->realParameters(), real);
  mlp->initialize(3);
  ASSERT_TRUE(mlp->computeGradients(std::vector<float>{1, 2, 3, 4, 4, 3, 2, 1}, std::vector<uint8_t>{0, 1}).isOk());
  for (size_t k = real; k < real + 100; ++k) {
    EXPECT_EQ(mlp->parameters()[k], 0.0f);
    EXPECT_EQ(mlp->gradients()[k], 0.0f);
  }
  mlp->padTo(10);  // never shrinks
  EXPECT_EQ(mlp->numParameters(), real + 100);
}

}  // namespace
}  // namespace chaosbed::model
