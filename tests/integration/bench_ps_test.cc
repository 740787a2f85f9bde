// `chaosbed bench ps --json`: the parameter server's own code, measured per worker count. Its stdout is one JSON
// object per count and nothing else (UCX logs on stdout in the ranks; they must not reach it), each with a
// push rate per worker and the limit it is judged against.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

TEST(BenchPs, PrintsOneJsonRowPerWorkerCountOnStdout) {
  testing::Command bench({"/bin/sh", "-c",
                          testing::chaosbedBinary() +
                              " bench ps --workers 1,2 --shards 1 --layers 32,32,4 --batch 32 --bench_ps_s 0.5 --json"
                              " 2>/dev/null"});
  auto code = bench.wait(deadlineIn(120s));
  ASSERT_TRUE(code.has_value()) << bench.output();
  ASSERT_EQ(*code, 0) << bench.output();
  std::istringstream lines(bench.output());
  int row = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON row on stdout: " << line;
    ++row;
    SCOPED_TRACE(line);
    EXPECT_EQ(j["workers"].get<int>(), row);
    ASSERT_EQ(j["per_worker_pushes_per_s"].size(), size_t(row));
    double sum = 0;
    for (const auto& r : j["per_worker_pushes_per_s"]) {
      EXPECT_GT(r.get<double>(), 0.0) << "a worker made no push";
      sum += r.get<double>();
    }
    EXPECT_NEAR(j["pushes_per_s"].get<double>(), sum, 1e-6 * sum);
    EXPECT_GT(j["server_bound_pushes_per_s"].get<double>(), 0.0);
    EXPECT_LE(j["limit_pushes_per_s"].get<double>(), row * j["one_worker_pushes_per_s"].get<double>() * (1 + 1e-9));
    if (row == 1) {
      EXPECT_DOUBLE_EQ(j["of_limit"].get<double>(), 1.0) << "one worker is its own limit";
    }
  }
  EXPECT_EQ(row, 2);
}

}  // namespace
}  // namespace chaosbed
