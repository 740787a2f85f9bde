#pragma once
// Accounting: where a node's wall time goes and what its work was worth, with the definitions of
// docs/design.md (4, "Metric definitions"):
// - compute: forward/backward/update; transfer: moving data (not waiting for others); checkpoint: saving
//   the node's state (its own time: others waiting for it book peer idle);
// - idle, by reason: peer (slower, paused or dead peers at a collective or a staleness bound), server
//   (waiting for a parameter server), recovery (failure detection, rendezvous, checkpoint restore);
// - paused: the node itself was frozen (SIGSTOP, the cgroup freezer). A frozen process cannot book
//   anything, so a watch thread notices the gap in its own ticks when the process runs again; the part of
//   the gap that the kernel does not count as waiting for a CPU (CpuWait: run queue delay, quota
//   throttling) is booked as paused and taken out of whatever interval it fell into (a collective, a
//   compute Timer), so no time is counted twice. A node starved of CPU is not paused;
// - throttled: the node's own CPU quota held it back (its cgroup's cpu.stat throttled time), booked at every
//   tick of the watch and taken out of the interval it fell into, like paused;
// - unattributed: what no frame, timer or add() booked, found at finish() (wall - every category). Nothing
//   else absorbs the unknown: unattributed <= 1% of wall is the invariant the tests hold;
// - wall: from start() to the snapshot, so that wall - the sum of the categories (the residual) shows time
//   that nothing booked yet, or booked twice.
// - steps and samples processed, samples lost to rollbacks (goodput counts only samples that survive);
// - staleness of asynchronous pushes, step durations, recovery times.
// Counters are cumulative and never decrease, so the last report of a killed node still counts.
// Thread-safe: the training thread records, a reporter thread reads snapshots.

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/metrics/cpu_wait.h"
#include "transports/base/status.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed {

enum class TimeCategory : uint8_t {
  kCompute, kTransfer, kCheckpoint, kIdlePeer, kIdleServer, kIdleRecovery, kPaused, kThrottled, kUnattributed
};
inline constexpr int kTimeCategories = 9;
// "compute", "transfer", "checkpoint", "peer", "server", "recovery", "paused", "throttled", "unattributed"
const char* timeCategoryName(TimeCategory c);

// Where a booking was made: as a default argument, the caller's file and line. (The standard's
// source_location is not there for clang 14 with libstdc++ 12, which the lock-annotation check builds with.)
struct SourcePlace {
  constexpr SourcePlace(const char* at_file = __builtin_FILE(), int at_line = __builtin_LINE())
      : file(at_file), line(at_line) {}
  static constexpr SourcePlace none() { return {nullptr, 0}; }  // start() or finish()
  const char* file;
  int line;
};

// Cumulative histogram with fixed upper bounds (Prometheus style: counts[i] = observations <= bounds[i],
// plus +Inf as the last count).
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1 (cumulative; last is +Inf = count)
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double v);
  nlohmann::json toJson() const;
  // Checked decode (the JSON comes from another process), never throws. InvalidArgument unless bounds are
  // finite and strictly increasing (at most kMaxBuckets), counts has bounds.size() + 1 entries that never
  // decrease and end with count, and sum is finite and >= 0 (every histogram here observes values >= 0).
  static Result<Histogram> fromJson(const nlohmann::json& j);
  void merge(const Histogram& other);  // same bounds

  static constexpr size_t kMaxBuckets = 256;
};

Histogram stepSecondsHistogram();   // 1 ms .. 30 s
Histogram stalenessHistogram();     // 0, 1, 2, 4, ... 1024 updates
Histogram recoverySecondsHistogram();  // 10 ms .. 600 s

struct NodeStats {
  std::array<double, kTimeCategories> seconds{};  // by TimeCategory
  double wall_seconds = 0;                         // since Accounting::start(); 0 if never started
  bool final_report = false;                       // after Accounting::finish(): every interval booked
  int64_t steps = 0;
  int64_t epoch = 0;          // the epoch the node is in (progress triggers); the largest when merged
  int64_t samples = 0;
  int64_t samples_lost = 0;   // rolled back: not in the final model
  int64_t checkpoints_written = 0;
  int64_t checkpoint_failures = 0;
  int64_t recoveries = 0;
  int64_t peak_rss_bytes = 0;  // the process's peak resident set (VmHWM); the largest when merged
  Histogram step_seconds = stepSecondsHistogram();
  Histogram staleness = stalenessHistogram();
  Histogram recovery_seconds = recoverySecondsHistogram();

  double idleSeconds() const;
  double busySeconds() const;  // compute + transfer + checkpoint + idle: every instant it ran unhindered
  double bookedSeconds() const;  // every category, paused, throttled and unattributed included
  // (|wall - booked| + unattributed) / wall: the share of the wall that no frame booked or that was booked
  // twice; 0 when every instant was booked exactly once to a real category; 0 without a wall time.
  double residualFraction() const;
  nlohmann::json toJson() const;
  // Checked decode of a report a node wrote to the store; never throws. Absent fields read as 0 (and the
  // default histograms); present ones must be of the right type, finite and in range: seconds in
  // [0, kMaxSeconds], counters in [0, kMaxCount]. Anything else is InvalidArgument naming the field.
  static Result<NodeStats> fromJson(const nlohmann::json& j);
  static Result<NodeStats> decode(std::string_view text);

  static constexpr double kMaxSeconds = 1e9;                // ~30 years of one category
  static constexpr int64_t kMaxCount = int64_t{1} << 50;    // sums of many reports stay far from overflow
  void merge(const NodeStats& other);  // sums (for per-strategy totals); epoch and peak_rss_bytes: the largest
};

// Splits the wall time of a collective call into transfer and waiting. A call that takes far longer than
// calls of its kind usually do was held up by a member (paused, slow, or dying in the middle of it), so the
// time beyond its usual duration is idle (reason peer), not transfer. "Usual" is the median of the recent
// unremarkable calls. Not thread-safe: one per call site.
class TransferSplitter {
 public:
  struct Split {
    double transfer = 0;
    double idle = 0;
  };
  Split split(double seconds);

 private:
  std::vector<double> recent_;  // ring of the last kWindow unremarkable durations
  size_t next_ = 0;
  static constexpr size_t kWindow = 31;
};

class Accounting {
 public:
  Accounting() = default;
  ~Accounting();
  Accounting(const Accounting&) = delete;
  Accounting& operator=(const Accounting&) = delete;

  // Starts the wall clock and the watch (a thread that ticks every kTick: a gap longer than kGap between
  // ticks, or before a booking, is time the process was frozen, unless the kernel counted it as waiting for
  // a CPU; each tick books the quota's throttling since the last).
  void start();
  // The role's work is done (a role calls it after its last frame, before its objects are torn down; the
  // node again once the role returned, a no-op then): freezes the wall clock and books to `unattributed`
  // whatever part of it nothing booked, logging the longest gaps between bookings (gaps()) when that is
  // over half a percent. The books close: nothing is booked after it (not the throttling or a freeze of the
  // teardown, nor a frame that ends later). Later snapshots are final reports (the residual is judged on
  // those: a report a killed process sent last may miss an interval still in progress).
  void finish();
  static constexpr std::chrono::milliseconds kTick{20};
  static constexpr std::chrono::milliseconds kGap{300};  // far above a CPU quota's throttling (< 100 ms)

  // Books an interval of `seconds` that ends now, less the paused and throttled time inside it.
  void add(TimeCategory category, double seconds, SourcePlace where = SourcePlace()) {
    add({{category, seconds}}, where);
  }
  // Books consecutive intervals that together end now, in the order given, each less the paused and
  // throttled time inside it. One add() per part would take that time out of the same last seconds again
  // for each part (and leave it unattributed).
  void add(std::initializer_list<std::pair<TimeCategory, double>> parts,
           SourcePlace where = SourcePlace());
  void step(int64_t samples, double step_seconds);
  void epoch(int64_t epoch);
  void rollback(int64_t samples_lost);
  void staleness(int64_t updates);
  void recovery(double seconds);
  void checkpoint(bool ok);
  NodeStats snapshot() const;
  // One category's booked seconds so far: cheap enough for every step (snapshot() copies the histograms and
  // reads the process's peak RSS from /proc).
  double seconds(TimeCategory category) const;

  // Measures a scope: `{ Accounting::Timer t(acct, TimeCategory::kCompute); ... }`.
  class Timer {
   public:
    Timer(Accounting& a, TimeCategory c, SourcePlace where = SourcePlace())
        : a_(a), c_(c), where_(where), start_(std::chrono::steady_clock::now()) {}
    ~Timer() { a_.add(c_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), where_); }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    Accounting& a_;
    TimeCategory c_;
    SourcePlace where_;
    std::chrono::steady_clock::time_point start_;
  };

  // Books whatever part of a scope nothing inside it booked to `category`, so that a loop's bookkeeping
  // (a step's bookkeeping, a server waiting in progress()) adds up to its wall time:
  // `{ Accounting::Frame f(acct, TimeCategory::kCompute); ...Timers and add()s... }`. Frames nest.
  class Frame {
   public:
    Frame(Accounting& a, TimeCategory c, SourcePlace where = SourcePlace());
    ~Frame();
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

   private:
    Accounting& a_;
    TimeCategory c_;
    SourcePlace where_;
    std::chrono::steady_clock::time_point start_;
    double booked_at_start_;
  };

  // The longest spans of the wall that no frame, timer or add() covered, each between the bookings that
  // bound it ("file:line", or "start"/"finish"), longest first: where unattributed time comes from.
  struct Gap {
    double seconds = 0;
    double at = 0;  // seconds after start()
    std::string after, before;
  };
  std::vector<Gap> gaps() const;

  // For tests: records a freeze from `from` to `to` as the watch would have seen it.
  void notePause(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to);

 private:
  using Clock = std::chrono::steady_clock;
  // Books the throttling since the last reading and, after a gap in the watch's ticks, the part of the gap
  // the process was frozen as paused. It reads the kernel's counts at the watch's ticks (`watch`), after a
  // gap, and, under a CPU quota, at every booking, so that an interval ending now takes out exactly the
  // throttling up to now; without a quota a booking reads nothing. Returns the instant up to which the
  // kernel's counts are recorded (the reading's, or `now`): a booking ends there, never past it, since the
  // kernel books a throttle when it ends and a later reading's would overlap the booking.
  Clock::time_point tickLocked(Clock::time_point now, bool watch = false) CHAOSBED_REQUIRES(mu_);
  double bookedLocked() const CHAOSBED_REQUIRES(mu_) { return stats_.bookedSeconds(); }
  // Paused and throttled time inside [from, to]: what an interval ending now must not book again.
  double interruptedWithinLocked(Clock::time_point from, Clock::time_point to) const CHAOSBED_REQUIRES(mu_);
  void recordInterruptionLocked(TimeCategory category, Clock::time_point from, Clock::time_point to, double seconds)
      CHAOSBED_REQUIRES(mu_);

  mutable Mutex mu_;
  NodeStats stats_ CHAOSBED_GUARDED_BY(mu_);
  std::optional<Clock::time_point> started_ CHAOSBED_GUARDED_BY(mu_);
  std::optional<Clock::time_point> finished_ CHAOSBED_GUARDED_BY(mu_);
  std::optional<Clock::time_point> last_tick_ CHAOSBED_GUARDED_BY(mu_);
  // Paused and throttled time, each spread evenly over the window it was found in (a pause over its own
  // interval): an interval booked later takes out its overlap with each. Newest last.
  struct Interruption {
    Clock::time_point from, to;
    double seconds;
    TimeCategory category;  // kThrottled windows tile time from one reading to the next, in order
  };
  std::deque<Interruption> interruptions_ CHAOSBED_GUARDED_BY(mu_);
  // Coverage by the outermost bookings (frames nest; a timer or add() inside a frame is covered by it), to
  // find the gaps between them. Frames and top-level bookings come from the role's thread.
  void coverLocked(Clock::time_point from, Clock::time_point to, const SourcePlace& where)
      CHAOSBED_REQUIRES(mu_);
  struct RawGap {
    Clock::time_point from, to;
    SourcePlace after, before;  // SourcePlace::none(): start() or finish()
  };
  int open_frames_ CHAOSBED_GUARDED_BY(mu_) = 0;
  Clock::time_point covered_to_ CHAOSBED_GUARDED_BY(mu_);
  SourcePlace covered_by_ CHAOSBED_GUARDED_BY(mu_) = SourcePlace::none();
  std::vector<RawGap> gaps_ CHAOSBED_GUARDED_BY(mu_);  // the longest kGapsKept, longest first
  static constexpr size_t kGapsKept = 3;
  CpuWait cpu_ CHAOSBED_GUARDED_BY(mu_);  // the watch thread's (opened by it)
  CpuWait::Reading cpu_last_ CHAOSBED_GUARDED_BY(mu_);
  Clock::time_point cpu_read_at_ CHAOSBED_GUARDED_BY(mu_);
  bool stopping_ CHAOSBED_GUARDED_BY(mu_) = false;
  std::condition_variable_any wake_;
  std::thread watch_;
};

}  // namespace chaosbed
