// Under workload.emulate a run that ends far from its emulated comm/compute ratio measured another regime
// than the one it names: summary.json says so per strategy (comm_compute_ratio.off_by, on_target), the
// terminal prints a warning saying which way, and report.html repeats it.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "experiments/report/report.h"
#include "experiments/run/results.h"

namespace chaosbed::run {
namespace {

StrategyResult result(const std::string& label, double compute_s, double transfer_s, std::optional<double> target) {
  StrategyResult r;
  r.label = label;
  r.kind = label;
  r.workers.seconds[int(TimeCategory::kCompute)] = compute_s;
  r.workers.seconds[int(TimeCategory::kTransfer)] = transfer_s;
  r.target_comm_compute_ratio = target;
  return r;
}

TEST(EmulationRatio, SummarySaysHowFarEachStrategyWasFromItsTarget) {
  // 3.6 / 10 = 0.36 against 2.44: 85% below.
  const nlohmann::json below = result("mirrored", 10, 3.6, 2.44).toJson()["comm_compute_ratio"];
  EXPECT_NEAR(below["measured"].get<double>(), 0.36, 1e-12);
  EXPECT_NEAR(below["target"].get<double>(), 2.44, 1e-12);
  EXPECT_NEAR(below["off_by"].get<double>(), 0.36 / 2.44 - 1, 1e-12);
  EXPECT_FALSE(below["on_target"].get<bool>());
  // 23 / 10 = 2.3 against 2.44: 6% below, within the tolerance.
  const nlohmann::json near = result("mirrored", 10, 23, 2.44).toJson()["comm_compute_ratio"];
  EXPECT_TRUE(near["on_target"].get<bool>());
  // Just past the tolerance on the high side.
  const nlohmann::json above = result("mirrored", 10, 10 * 2.0 * (1 + kEmulationRatioTolerance) + 0.01, 2.0)
                                   .toJson()["comm_compute_ratio"];
  EXPECT_FALSE(above["on_target"].get<bool>());
  EXPECT_GT(above["off_by"].get<double>(), kEmulationRatioTolerance);
  // No emulation, or no compute booked: no verdict.
  for (const StrategyResult& r : {result("mirrored", 10, 3, std::nullopt), result("mirrored", 0, 3, 2.44)}) {
    const nlohmann::json j = r.toJson()["comm_compute_ratio"];
    EXPECT_TRUE(j["off_by"].is_null());
    EXPECT_TRUE(j["on_target"].is_null());
  }
}

TEST(EmulationRatio, TerminalWarnsOncePerStrategyOffTargetAndSaysWhichWay) {
  const std::vector<StrategyResult> results = {result("mirrored", 10, 3.6, 24.41),
                                               result("parameter_server", 10, 33, 3.25),
                                               result("mirrored_elastic", 10, 44, 1.5), result("plain", 10, 3, std::nullopt)};
  const std::string text = emulationWarnings(results);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << text;
  EXPECT_NE(text.find("warning: mirrored ran at a comm/compute ratio of 0.36, 99% below the emulated job's 24.41"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("cannot shorten"), std::string::npos) << text;
  EXPECT_NE(text.find("warning: mirrored_elastic ran at a comm/compute ratio of 4.40, 193% above"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("parameter_server"), std::string::npos) << text;  // 3.3 against 3.25: on target
  EXPECT_EQ(text.find("plain"), std::string::npos) << text;
  EXPECT_EQ(emulationWarnings({result("mirrored", 10, 23, 2.44)}), "");
}

TEST(EmulationRatio, ReportWarnsAboutTheStrategiesOffTargetOnly) {
  report::ReportInput in;
  in.summary = {{"experiment", "emulated"}, {"emulation", {{"note", "emulated: resnet50 on v100 at 1 Gb/s"}}}};
  in.summary["strategies"]["mirrored"] = result("mirrored", 10, 3.6, 24.41).toJson();
  in.summary["strategies"]["parameter_server"] = result("parameter_server", 10, 33, 3.25).toJson();
  in.summary["strategies"]["broken"] = {{"kind", "mirrored"}, {"comm_compute_ratio", {{"on_target", "no"}}}};
  in.run_order = {"mirrored", "parameter_server", "broken"};
  const std::string html = report::renderReport(in);
  EXPECT_NE(html.find("warning: mirrored: comm/compute ratio 0.36 against the emulated 24.41 (off by -99%)"),
            std::string::npos);
  EXPECT_EQ(html.find("warning: parameter_server"), std::string::npos);
  EXPECT_EQ(html.find("warning: broken"), std::string::npos);  // not a boolean: no verdict to show
}

}  // namespace
}  // namespace chaosbed::run
