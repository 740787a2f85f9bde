#include "core/runtime/control.h"

#include <glog/logging.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <limits>
#include <optional>

#include "core/config/json_fields.h"

namespace chaosbed {

using namespace std::chrono_literals;

int64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

Result<int64_t> parseStartNs(std::string_view text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v <= 0)
    return Status::invalidArgument("start: expected a positive decimal realtime in ns, got \"" +
                                   config::excerpt(text, 40) + "\"");
  return v;
}

StoreWatchBackoff::Next StoreWatchBackoff::after(const Status& outcome) {
  Next next;
  if (outcome.isOk() || outcome.code() == StatusCode::kTimeout) {
    wait_ = 0ms;
    unavailable_ = 0;
    failing_ = false;
    return next;
  }
  next.first_error = !failing_;
  failing_ = true;
  unavailable_ = outcome.code() == StatusCode::kUnavailable ? unavailable_ + 1 : 0;
  if (unavailable_ >= kUnavailableLimit) {
    next.controller_gone = true;
    return next;
  }
  wait_ = wait_ == 0ms ? kFirstWait : std::min(kMaxWait, wait_ * 2);
  next.wait = wait_;
  return next;
}

ControlChannel::ControlChannel(Store& store, std::string prefix, std::string node, int incarnation, int world_workers)
    : store_(store), polls_(store.session()), prefix_(std::move(prefix)), node_(std::move(node)),
      incarnation_(incarnation), world_workers_(world_workers) {
  backoff_wait_ = [this](std::chrono::milliseconds wait) {
    MutexLock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return closing(); });
    return !closing();
  };
}

ControlChannel::~ControlChannel() { stopBackground(); }

Status ControlChannel::announceReady() {
  return store_.set(keys_.ready(node_, incarnation_), "1");
}

Result<int64_t> ControlChannel::waitStart(Deadline deadline) {
  auto v = store_.get(keys_.start(), deadline);
  if (!v.isOk()) return v.status().withContext("waiting for the controller to start training");
  CHAOSBED_ASSIGN_OR_RETURN(start_ns_, parseStartNs(*v));
  return start_ns_;
}

double ControlChannel::elapsed() const { return double(realtimeNs() - start_ns_) * 1e-9; }

Status ControlChannel::reportStats(const NodeStats& stats) {
  return store_.set(keys_.stats(node_, incarnation_), stats.toJson().dump());
}

Status ControlChannel::append(events::NodePayload e) {
  const events::NodeEvent line{node_, incarnation_, start_ns_ ? elapsed() : 0.0, std::move(e)};
  // One atomic append: a node killed at any instant leaves the whole event or nothing, never a hole.
  // Text a node did not make (a file name in an error) may not be UTF-8: replaced, so the dump never throws.
  const std::string text = events::toJson(line).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  auto n = store_.append(keys_.events(), text);
  return n.isOk() ? Status::ok() : n.status();
}

void ControlChannel::record(events::NodePayload e) {
  const char* type = events::typeName(e);
  if (Status s = append(std::move(e)); !s.isOk()) {
    if (events_lost_.fetch_add(1) == 0) LOG(WARNING) << node_ << ": event " << type << " not recorded: " << s.toString();
  } else {
    events_lost_.store(0);
  }
}

Status ControlChannel::noticeReceived() {
  return store_.set(keys_.notice(node_, incarnation_), std::to_string(realtimeNs()));
}

bool ControlChannel::waitStopRequested(Deadline deadline) {
  MutexLock lock(mu_);
  cv_.wait_until(lock, deadline, [this] { return stopRequested(); });
  return stopRequested();
}

int ControlChannel::requestStop(int state) {
  int previous = kRunning;
  {
    MutexLock lock(mu_);
    previous = stop_.load(std::memory_order_acquire);
    if (previous != kControllerLost) stop_.store(state, std::memory_order_release);
  }
  cv_.notify_all();
  return previous;
}

void ControlChannel::rejectOnce(const std::string& k, const Status& problem) {
  constexpr size_t kMaxLogged = 1024;  // distinct keys; beyond it, malformed values go unlogged
  {
    MutexLock lock(mu_);
    if (rejected_.size() > kMaxLogged || !rejected_.insert(k).second) return;
    if (rejected_.size() > kMaxLogged) {
      LOG(WARNING) << node_ << ": more than " << kMaxLogged << " malformed control values; no longer logging them";
      return;
    }
  }
  LOG(WARNING) << node_ << ": ignoring malformed " << k << ": " << problem.message();
}

Result<Membership> ControlChannel::decodeMembership(const std::string& value, int64_t generation) const {
  const std::string k = "membership/" + std::to_string(generation);
  // Decode problems are DataLoss, so that they never pass for the store's own errors.
  auto m = Membership::decode(value, world_workers_);
  if (!m.isOk()) return Status::dataLoss(k + ": " + m.status().message());
  if (m->generation != generation)
    return Status::dataLoss(k + ": membership: generation: " + std::to_string(m->generation) +
                            " under the key of generation " + std::to_string(generation));
  return m;
}

Result<Membership> ControlChannel::readMembership(Store& from, int64_t generation, Deadline deadline) {
  auto v = from.get(keys_.membership(generation), deadline);
  if (!v.isOk()) return v.status();
  return decodeMembership(*v, generation);
}

Result<Membership> ControlChannel::membership(int64_t generation, Deadline deadline) {
  auto m = readMembership(store_, generation, deadline);
  if (!m.isOk() && m.status().code() == StatusCode::kDataLoss)
    rejectOnce("membership/" + std::to_string(generation), m.status());
  return m;
}

Result<Membership> ControlChannel::waitMembershipAfter(int64_t after, Deadline deadline) {
  // How many generations one look ahead reads, in one store request.
  constexpr int64_t kLookAhead = 32;
  std::optional<Membership> newest;
  int64_t g = after + 1;
  // Blocks for the first generation after `after`; then skips ahead to the newest one (intermediate ones
  // are already superseded), passing over malformed ones. The look ahead peeks at the next generations in
  // one request, not one request per generation: a node that wakes many generations behind (paused, or
  // starved of CPU beside hundreds of others) catches up in a round trip or two.
  Result<Membership> m = membership(g, deadline);
  for (;;) {
    if (m.isOk()) {
      newest = std::move(*m);
    } else if (m.status().code() != StatusCode::kDataLoss) {
      if (newest) return *newest;
      return m.status();
    }
    // Generation g is read (or malformed): look at the ones after it until none is left.
    for (bool more = true; more;) {
      more = false;
      std::vector<std::string> keys;
      for (int64_t i = 1; i <= kLookAhead; ++i) keys.push_back(keys_.membership(g + i));
      auto ahead = store_.peek(keys);
      if (!ahead.isOk()) {
        if (newest) return *newest;
        if (ahead.status().code() != StatusCode::kTimeout) return ahead.status();
        break;
      }
      // The newest valid generation in the window; malformed ones are logged once and passed over.
      int64_t last_present = 0;
      for (int64_t i = kLookAhead; i >= 1; --i) {
        const auto& value = (*ahead)[size_t(i - 1)];
        if (!value) continue;
        if (last_present == 0) last_present = i;
        auto decoded = decodeMembership(*value, g + i);
        if (decoded.isOk()) {
          newest = std::move(*decoded);
          break;
        }
        rejectOnce("membership/" + std::to_string(g + i), decoded.status());
      }
      g += last_present;
      more = last_present == kLookAhead;  // a full window: there may be more
    }
    if (newest) return *newest;
    // Only malformed generations so far: wait for the next one (a timeout returns Timeout, so callers
    // keep checking the stop flag as they do while nothing was published).
    if (SteadyClock::now() >= deadline)
      return Status::timeout("no valid membership after generation " + std::to_string(after));
    m = membership(++g, deadline);
  }
}

bool ControlChannel::pace(StoreWatchBackoff& backoff, const Status& outcome, const char* watcher, bool log) {
  if (closing()) return false;  // the outcome may be stopBackground's interruption
  const StoreWatchBackoff::Next next = backoff.after(outcome);
  if (next.controller_gone) {
    if (requestStop(kControllerLost) != kControllerLost)
      LOG(ERROR) << node_ << ": the store has been unavailable " << StoreWatchBackoff::kUnavailableLimit
                 << " times in a row (" << watcher << " watcher: " << outcome.toString()
                 << "): the controller is gone; stopping";
    return false;
  }
  if (next.first_error && log)
    LOG(WARNING) << node_ << ": " << watcher << " watcher: " << outcome.toString() << "; backing off";
  if (next.wait.count() == 0) return !closing();
  return backoff_wait_(next.wait) && !closing();
}

void ControlChannel::watchStop() {
  StoreWatchBackoff backoff;
  while (!closing()) {
    auto v = polls_->get(keys_.stop(), deadlineIn(kWatchPoll));
    if (v.isOk()) {
      (void)requestStop(kStopRequested);  // the state it replaced does not matter here
      return;
    }
    if (!pace(backoff, v.status(), "stop")) return;
  }
}

void ControlChannel::watchMembership() {
  StoreWatchBackoff backoff;
  int64_t next = latest_generation_.load() + 1;
  while (!closing()) {
    auto m = readMembership(*polls_, next, deadlineIn(kWatchPoll));
    Status outcome = m.status();
    if (m.isOk()) {
      latest_generation_.store(next, std::memory_order_release);
      ++next;
    } else if (outcome.code() == StatusCode::kDataLoss) {
      // Never followed. The controller may overwrite it, or publish the next generation, which supersedes
      // it: look at both, at the backoff's pace.
      rejectOnce("membership/" + std::to_string(next), outcome);
      auto newer = polls_->contains(keys_.membership(next + 1));
      if (newer.isOk() && *newer) {
        ++next;
        outcome = Status::ok();
      } else if (!newer.isOk() && newer.status().code() != StatusCode::kTimeout) {
        outcome = newer.status();
      }
    }
    if (!pace(backoff, outcome, "membership", /*log=*/outcome.code() != StatusCode::kDataLoss)) return;
  }
}

void ControlChannel::watchLinks(const std::function<Status(const LinkCommand&)>& apply) {
  StoreWatchBackoff backoff;
  const std::string base = "link/" + node_ + "/";
  for (int64_t i = 0; !closing();) {
    auto text = polls_->get(keys_.linkCommand(node_, i), deadlineIn(kWatchPoll));
    if (!text.isOk()) {
      if (!pace(backoff, text.status(), "link")) return;
      continue;
    }
    auto command = decodeLinkCommand(*text);
    Status outcome = command.status();
    if (!outcome.isOk()) {
      rejectOnce(base + std::to_string(i), outcome);
    } else {
      outcome = apply(*command);
      if (outcome.isOk())
        LOG(INFO) << node_ << ": link command " << i << " applied: " << config::excerpt(*text, 300);
      else
        LOG(WARNING) << node_ << ": link command " << i << " failed: " << outcome.toString();
    }
    // Every command is answered, so the controller never waits out its deadline on one.
    Status acked = polls_->set(keys_.linkAck(node_, i), encodeLinkAck(outcome));
    ++i;
    if (!pace(backoff, acked, "link")) return;
  }
}

void ControlChannel::setBackoffWait(BackoffWait wait) { backoff_wait_ = std::move(wait); }

void ControlChannel::startBackground(std::function<NodeStats()> stats, std::chrono::milliseconds period) {
  closing_ = false;
  stats_fn_ = stats;
  startWatcher([this] { watchStop(); });
  startWatcher([this] { watchMembership(); });
  threads_.emplace_back([this, stats = std::move(stats), period] {
    auto next = SteadyClock::now();
    while (!closing()) {
      next += period;
      (void)reportStats(stats());  // a report the store missed is replaced by the next, a period later
      MutexLock lock(mu_);
      cv_.wait_until(lock, next, [this] { return closing(); });
    }
  });
}

void ControlChannel::startLinkWatcher(std::function<Status(const LinkCommand&)> apply) {
  startWatcher([this, apply = std::move(apply)] { watchLinks(apply); });
}

void ControlChannel::startWatcher(std::function<void()> watch) {
  {
    MutexLock lock(mu_);
    ++watching_;
  }
  threads_.emplace_back([this, watch = std::move(watch)] {
    watch();
    {
      MutexLock lock(mu_);
      --watching_;
    }
    cv_.notify_all();
  });
}

void ControlChannel::stopBackground() {
  {
    MutexLock lock(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  // A watcher in its long poll returns only when the get does. Interrupt until every watcher is out: one
  // that was just starting its get when an interruption came is caught by the next.
  for (;;) {
    {
      MutexLock lock(mu_);
      if (watching_ == 0) break;
    }
    polls_->interruptGets();
    MutexLock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(20), [this]() CHAOSBED_REQUIRES(mu_) { return watching_ == 0; });
  }
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  if (stats_fn_) (void)reportStats(stats_fn_());  // the last report: the store may already be gone at the end
  stats_fn_ = nullptr;
}

}  // namespace chaosbed
