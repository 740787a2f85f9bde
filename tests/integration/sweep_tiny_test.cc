// End to end: `chaosbed sweep` of a one-value grid over the tiny synthetic scenario (one point plus its
// no-chaos baseline), then the same sweep again, which must find both points complete and run nothing.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chaosbed/config.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using testing::readFile;

TEST(SweepEndToEnd, TinySweepRunsPointAndBaselineThenResumes) {
  const std::string dir = testing::makeTempDir("sweep");
  ASSERT_FALSE(dir.empty());
  std::string spec = readFile(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
  spec += "\nsweep:\n  grid:\n    chaos.faults[0].duration_s: [1]\n  seeds: [7]\n";
  std::ofstream(dir + "/sweep.yaml") << spec;
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "sweep", dir + "/sweep.yaml", "--out=" + dir + "/out",
                                         "--metrics_addr=127.0.0.1:0"};
  testing::Command first(argv);
  auto code = first.wait(deadlineIn(300s));
  ASSERT_TRUE(code.has_value()) << "sweep did not finish in 300 s:\n" << first.output();
  ASSERT_EQ(*code, 0) << first.output();
  EXPECT_NE(first.output().find("2 point(s): 2 run now, 0 already complete, 0 failed"), std::string::npos)
      << first.output();
  const std::string csv = readFile(dir + "/out/sweep.csv");
  EXPECT_NE(csv.find("summary,baseline,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("summary,chaos.faults[0].duration_s=1,"), std::string::npos) << csv;
  size_t points = 0;
  for (const auto& e : fs::directory_iterator(dir + "/out/points")) {
    ++points;
    EXPECT_TRUE(fs::exists(e.path() / "summary.json")) << e.path();
    EXPECT_TRUE(fs::exists(e.path() / "report.html")) << e.path();
  }
  EXPECT_EQ(points, 2u);
  EXPECT_TRUE(fs::exists(dir + "/out/crossover.svg"));

  testing::Command second(argv);
  code = second.wait(deadlineIn(60s));
  ASSERT_TRUE(code.has_value()) << second.output();
  EXPECT_EQ(*code, 0) << second.output();
  EXPECT_NE(second.output().find("2 point(s): 0 run now, 2 already complete, 0 failed"), std::string::npos)
      << second.output();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed
