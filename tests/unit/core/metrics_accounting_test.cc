// Accounting: a freeze is booked once, as paused, and taken out of the interval it fell into; the residual
// of wall time against the categories is what nothing (or two things) booked.

#include "core/metrics/accounting.h"

#include <gtest/gtest.h>

#include <cmath>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "core/metrics/cpu_wait.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Accounting, APauseInsideAnIntervalIsBookedAsPausedNotAsTheInterval) {
  Accounting a;
  const auto t0 = Clock::now();
  a.notePause(t0 - 3s, t0 - 1s);  // 2 s of a 5 s collective were frozen
  a.add(TimeCategory::kIdlePeer, 5.0);
  const NodeStats s = a.snapshot();
  EXPECT_NEAR(s.seconds[int(TimeCategory::kPaused)], 2.0, 1e-3);
  EXPECT_NEAR(s.seconds[int(TimeCategory::kIdlePeer)], 3.0, 0.01);
  // An interval that does not overlap the pause keeps all of its time.
  a.add(TimeCategory::kCompute, 0.5);
  EXPECT_NEAR(a.snapshot().seconds[int(TimeCategory::kCompute)], 0.5, 1e-3);
}

TEST(Accounting, ResidualIsWallLessEveryCategory) {
  NodeStats s;
  s.wall_seconds = 10;
  s.seconds[int(TimeCategory::kCompute)] = 6;
  s.seconds[int(TimeCategory::kPaused)] = 3;
  EXPECT_NEAR(s.residualFraction(), 0.1, 1e-12);  // one second booked nowhere
  s.seconds[int(TimeCategory::kIdlePeer)] = 2;
  EXPECT_NEAR(s.residualFraction(), 0.1, 1e-12);  // one second booked twice
  NodeStats none;
  EXPECT_EQ(none.residualFraction(), 0);
  auto back = NodeStats::fromJson(s.toJson());
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->wall_seconds, 10);
  EXPECT_FALSE(back->final_report);
}

TEST(Accounting, FinishFreezesTheWallAndMarksTheReportFinal) {
  Accounting a;
  a.start();
  a.add(TimeCategory::kCompute, 0.0);
  a.finish();
  const NodeStats first = a.snapshot();
  EXPECT_TRUE(first.final_report);
  std::this_thread::sleep_for(30ms);  // time passing after finish() is the input here
  EXPECT_EQ(a.snapshot().wall_seconds, first.wall_seconds);
}

// The books close at finish(): a freeze or throttling of the teardown, an add() or a frame that ends later
// is outside the frozen wall and is not booked (a worker whose teardown its CPU quota throttled had booked
// 1.9% more than its wall).
TEST(Accounting, NothingIsBookedAfterFinish) {
  Accounting a;
  a.start();
  std::optional<Accounting::Frame> late(std::in_place, a, TimeCategory::kCompute);
  a.add(TimeCategory::kTransfer, 0.0);
  a.finish();
  const NodeStats closed = a.snapshot();
  const auto now = Clock::now();
  a.notePause(now - 50ms, now);
  a.add(TimeCategory::kIdlePeer, 0.05);
  late.reset();
  const NodeStats after = a.snapshot();
  for (int c = 0; c < kTimeCategories; ++c)
    EXPECT_EQ(after.seconds[size_t(c)], closed.seconds[size_t(c)]) << timeCategoryName(TimeCategory(c));
  EXPECT_LE(after.residualFraction(), closed.residualFraction());
}

// finish() books what nothing booked to `unattributed`, from the same two instants that define the wall:
// no role category absorbs the unknown, and the residual counts it. Time booked twice shows there too.
TEST(Accounting, FinishBooksTheUnbookedRestOfTheWallAsUnattributed) {
  Accounting a;
  a.start();
  a.add(TimeCategory::kTransfer, 0.0);
  std::this_thread::sleep_for(20ms);  // unbooked time passing is the input here
  a.finish();
  const NodeStats s = a.snapshot();
  EXPECT_GE(s.wall_seconds, 0.02);
  EXPECT_EQ(s.seconds[int(TimeCategory::kCompute)], 0.0);
  // An add() books its own microseconds (reading the kernel's counts) with its interval, nothing more.
  const double own = s.seconds[int(TimeCategory::kTransfer)];
  EXPECT_LT(own, 1e-3);
  EXPECT_NEAR(s.seconds[int(TimeCategory::kUnattributed)], s.wall_seconds - own, 1e-9);
  EXPECT_NEAR(s.residualFraction(), 1.0 - own / s.wall_seconds, 1e-9);

  Accounting framed;
  framed.start();
  {
    Accounting::Frame f(framed, TimeCategory::kCompute);
    std::this_thread::sleep_for(20ms);
  }
  framed.finish();
  const NodeStats f = framed.snapshot();
  EXPECT_GT(f.seconds[int(TimeCategory::kCompute)], 0.0195);
  EXPECT_LT(f.residualFraction(), 0.2) << "only the moments around the frame are unattributed";

  Accounting twice;
  twice.start();
  twice.add(TimeCategory::kTransfer, 5.0);  // an interval longer than the wall: booked twice
  twice.finish();
  const NodeStats t = twice.snapshot();
  EXPECT_EQ(t.seconds[int(TimeCategory::kUnattributed)], 0.0);
  EXPECT_GT(t.residualFraction(), 1.0);
}

// Unattributed time says where it came from: the spans between the outermost bookings that bound it, by
// source line, longest first. Bookings inside a frame are covered by it and bound no gap.
TEST(Accounting, GapsNameTheBookingsAroundTheUnbookedTimeLongestFirst) {
  const std::string here = "core/metrics_accounting_test.cc:";
  Accounting a;
  a.start();
  const int first_line = __LINE__ + 1;
  { Accounting::Frame f(a, TimeCategory::kCompute); }
  std::this_thread::sleep_for(30ms);  // unbooked time passing is the input here
  const int second_line = __LINE__ + 2;
  {
    Accounting::Frame f(a, TimeCategory::kCompute);
    a.add(TimeCategory::kTransfer, 0.0);  // inside the frame: no gap of its own
  }
  std::this_thread::sleep_for(10ms);
  a.finish();
  const std::vector<Accounting::Gap> gaps = a.gaps();
  // At most three gaps here (before the first frame, between the frames, before finish()): all are kept.
  ASSERT_GE(gaps.size(), 2u);
  double gapped = 0;
  const Accounting::Gap *between = nullptr, *last = nullptr;
  for (size_t i = 0; i < gaps.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(gaps[i - 1].seconds, gaps[i].seconds) << "longest first";
    }
    gapped += gaps[i].seconds;
    if (gaps[i].after == here + std::to_string(first_line)) between = &gaps[i];
    if (gaps[i].before == "finish") last = &gaps[i];
  }
  ASSERT_NE(between, nullptr) << "no gap after line " << first_line;
  EXPECT_EQ(between->before, here + std::to_string(second_line));
  EXPECT_GE(between->seconds, 0.03);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->after, here + std::to_string(second_line));
  EXPECT_GE(last->seconds, 0.01);
  EXPECT_GT(last->at, between->at);
  // Every unattributed instant lies in a gap (a gap may also hold time booked as paused or throttled: a
  // loaded machine that kept the watch off the CPU).
  EXPECT_LE(a.snapshot().seconds[int(TimeCategory::kUnattributed)], gapped + 1e-6);
}

// A process that waits for a CPU is not paused: real-time threads, one per core, keep the watch off every
// CPU for most of a second at a time (the kernel's real-time throttling leaves the rest 5% of each second),
// which a gap alone would book as a freeze. The kernel counts it as run queue delay: nothing was frozen, so
// nothing is paused.
TEST(Accounting, AProcessStarvedOfCpuIsNotPaused) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Accounting a;
    a.start();
    if (!CpuWait::forThisThread().knowsRunDelay()) ::_exit(3);  // no sched_info: nothing to tell them apart
    std::atomic<bool> stop{false};
    std::atomic<int> realtime{0};
    std::vector<std::thread> hogs;
    for (unsigned i = 0; i < std::thread::hardware_concurrency(); ++i)
      hogs.emplace_back([&] {
        sched_param p{};
        p.sched_priority = 1;
        if (::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &p) != 0) return;
        ++realtime;
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
    const auto begin = Clock::now();
    std::this_thread::sleep_for(1500ms);  // the starvation's length is the input
    stop = true;
    for (auto& t : hogs) t.join();
    if (realtime.load() == 0) ::_exit(4);
    a.add(TimeCategory::kCompute, std::chrono::duration<double>(Clock::now() - begin).count());
    a.finish();
    const NodeStats s = a.snapshot();
    std::fprintf(stderr, "child: paused %.3f s, compute %.3f s, wall %.3f s\n", s.seconds[int(TimeCategory::kPaused)],
                 s.seconds[int(TimeCategory::kCompute)], s.wall_seconds);
    ::_exit(s.seconds[int(TimeCategory::kPaused)] < 0.05 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) GTEST_SKIP() << "this kernel keeps no run queue delays";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 4) GTEST_SKIP() << "no real-time scheduling here (needs root)";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// The cgroup file CpuWait reads is found from /proc/self/cgroup and the mounts, on either hierarchy.
TEST(CpuWait, FindsTheCgroupsCpuStatOnV1AndV2) {
  bool ns = false;
  const std::string v1_cgroup = "4:memory:/x\n2:cpu,cpuacct:/chaosbed/run/worker-0\n0::/\n";
  const std::string v1_mounts =
      "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
      "31 25 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
  EXPECT_EQ(cgroupCpuStatPath(v1_cgroup, v1_mounts, &ns), "/sys/fs/cgroup/cpu,cpuacct/chaosbed/run/worker-0/cpu.stat");
  EXPECT_TRUE(ns);
  const std::string v2_cgroup = "0::/chaosbed/run/ps-0\n";
  const std::string v2_mounts = "25 1 0:23 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(cgroupCpuStatPath(v2_cgroup, v2_mounts, &ns), "/sys/fs/cgroup/chaosbed/run/ps-0/cpu.stat");
  EXPECT_FALSE(ns);
  EXPECT_EQ(cgroupCpuStatPath("0::/\n", "", &ns), "");
}

// The watch thread of a real process that is stopped and continued: the stop shows as paused, as long as the
// parent measured it, and the interval around it keeps only its running time (nothing booked twice). How
// long the parent takes to stop and continue the child (a loaded machine) is not the test's business: the
// parent brackets the stop (its shortest and longest possible length, from clock readings on both sides of
// each kill) and sends both. The child reports through its exit code.
TEST(Accounting, AStoppedProcessBooksItsStopAsPaused) {
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Accounting a;
    a.start();
    const auto begin = Clock::now();
    char c = 'r';
    (void)!::write(ready[1], &c, 1);
    double stopped_s[2] = {0, 0};  // stopped (SIGSTOP) for about 1 s meanwhile: at least [0], at most [1]
    (void)!::read(go[0], stopped_s, sizeof stopped_s);
    a.add(TimeCategory::kIdlePeer, std::chrono::duration<double>(Clock::now() - begin).count());
    a.finish();
    const NodeStats s = a.snapshot();
    const double paused = s.seconds[int(TimeCategory::kPaused)];
    const double peer = s.seconds[int(TimeCategory::kIdlePeer)];
    std::fprintf(stderr, "child: stopped %.3f-%.3f s, paused %.3f s, peer %.3f s, wall %.3f s, residual %.4f\n",
                 stopped_s[0], stopped_s[1], paused, peer, s.wall_seconds, s.residualFraction());
    ::_exit(stopped_s[0] > 0.9 && paused > stopped_s[0] - 0.15 && paused < stopped_s[1] + 0.15 &&
                    peer < s.wall_seconds - paused + 0.01 && s.residualFraction() < 0.05
                ? 0
                : 1);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const auto before_stop = Clock::now();
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  const auto after_stop = Clock::now();
  std::this_thread::sleep_for(1s);  // the length of the stop is the test's input
  const auto before_cont = Clock::now();
  ASSERT_EQ(::kill(child, SIGCONT), 0);
  const auto after_cont = Clock::now();
  const double stopped_s[2] = {std::chrono::duration<double>(before_cont - after_stop).count(),
                               std::chrono::duration<double>(after_cont - before_stop).count()};
  ASSERT_EQ(::write(go[1], stopped_s, sizeof stopped_s), ssize_t(sizeof stopped_s));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace chaosbed
