#include "core/metrics/accounting.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

#include <glog/logging.h>

#include "core/config/json_fields.h"

namespace chaosbed {

const char* timeCategoryName(TimeCategory c) {
  switch (c) {
    case TimeCategory::kCompute: return "compute";
    case TimeCategory::kTransfer: return "transfer";
    case TimeCategory::kCheckpoint: return "checkpoint";
    case TimeCategory::kIdlePeer: return "peer";
    case TimeCategory::kIdleServer: return "server";
    case TimeCategory::kIdleRecovery: return "recovery";
    case TimeCategory::kPaused: return "paused";
    case TimeCategory::kThrottled: return "throttled";
    case TimeCategory::kUnattributed: return "unattributed";
  }
  return "unknown";
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) ++counts[i];
  ++counts.back();
  sum += v;
  ++count;
}

nlohmann::json Histogram::toJson() const {
  return {{"bounds", bounds}, {"counts", counts}, {"sum", sum}, {"count", count}};
}

namespace {

// The process's peak resident set (VmHWM of /proc/self/status), 0 where it cannot be read.
int64_t peakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

// Magnitudes beyond it are not measurements (and sums of a few of them stay finite).
constexpr double kMaxMagnitude = 1e18;

// Reads into h; problems land in f (whose status the caller checks).
Histogram readHistogram(config::JsonFields f) {
  Histogram h(f.numbers("bounds", -kMaxMagnitude, kMaxMagnitude, Histogram::kMaxBuckets));
  const std::vector<int64_t> counts = f.integers("counts", 0, NodeStats::kMaxCount, Histogram::kMaxBuckets + 1);
  h.sum = f.number("sum", 0, kMaxMagnitude);
  h.count = uint64_t(f.integer("count", 0, NodeStats::kMaxCount));
  for (size_t i = 1; f.ok() && i < h.bounds.size(); ++i)
    if (!(h.bounds[i] > h.bounds[i - 1])) f.error("bounds", "not strictly increasing at index " + std::to_string(i));
  if (f.ok() && counts.size() != h.bounds.size() + 1)
    f.error("counts", std::to_string(counts.size()) + " entries for " + std::to_string(h.bounds.size()) + " bounds");
  for (size_t i = 1; f.ok() && i < counts.size(); ++i)
    if (counts[i] < counts[i - 1]) f.error("counts", "not cumulative at index " + std::to_string(i));
  if (f.ok() && uint64_t(counts.back()) != h.count)
    f.error("counts", "the last (+Inf) count " + std::to_string(counts.back()) + " is not count " +
                          std::to_string(h.count));
  if (f.ok()) h.counts.assign(counts.begin(), counts.end());
  return h;
}

}  // namespace

Result<Histogram> Histogram::fromJson(const nlohmann::json& j) {
  config::JsonFields f(j, "histogram");
  Histogram h = readHistogram(f);
  CHAOSBED_RETURN_IF_ERROR(f.status());
  return h;
}

void Histogram::merge(const Histogram& other) {
  if (other.bounds != bounds) return;  // different layouts never mix
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  sum += other.sum;
  count += other.count;
}

static std::vector<double> geometric(double first, double factor, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i) b.push_back(first * std::pow(factor, i));
  return b;
}

Histogram stepSecondsHistogram() { return Histogram({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}); }
Histogram stalenessHistogram() {
  std::vector<double> b{0};
  for (double v : geometric(1, 2, 11)) b.push_back(v);  // 1 .. 1024
  return Histogram(b);
}
Histogram recoverySecondsHistogram() { return Histogram({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}); }

double NodeStats::idleSeconds() const {
  return seconds[int(TimeCategory::kIdlePeer)] + seconds[int(TimeCategory::kIdleServer)] +
         seconds[int(TimeCategory::kIdleRecovery)];
}

double NodeStats::busySeconds() const {
  return seconds[int(TimeCategory::kCompute)] + seconds[int(TimeCategory::kTransfer)] +
         seconds[int(TimeCategory::kCheckpoint)] + idleSeconds();
}

double NodeStats::bookedSeconds() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

double NodeStats::residualFraction() const {
  if (wall_seconds <= 0) return 0;
  return (std::abs(wall_seconds - bookedSeconds()) + seconds[int(TimeCategory::kUnattributed)]) / wall_seconds;
}

nlohmann::json NodeStats::toJson() const {
  nlohmann::json secs;
  for (int c = 0; c < kTimeCategories; ++c) secs[timeCategoryName(TimeCategory(c))] = seconds[c];
  return {{"seconds", secs},
          {"wall_seconds", wall_seconds},
          {"final", final_report},
          {"steps", steps},
          {"epoch", epoch},
          {"samples", samples},
          {"samples_lost", samples_lost},
          {"checkpoints_written", checkpoints_written},
          {"checkpoint_failures", checkpoint_failures},
          {"recoveries", recoveries},
          {"peak_rss_bytes", peak_rss_bytes},
          {"step_seconds", step_seconds.toJson()},
          {"staleness", staleness.toJson()},
          {"recovery_seconds", recovery_seconds.toJson()}};
}

Result<NodeStats> NodeStats::fromJson(const nlohmann::json& j) {
  config::JsonFields f(j, "stats report");
  NodeStats s;
  config::JsonFields secs = f.object("seconds", /*optional=*/true);
  for (int c = 0; c < kTimeCategories; ++c)
    s.seconds[c] = secs.number(timeCategoryName(TimeCategory(c)), 0, kMaxSeconds, 0.0);
  s.wall_seconds = f.number("wall_seconds", 0, kMaxSeconds, 0.0);
  s.final_report = f.has("final") && f.boolean("final");
  s.steps = f.integer("steps", 0, kMaxCount, 0);
  s.epoch = f.integer("epoch", 0, kMaxCount, 0);
  s.samples = f.integer("samples", 0, kMaxCount, 0);
  s.samples_lost = f.integer("samples_lost", 0, kMaxCount, 0);
  s.checkpoints_written = f.integer("checkpoints_written", 0, kMaxCount, 0);
  s.checkpoint_failures = f.integer("checkpoint_failures", 0, kMaxCount, 0);
  s.recoveries = f.integer("recoveries", 0, kMaxCount, 0);
  s.peak_rss_bytes = f.integer("peak_rss_bytes", 0, kMaxCount, 0);
  if (f.has("step_seconds")) s.step_seconds = readHistogram(f.object("step_seconds"));
  if (f.has("staleness")) s.staleness = readHistogram(f.object("staleness"));
  if (f.has("recovery_seconds")) s.recovery_seconds = readHistogram(f.object("recovery_seconds"));
  CHAOSBED_RETURN_IF_ERROR(f.status());
  return s;
}

Result<NodeStats> NodeStats::decode(std::string_view text) {
  CHAOSBED_ASSIGN_OR_RETURN(nlohmann::json j, config::parseJson(text, "stats report"));
  return fromJson(j);
}

void NodeStats::merge(const NodeStats& o) {
  for (int c = 0; c < kTimeCategories; ++c) seconds[c] += o.seconds[c];
  wall_seconds += o.wall_seconds;
  steps += o.steps;
  epoch = std::max(epoch, o.epoch);
  samples += o.samples;
  samples_lost += o.samples_lost;
  checkpoints_written += o.checkpoints_written;
  checkpoint_failures += o.checkpoint_failures;
  recoveries += o.recoveries;
  peak_rss_bytes = std::max(peak_rss_bytes, o.peak_rss_bytes);
  step_seconds.merge(o.step_seconds);
  staleness.merge(o.staleness);
  recovery_seconds.merge(o.recovery_seconds);
}

TransferSplitter::Split TransferSplitter::split(double seconds) {
  seconds = std::max(0.0, seconds);
  if (recent_.size() >= 5) {
    std::vector<double> sorted = recent_;
    std::nth_element(sorted.begin(), sorted.begin() + long(sorted.size() / 2), sorted.end());
    const double usual = sorted[sorted.size() / 2];
    if (seconds > 4 * usual + 0.002) return {usual, seconds - usual};
  }
  if (recent_.size() < kWindow) {
    recent_.push_back(seconds);
  } else {
    recent_[next_] = seconds;
    next_ = (next_ + 1) % kWindow;
  }
  return {seconds, 0};
}

Accounting::~Accounting() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watch_.joinable()) watch_.join();
}

void Accounting::start() {
  MutexLock lock(mu_);
  if (started_ || watch_.joinable()) return;
  // The clock starts once the watch is ready: creating the thread and opening its kernel counters took up
  // to 6.6 ms that no role books (1-4% of a short-lived replacement's wall, past the 1% bound), and a
  // watch starting beside the role competed with it for the node's CPU quota.
  bool ready = false;
  watch_ = std::thread([this, &ready] {
    MutexLock lock(mu_);
    cpu_ = CpuWait::forThisThread();  // its run queue delay tells a starved watch from a frozen one
    ready = true;  // start() takes the first reading, where the wall starts
    wake_.notify_all();
    while (!stopping_) {
      wake_.wait_for(lock, kTick);
      tickLocked(Clock::now(), /*watch=*/true);
    }
  });
  wake_.wait(lock, [&ready] { return ready; });
  // The wall starts at a reading of the kernel's counts: a throttle that ended between the watch's first
  // reading and here (a node's start-up uses up its quota; this thread waited 80 ms) was booked in the
  // first window, which reached back past the start, and a worker's books exceeded its wall by 2%.
  cpu_last_ = cpu_.read();
  cpu_read_at_ = Clock::now();
  started_ = last_tick_ = covered_to_ = cpu_read_at_;
}

void Accounting::coverLocked(Clock::time_point from, Clock::time_point to, const SourcePlace& where) {
  if (!started_ || finished_) return;
  if (from > covered_to_) {
    gaps_.push_back({covered_to_, from, covered_by_, where});
    std::sort(gaps_.begin(), gaps_.end(), [](const RawGap& a, const RawGap& b) { return a.to - a.from > b.to - b.from; });
    if (gaps_.size() > kGapsKept) gaps_.pop_back();
  }
  covered_to_ = std::max(covered_to_, to);
  covered_by_ = where;
}

namespace {

// "strategies/mirrored.cc:371": the file's folder and name, or `otherwise` for a default location.
std::string placeName(const SourcePlace& where, const char* otherwise) {
  if (where.file == nullptr) return otherwise;
  std::string_view file = where.file;
  size_t cut = file.rfind('/');
  if (cut != std::string_view::npos && cut > 0) cut = file.rfind('/', cut - 1);
  if (cut != std::string_view::npos) file.remove_prefix(cut + 1);
  return std::string(file) + ":" + std::to_string(where.line);
}

}  // namespace

std::vector<Accounting::Gap> Accounting::gaps() const {
  MutexLock lock(mu_);
  std::vector<Gap> out;
  for (const RawGap& g : gaps_)
    out.push_back({std::chrono::duration<double>(g.to - g.from).count(),
                   started_ ? std::chrono::duration<double>(g.from - *started_).count() : 0,
                   placeName(g.after, "start"), placeName(g.before, "finish")});
  return out;
}

Accounting::Clock::time_point Accounting::tickLocked(Clock::time_point now, bool watch) {
  // The books close at finish(): the quota's throttling of the teardown that follows (up to 80 ms a period
  // at 0.2 CPU) is outside the frozen wall.
  if (!last_tick_ || finished_) return now;
  const Clock::time_point last = *last_tick_;
  const bool gap = now - last > kGap;
  if (!gap && !watch && !cpu_last_.quota) return now;  // nothing to learn between the watch's ticks
  // What the kernel counted since the last reading (none when another thread read after `now`).
  double throttled = 0, waited = 0;
  if (now > cpu_read_at_) {
    const CpuWait::Reading r = cpu_.read();
    // The window ends when the kernel was read, not at `now`: the quota may have held this thread between
    // the two (waiting for the lock, say), and that throttling is in the reading too.
    const Clock::time_point read_at = std::max(now, Clock::now());
    const double dt = std::chrono::duration<double>(read_at - cpu_read_at_).count();
    throttled = std::clamp(r.throttled_s - cpu_last_.throttled_s, 0.0, dt);
    waited = std::max(r.run_delay_s - cpu_last_.run_delay_s, throttled);  // runnable, not run
    if (throttled > 0) recordInterruptionLocked(TimeCategory::kThrottled, cpu_read_at_, read_at, throttled);
    cpu_last_ = r;
    cpu_read_at_ = read_at;
  }
  if (gap) {
    // The watch missed its ticks. What the kernel does not count as waiting for a CPU, it was frozen.
    const double frozen = std::chrono::duration<double>(now - last - kTick).count() - waited;
    if (frozen > 0) {
      const auto end = last + kTick + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(frozen));
      recordInterruptionLocked(TimeCategory::kPaused, last + kTick, end, frozen);
    }
  }
  last_tick_ = std::max(last, now);
  return std::max(now, cpu_read_at_);
}

void Accounting::recordInterruptionLocked(TimeCategory category, Clock::time_point from, Clock::time_point to,
                                          double seconds) {
  if (to <= from || seconds <= 0 || finished_) return;
  stats_.seconds[int(category)] += seconds;
  interruptions_.push_back({from, to, seconds, category});
  // An interval booked later than the last 4096 readings (80 s of the watch's ticks) is rare.
  while (interruptions_.size() > 4096) interruptions_.pop_front();
}

double Accounting::interruptedWithinLocked(Clock::time_point from, Clock::time_point to) const {
  double interrupted = 0;
  for (auto it = interruptions_.rbegin(); it != interruptions_.rend(); ++it) {
    if (it->to <= from) {
      // Everything recorded before a throttling window ended before that window began.
      if (it->category == TimeCategory::kThrottled) break;
      continue;
    }
    const auto lo = std::max(it->from, from), hi = std::min(it->to, to);
    if (hi > lo) interrupted += it->seconds * std::chrono::duration<double>(hi - lo).count() /
                                std::chrono::duration<double>(it->to - it->from).count();
  }
  return interrupted;
}

Accounting::Frame::Frame(Accounting& a, TimeCategory c, SourcePlace where)
    : a_(a), c_(c), where_(where), start_(Clock::now()) {
  MutexLock lock(a_.mu_);
  if (a_.open_frames_++ == 0) a_.coverLocked(start_, start_, where_);
  // Under a quota: the throttling up to the start is the time before the frame's, not this frame's. (The
  // frame starts before the lock: waiting for it, behind a reporter or the watch that the scheduler or the
  // quota held, is the frame's time; the part of a reading's window after the start is the frame's below.)
  a_.tickLocked(start_);
  // What was already recorded inside this frame's wall is the frame's: a freeze that caught this thread
  // waiting for the lock (the freezer stops a thread as it enters the kernel) was recorded by the watch
  // before this point, and a worker paused for 5 s booked 10.
  booked_at_start_ = a_.bookedLocked() - a_.interruptedWithinLocked(start_, Clock::now());
}

Accounting::Frame::~Frame() {
  MutexLock lock(a_.mu_);
  const auto now = a_.tickLocked(Clock::now());  // it ends where the counts were read, as add() does
  const double inner = a_.bookedLocked() - booked_at_start_;  // what the scope booked, paused time included
  const double rest = std::chrono::duration<double>(now - start_).count() - inner;
  if (rest > 0 && !a_.finished_) a_.stats_.seconds[int(c_)] += rest;
  if (--a_.open_frames_ == 0) a_.coverLocked(start_, now, where_);
}

void Accounting::notePause(Clock::time_point from, Clock::time_point to) {
  MutexLock lock(mu_);
  recordInterruptionLocked(TimeCategory::kPaused, from, to, std::chrono::duration<double>(to - from).count());
}

void Accounting::add(std::initializer_list<std::pair<TimeCategory, double>> parts, SourcePlace where) {
  const auto now = Clock::now();
  MutexLock lock(mu_);
  if (finished_) return;  // the books are closed (finish())
  // The interval ends where the kernel's counts are read (the last part takes the reading's microseconds,
  // or thousands of bookings a second leave a percent of the wall unattributed), and it is read now that the
  // lock is held, not at `now`. The kernel counts throttling when it ends, so a booking that ran past the
  // last reading (a watch that read while this thread waited for the lock, itself held back by the quota
  // for up to 80 ms; or a throttle between a reading and the booking's end) kept time whose throttling was
  // booked later as well: 1.9% of a worker's wall was booked twice. A freeze that just ended is claimed here
  // too if the watch has not run.
  const Clock::time_point end = tickLocked(Clock::now());
  auto span = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  double total = 0;
  for (const auto& part : parts) total += std::max(0.0, part.second);
  Clock::time_point from = now - span(total);
  size_t i = 0;
  for (const auto& [category, given] : parts) {
    const Clock::time_point to = ++i == parts.size() ? end : from + span(std::max(0.0, given));
    const double seconds = std::chrono::duration<double>(to - from).count();
    stats_.seconds[int(category)] += std::max(0.0, seconds - interruptedWithinLocked(from, to));
    from = to;
  }
  if (open_frames_ == 0) coverLocked(now - span(total), end, where);
}

void Accounting::step(int64_t samples, double step_seconds) {
  MutexLock lock(mu_);
  ++stats_.steps;
  stats_.samples += samples;
  stats_.step_seconds.observe(step_seconds);
}

void Accounting::epoch(int64_t epoch) {
  MutexLock lock(mu_);
  stats_.epoch = epoch;
}

void Accounting::rollback(int64_t samples_lost) {
  MutexLock lock(mu_);
  stats_.samples_lost += samples_lost;
}

void Accounting::staleness(int64_t updates) {
  MutexLock lock(mu_);
  stats_.staleness.observe(double(updates));
}

void Accounting::recovery(double seconds) {
  MutexLock lock(mu_);
  ++stats_.recoveries;
  stats_.recovery_seconds.observe(seconds);
}

void Accounting::checkpoint(bool ok) {
  MutexLock lock(mu_);
  ++(ok ? stats_.checkpoints_written : stats_.checkpoint_failures);
}

void Accounting::finish() {
  MutexLock lock(mu_);
  if (!started_ || finished_) return;
  const auto now = tickLocked(Clock::now());  // the wall ends where the counts were last read
  coverLocked(now, now, SourcePlace::none());
  finished_ = now;
  const double wall = std::chrono::duration<double>(now - *started_).count();
  const double rest = wall - bookedLocked();
  if (rest > 0) stats_.seconds[int(TimeCategory::kUnattributed)] += rest;
  // Half the invariant's bound: the log says where the time went before a test's bound is reached.
  if (rest > 0.005 * wall) {
    std::string where;
    for (const RawGap& g : gaps_)
      where += "; " + std::to_string(int(1e6 * std::chrono::duration<double>(g.to - g.from).count())) + " us at " +
               std::to_string(std::chrono::duration<double>(g.from - *started_).count()) + " s between " +
               placeName(g.after, "start") + " and " + placeName(g.before, "finish");
    LOG(WARNING) << "accounting: " << rest << " s of " << wall << " s unattributed (no frame booked it)"
                 << (where.empty() ? "; no gap between bookings: an interval inside a frame was lost" : where);
  }
}

double Accounting::seconds(TimeCategory category) const {
  MutexLock lock(mu_);
  return stats_.seconds[size_t(category)];
}

NodeStats Accounting::snapshot() const {
  MutexLock lock(mu_);
  NodeStats s = stats_;
  if (started_) s.wall_seconds = std::chrono::duration<double>(finished_.value_or(Clock::now()) - *started_).count();
  s.final_report = finished_.has_value();
  s.peak_rss_bytes = peakResidentBytes();
  return s;
}

}  // namespace chaosbed
