#pragma once
// Accounting: where a node's wall time goes and what its work was worth, with the definitions of
// DESIGN.md ("Measurements"):
// - compute: forward/backward/update; transfer: moving data (not waiting for others);
// - idle, by reason: peer (slower, paused or dead peers at a collective or a staleness bound), server
//   (waiting for a parameter server), recovery (failure detection, rendezvous, checkpoint restore);
// - steps and samples processed, samples lost to rollbacks (goodput counts only samples that survive);
// - staleness of asynchronous pushes, step durations, recovery times.
// Counters are cumulative and never decrease, so the last report of a killed node still counts.
// Thread-safe: the training thread records, a reporter thread reads snapshots.

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/status.h"

namespace chaosbed {

enum class TimeCategory : uint8_t { kCompute, kTransfer, kIdlePeer, kIdleServer, kIdleRecovery };
inline constexpr int kTimeCategories = 5;
const char* timeCategoryName(TimeCategory c);  // "compute", "transfer", "peer", "server", "recovery"

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
  int64_t steps = 0;
  int64_t samples = 0;
  int64_t samples_lost = 0;   // rolled back: not in the final model
  int64_t checkpoints_written = 0;
  int64_t checkpoint_failures = 0;
  int64_t recoveries = 0;
  Histogram step_seconds = stepSecondsHistogram();
  Histogram staleness = stalenessHistogram();
  Histogram recovery_seconds = recoverySecondsHistogram();

  double idleSeconds() const;
  double busySeconds() const;  // compute + transfer + idle
  nlohmann::json toJson() const;
  // Checked decode of a report a node wrote to the store; never throws. Absent fields read as 0 (and the
  // default histograms); present ones must be of the right type, finite and in range: seconds in
  // [0, kMaxSeconds], counters in [0, kMaxCount]. Anything else is InvalidArgument naming the field.
  static Result<NodeStats> fromJson(const nlohmann::json& j);
  static Result<NodeStats> decode(std::string_view text);

  static constexpr double kMaxSeconds = 1e9;                // ~30 years of one category
  static constexpr int64_t kMaxCount = int64_t{1} << 50;    // sums of many reports stay far from overflow
  void merge(const NodeStats& other);  // sums (for per-strategy totals)
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
  void add(TimeCategory category, double seconds);
  void step(int64_t samples, double step_seconds);
  void rollback(int64_t samples_lost);
  void staleness(int64_t updates);
  void recovery(double seconds);
  void checkpoint(bool ok);
  NodeStats snapshot() const;

  // Measures a scope: `{ Accounting::Timer t(acct, TimeCategory::kCompute); ... }`.
  class Timer {
   public:
    Timer(Accounting& a, TimeCategory c) : a_(a), c_(c), start_(std::chrono::steady_clock::now()) {}
    ~Timer() { a_.add(c_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()); }
    Timer(const Timer&) = delete;
    Timer& operator=(const Timer&) = delete;

   private:
    Accounting& a_;
    TimeCategory c_;
    std::chrono::steady_clock::time_point start_;
  };

 private:
  mutable std::mutex mu_;
  NodeStats stats_;  // GUARDED_BY(mu_)
};

}  // namespace chaosbed
