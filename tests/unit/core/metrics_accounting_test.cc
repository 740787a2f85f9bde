// Accounting: a freeze is booked once, as paused, and taken out of the interval it fell into; the residual
// of wall time against the categories is what nothing (or two things) booked.

#include "core/metrics/accounting.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

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

// With a category for what nothing booked, finish() books the rest of the wall there, from the same two
// instants that define the wall: nothing falls between a frame and the wall's ends. Time booked twice still
// shows as a residual, and without the category unbooked time does too.
TEST(Accounting, FinishBooksTheUnbookedRestOfTheWallToTheRolesCategory) {
  Accounting a;
  a.start(TimeCategory::kCompute);
  a.add(TimeCategory::kTransfer, 0.0);
  std::this_thread::sleep_for(20ms);  // unbooked time passing is the input here
  a.finish();
  const NodeStats s = a.snapshot();
  EXPECT_GE(s.wall_seconds, 0.02);
  EXPECT_NEAR(s.seconds[int(TimeCategory::kCompute)], s.wall_seconds, 1e-9);
  EXPECT_LT(s.residualFraction(), 1e-9);

  Accounting twice;
  twice.start(TimeCategory::kCompute);
  twice.add(TimeCategory::kTransfer, 5.0);  // an interval longer than the wall: booked twice
  twice.finish();
  const NodeStats t = twice.snapshot();
  EXPECT_EQ(t.seconds[int(TimeCategory::kCompute)], 0.0);
  EXPECT_GT(t.residualFraction(), 1.0);

  Accounting plain;
  plain.start();
  std::this_thread::sleep_for(20ms);
  plain.finish();
  EXPECT_NEAR(plain.snapshot().residualFraction(), 1.0, 1e-9);
}

// The watch thread of a real process that is stopped and continued: the stop shows as paused, and the
// interval around it keeps only its running time. The child reports through its exit code.
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
    (void)!::read(go[0], &c, 1);  // stopped (SIGSTOP) for about 1 s meanwhile, then told to go on
    a.add(TimeCategory::kIdlePeer, std::chrono::duration<double>(Clock::now() - begin).count());
    a.finish();
    const NodeStats s = a.snapshot();
    const double paused = s.seconds[int(TimeCategory::kPaused)];
    const double peer = s.seconds[int(TimeCategory::kIdlePeer)];
    std::fprintf(stderr, "child: paused %.3f s, peer %.3f s, wall %.3f s, residual %.4f\n", paused, peer,
                 s.wall_seconds, s.residualFraction());
    ::_exit(paused > 0.9 && paused < 1.3 && peer < 0.3 && s.residualFraction() < 0.05 ? 0 : 1);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(::kill(child, SIGSTOP), 0);
  std::this_thread::sleep_for(1s);  // the length of the stop is the test's input
  ASSERT_EQ(::kill(child, SIGCONT), 0);
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace chaosbed
