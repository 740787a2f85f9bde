// Events cannot be lost (issue #11): a writer SIGKILLed at a random instant leaves every event it completed
// readable, and the reader never waits behind a half-written one. Each round forks a writer that appends
// events in a tight loop and reports each completed index over its pipe; the parent kills it after a random
// number of completions plus a random delay (a random instant, not a synchronisation), then reads the list.

#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "tests/testing/multiprocess.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using testing::ChildContext;
using testing::MultiProcess;

constexpr char kList[] = "killtest/events";

int writer(ChildContext& c) {
  Store& store = c.store();
  for (int64_t i = 0;; ++i) {
    const nlohmann::json e = {{"type", "tick"}, {"writer", c.incarnation()}, {"i", i}, {"pad", std::string(size_t(i % 300), 'x')}};
    auto index = store.append(kList, e.dump());
    if (!index.isOk()) return c.fail(index.status().toString());
    c.report("done " + std::to_string(*index) + " " + std::to_string(c.incarnation()) + " " + std::to_string(i));
  }
}

TEST(StoreEvents, WritersKilledAtRandomInstantsLoseNoCompletedEvent) {
  MultiProcess mp;
  std::mt19937 rng(20261201);
  constexpr int kRounds = 200;
  int64_t completed = 0, read_back = 0;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(mp.spawn(0, 1, writer).isOk());
    const int wait_for = int(rng() % 6);  // completions before the kill: 0 (mid-handshake or first append) .. 5
    for (int k = 0; k < wait_for; ++k) ASSERT_TRUE(mp.waitFor(0, "done ", deadlineIn(10s)).isOk()) << "round " << round;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));  // a random kill instant
    ASSERT_TRUE(mp.signal(0, SIGKILL).isOk());
    auto code = mp.waitExit(0, deadlineIn(10s));
    ASSERT_TRUE(code.isOk());
    ASSERT_EQ(*code, 128 + SIGKILL) << "the writer ended on its own: " << (mp.reports(0).empty() ? "" : mp.reports(0).back());
    (void)mp.waitFor(0, "never", deadlineIn(1s));  // drains the pipe to EOF: every completion it reported

    // The reader sees the whole list at once, however the writer died.
    const auto t0 = SteadyClock::now();
    auto entries = mp.store().readList(kList, 0, 1 << 20);
    ASSERT_TRUE(entries.isOk()) << entries.status().toString();
    EXPECT_LT(SteadyClock::now() - t0, 1s) << "the reader stalled";
    for (const std::string& line : mp.reports(0)) {
      if (line.rfind("done ", 0) != 0) continue;
      int64_t index = -1, inc = -1, i = -1;
      ASSERT_EQ(std::sscanf(line.c_str(), "done %ld %ld %ld", &index, &inc, &i), 3) << line;
      ++completed;
      ASSERT_LT(index, int64_t(entries->size())) << "completed event " << index << " is missing (round " << round << ")";
      const auto e = nlohmann::json::parse((*entries)[size_t(index)], nullptr, false);
      ASSERT_TRUE(e.is_object()) << "entry " << index << " is torn";
      EXPECT_EQ(e.value("writer", -1), inc);
      EXPECT_EQ(e.value("i", int64_t(-1)), i);
    }
    for (const std::string& entry : *entries) EXPECT_TRUE(nlohmann::json::parse(entry, nullptr, false).is_object()) << "a torn entry";
    read_back = int64_t(entries->size());
  }
  // Some rounds must have completed events, or the test proved nothing.
  EXPECT_GT(completed, kRounds);
  EXPECT_GE(read_back, completed);
  std::printf("[store events] %d writers killed, %ld completed events, %ld entries read, none missing\n", kRounds,
              long(completed), long(read_back));
}

}  // namespace
}  // namespace chaosbed
