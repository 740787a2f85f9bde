#include "experiments/run/provenance.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace chaosbed::run {
namespace {

// A thread that spins through the whole window is busy time /proc/stat counts: at least a good part of one
// core's share of the machine, however many other tests share it.
TEST(Provenance, CpuBusyFractionSeesASpinningThread) {
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const double busy = cpuBusyFraction(std::chrono::milliseconds(300));
  stop = true;
  spinner.join();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_GE(busy, 0.25 / cores) << "one spinning thread of " << cores << " cores";
  EXPECT_LE(busy, 1.0);
}

// The judgement of a run's start comes from that reading, and both are in summary.json's provenance.
TEST(Provenance, QuietIsTheCpuUseAtTheStartAndIsRecorded) {
  const Provenance p = Provenance::atStart();
  EXPECT_GE(p.cpu_busy_at_start, 0);
  EXPECT_EQ(p.quiet, p.cpu_busy_at_start < kQuietBusy);
  const nlohmann::json j = p.toJson();
  EXPECT_DOUBLE_EQ(j.at("cpu_busy_at_start").get<double>(), p.cpu_busy_at_start);
  EXPECT_EQ(j.at("quiet").get<bool>(), p.quiet);
}

}  // namespace
}  // namespace chaosbed::run
