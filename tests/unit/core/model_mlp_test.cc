// Mlp: layout, gradients against central finite differences (every parameter of every layer), the loss
// value, evaluation and input validation.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/data/random.h"
#include "core/model/mlp.h"

namespace chaosbed::model {
namespace {

struct SmallProblem {
  std::vector<float> inputs;
  std::vector<uint8_t> labels;
};

SmallProblem smallProblem(size_t n, size_t dims, int classes) {
  data::Rng rng(5);
  SmallProblem p;
  for (size_t i = 0; i < n * dims; ++i) p.inputs.push_back(data::standardNormal(rng));
  for (size_t i = 0; i < n; ++i) p.labels.push_back(static_cast<uint8_t>(i % static_cast<size_t>(classes)));
  return p;
}

// Largest violation of |numeric - analytic| <= atol + rtol * |analytic| over all parameters, as a ratio
// (<= 1 passes). `analytic` may be perturbed by the caller to check that the check can fail.
double gradientCheck(Mlp& mlp, const SmallProblem& p, const std::vector<float>& analytic) {
  constexpr float kEps = 1e-3f;
  constexpr double kAtol = 3e-4, kRtol = 1e-2;
  double worst = 0;
  auto params = mlp.parameters();
  for (size_t k = 0; k < params.size(); ++k) {
    const float saved = params[k];
    params[k] = saved + kEps;
    const double up = mlp.computeGradients(p.inputs, p.labels).value();
    params[k] = saved - kEps;
    const double down = mlp.computeGradients(p.inputs, p.labels).value();
    params[k] = saved;
    const double numeric = (up - down) / (2.0 * kEps);
    worst = std::max(worst, std::abs(numeric - analytic[k]) / (kAtol + kRtol * std::abs(analytic[k])));
  }
  return worst;
}

TEST(Mlp, LayoutIsOneContiguousBufferWeightsThenBias) {
  auto mlp = Mlp::create(defaultLayers(), 64);
  ASSERT_TRUE(mlp.isOk());
  EXPECT_EQ(mlp->numParameters(), 784u * 256 + 256 + 256u * 128 + 128 + 128u * 10 + 10);
  EXPECT_EQ(mlp->gradients().size(), mlp->numParameters());
  const auto& l = mlp->layout();
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].weight_offset, 0u);
  EXPECT_EQ(l[0].bias_offset, 784u * 256);
  EXPECT_EQ(l[1].weight_offset, 784u * 256 + 256);
  EXPECT_EQ(l[2].bias_offset + l[2].out, mlp->numParameters());
}

TEST(Mlp, GradientsMatchFiniteDifferencesInEveryLayer) {
  // Float32 central differences with eps 1e-3: rounding error ~ 2 ulp(loss) / (2 eps) ~ 1.2e-4, truncation error
  // ~ eps^2 * f''' ~ 1e-6, and eps is small enough that no ReLU input crosses zero here (eps 1e-2 does, for 5
  // of 89 parameters). Both errors sit inside atol 3e-4 + 1% while a 5% error in any layer is caught (next test).
  auto mlp = Mlp::create({6, 7, 5, 4}, 8);
  ASSERT_TRUE(mlp.isOk());
  mlp->initialize(3);
  const SmallProblem p = smallProblem(5, 6, 4);
  ASSERT_TRUE(mlp->computeGradients(p.inputs, p.labels).isOk());
  const std::vector<float> analytic(mlp->gradients().begin(), mlp->gradients().end());
  // Every layer's weights and biases get a non-zero gradient (so the check is not vacuous).
  for (const auto& s : mlp->layout()) {
    double w = 0, b = 0;
    for (size_t i = 0; i < s.in * s.out; ++i) w += std::abs(analytic[s.weight_offset + i]);
    for (size_t i = 0; i < s.out; ++i) b += std::abs(analytic[s.bias_offset + i]);
    EXPECT_GT(w, 1e-3);
    EXPECT_GT(b, 1e-3);
  }
  EXPECT_LE(gradientCheck(*mlp, p, analytic), 1.0);
}

TEST(Mlp, GradientCheckCatchesAFivePercentError) {
  auto mlp = Mlp::create({6, 7, 5, 4}, 8);
  ASSERT_TRUE(mlp.isOk());
  mlp->initialize(3);
  const SmallProblem p = smallProblem(5, 6, 4);
  ASSERT_TRUE(mlp->computeGradients(p.inputs, p.labels).isOk());
  for (const auto& s : mlp->layout()) {
    std::vector<float> wrong(mlp->gradients().begin(), mlp->gradients().end());
    // The largest weight gradient of this layer, off by 5%.
    size_t arg = s.weight_offset;
    for (size_t i = s.weight_offset; i < s.bias_offset; ++i)
      if (std::abs(wrong[i]) > std::abs(wrong[arg])) arg = i;
    wrong[arg] *= 1.05f;
    EXPECT_GT(gradientCheck(*mlp, p, wrong), 1.0) << "layer with input " << s.in;
  }
}

TEST(Mlp, LossIsMeanSoftmaxCrossEntropy) {
  // One layer with zero weights and biases 0, ln 2: logits (0, ln 2) for every sample.
  auto mlp = Mlp::create({3, 2}, 4);
  ASSERT_TRUE(mlp.isOk());
  auto params = mlp->parameters();
  std::fill(params.begin(), params.end(), 0.0f);
  params[7] = std::log(2.0f);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> y = {0, 1};
  auto loss = mlp->computeGradients(x, y);
  ASSERT_TRUE(loss.isOk());
  // p = (1/3, 2/3): loss = (ln 3 + ln 1.5) / 2
  EXPECT_NEAR(*loss, (std::log(3.0) + std::log(1.5)) / 2, 1e-6);
  // Bias gradient: mean of (p - onehot) = ((1/3 - 1) + 1/3, (2/3) + (2/3 - 1)) / 2
  EXPECT_NEAR(mlp->gradients()[6], -1.0 / 6, 1e-6);
  EXPECT_NEAR(mlp->gradients()[7], 1.0 / 6, 1e-6);
}

TEST(Mlp, InitializationIsDeterministicAndBounded) {
  auto a = Mlp::create({10, 8, 3}, 4);
  auto b = Mlp::create({10, 8, 3}, 16);
  ASSERT_TRUE(a.isOk() && b.isOk());
  a->initialize(11);
  b->initialize(11);
  EXPECT_TRUE(std::equal(a->parameters().begin(), a->parameters().end(), b->parameters().begin()));
  b->initialize(12);
  EXPECT_FALSE(std::equal(a->parameters().begin(), a->parameters().end(), b->parameters().begin()));
  for (size_t i = 0; i < 10 * 8 + 8; ++i) EXPECT_LE(std::abs(a->parameters()[i]), 1.0f / std::sqrt(10.0f));
}

TEST(Mlp, EvaluateCountsArgmaxHits) {
  auto mlp = Mlp::create({2, 2}, 3);  // max batch 3 < dataset size 5: evaluation runs in chunks
  ASSERT_TRUE(mlp.isOk());
  auto p = mlp->parameters();
  // logits = x (identity weights, zero bias)
  std::fill(p.begin(), p.end(), 0.0f);
  p[0] = 1;
  p[3] = 1;
  data::Dataset d;
  d.dims = 2;
  d.num_classes = 2;
  d.images = {1, 0, 0, 1, 1, 0, 0, 1, 0, 1};
  d.labels = {0, 1, 0, 1, 0};  // the last one is wrong
  auto r = mlp->evaluate(d);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->samples, 5u);
  EXPECT_DOUBLE_EQ(r->accuracy, 0.8);
  const double right = std::log(1 + std::exp(-1.0)), wrong = std::log(1 + std::exp(1.0));
  EXPECT_NEAR(r->loss, (4 * right + wrong) / 5, 1e-6);
}

TEST(Mlp, RejectsBadInput) {
  auto mlp = Mlp::create({4, 3}, 2);
  ASSERT_TRUE(mlp.isOk());
  const std::vector<float> x(8, 0.5f);
  EXPECT_EQ(mlp->computeGradients(x, std::vector<uint8_t>{0, 1, 2}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mlp->computeGradients(std::vector<float>(7), std::vector<uint8_t>{0, 1}).status().code(),
            StatusCode::kInvalidArgument);
  auto bad_label = mlp->computeGradients(x, std::vector<uint8_t>{0, 3});
  ASSERT_FALSE(bad_label.isOk());
  EXPECT_NE(bad_label.status().message().find("label 3 of sample 1"), std::string::npos);
  EXPECT_FALSE(Mlp::create({4}, 2).isOk());
  EXPECT_FALSE(Mlp::create({4, 0, 2}, 2).isOk());
  EXPECT_FALSE(Mlp::create({4, 2}, 0).isOk());
}

TEST(ParseLayers, AcceptsListsAndNamesTheBadEntry) {
  auto ok = parseLayers("784,256,128,10");
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(*ok, defaultLayers());
  auto bad = parseLayers("784,x2,10");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("entry 2 (\"x2\")"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(parseLayers("784").isOk());
  EXPECT_FALSE(parseLayers("784,,10").isOk());
  EXPECT_FALSE(parseLayers("784,0,10").isOk());
  EXPECT_FALSE(parseLayers("").isOk());
}

TEST(Mlp, GemmFlopsSkipTheFirstLayersInputGradient) {
  auto mlp = Mlp::create({4, 3, 2}, 1);
  ASSERT_TRUE(mlp.isOk());
  EXPECT_DOUBLE_EQ(mlp->flopsPerStep(5), 2.0 * 2 * 5 * 4 * 3 + 3.0 * 2 * 5 * 3 * 2);
}

}  // namespace
}  // namespace chaosbed::model
