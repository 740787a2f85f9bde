// experiments/run/progress: the live status line's ETA, and how often a pipe gets a line.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "experiments/run/progress.h"

namespace chaosbed::run {
namespace {

TEST(Progress, EtaFollowsALinearTrendToTheTarget) {
  // Accuracy 0.5 + 0.05 t: the target 0.85 is reached at t = 7, so 3 s after the latest evaluation at t = 4.
  std::vector<std::pair<double, double>> evals;
  for (int t = 0; t <= 4; ++t) evals.emplace_back(t, 0.5 + 0.05 * t);
  auto eta = etaSeconds(evals, 0.85);
  ASSERT_TRUE(eta.has_value());
  EXPECT_NEAR(*eta, 3.0, 1e-9);
  // Only the last `window` evaluations count: an early plateau does not slow the estimate.
  std::vector<std::pair<double, double>> late = {{0, 0.1}, {1, 0.1}, {2, 0.1}};
  for (int t = 3; t <= 10; ++t) late.emplace_back(t, 0.5 + 0.05 * (t - 3));
  ASSERT_TRUE(etaSeconds(late, 0.85, 5).has_value());
  EXPECT_NEAR(*etaSeconds(late, 0.85, 5), 7.0 + 3 - 10, 1e-9);
}

TEST(Progress, NoEtaWithoutARisingTrend) {
  EXPECT_FALSE(etaSeconds({{0, 0.5}, {1, 0.6}}, 0.85).has_value()) << "two points are no trend";
  EXPECT_FALSE(etaSeconds({{0, 0.6}, {1, 0.6}, {2, 0.6}}, 0.85).has_value());
  EXPECT_FALSE(etaSeconds({{0, 0.7}, {1, 0.6}, {2, 0.5}}, 0.85).has_value());
}

// What a printer writes to a pipe (a line at most every 5 s of run time) while `feed` drives it.
std::string printedToAPipe(const std::function<void(ProgressPrinter&)>& feed) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) {
    ADD_FAILURE() << "open_memstream failed";
    return {};
  }
  {
    ProgressPrinter printer(out, /*tty=*/false, 0.85, /*pipe_interval_s=*/5.0);
    feed(printer);
  }
  std::fclose(out);
  std::string s(text, size);
  std::free(text);
  return s;
}

TEST(Progress, APipeGetsALineEveryFewSecondsOfTheRun) {
  const std::string s = printedToAPipe([](ProgressPrinter& printer) {
    for (int i = 0; i <= 24; ++i) {  // 12 s of progress at 2 Hz
      Progress p;
      p.label = "mirrored";
      p.elapsed_s = 0.5 * i;
      p.accuracy = 0.5 + 0.02 * i;
      p.accuracy_at_s = p.elapsed_s;
      p.time_limit_s = 300;
      printer.update(p);
    }
    printer.done("mirrored", "target");
  });
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 3 + 1) << "lines at 0, 5 and 10 s, then done:\n" << s;
  EXPECT_NE(s.find("[mirrored] done: target"), std::string::npos) << s;
  // Accuracy 0.5 + 0.04 t reaches 0.85 at t = 8.75: at t = 5, 3.75 s ahead (rounded up); at t = 10, past it.
  EXPECT_NE(s.find("ETA 4 s"), std::string::npos) << s;
  EXPECT_NE(s.find("at target"), std::string::npos) << s;
}

TEST(Progress, StepsPerSecondIsTheRateSinceTheLastLine) {
  const std::string s = printedToAPipe([](ProgressPrinter& printer) {
    for (int i = 0; i <= 20; ++i) {  // 100 steps/s until 6 s, then none (a long all-reduce)
      Progress p;
      p.label = "mirrored";
      p.elapsed_s = 0.5 * i;
      p.steps = int64_t(100 * std::min(p.elapsed_s, 6.0));
      printer.update(p);
    }
  });
  // Lines at 0, 5 and 10 s: none yet, 500 steps in 5 s, then 100 steps in 5 s (the last 500 ms had none).
  EXPECT_NE(s.find("  0 steps/s"), std::string::npos) << s;
  EXPECT_NE(s.find("  100 steps/s"), std::string::npos) << s;
  EXPECT_NE(s.find("  20 steps/s"), std::string::npos) << s;
}

}  // namespace
}  // namespace chaosbed::run
