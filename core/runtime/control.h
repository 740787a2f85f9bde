#pragma once
// The control plane between the controller (`chaosbed run`) and its nodes, carried by the bootstrap Store
// (TensorFlow's coordination service works the same way: a key-value store plus conventions). Every key
// lives under the strategy run's prefix, "<run>/". The controller owns the membership and the stop flag;
// nodes own their reports. Keys written by nodes survive the node, so a killed node's counters still count.
//
// Its keys and who writes them: core/control/keys.h (ControlKeys, used by both sides).
//
// Times that cross processes are realtime nanoseconds (CLOCK_REALTIME; one host or NTP-synchronised).
//
// Every value read from the store is untrusted input: it is decoded with checks (core/config/json_fields.h),
// and a malformed one is logged once (one line per key) and never followed: a malformed start time fails
// waitStart, a malformed membership generation is skipped by the watcher and by waitMembershipAfter (and is
// an error from membership()), a malformed link command is acknowledged as rejected and not applied.
//
// Watchers and a lost controller: the watcher threads (stop flag, membership, link commands) long-poll the
// store. After an error other than Timeout they back off (StoreWatchBackoff: 50 ms doubling to 1 s) instead
// of spinning. The store client never reconnects to a server that died, so Unavailable in a row means the
// controller (which hosts the store) is gone (a single cut handshake is not: the next call tries again):
// after StoreWatchBackoff::kUnavailableLimit consecutive Unavailable answers (about 1.5 s) the watcher sets the stop flag and controllerLost(), training ends at its next check, and the node exits
// (core/node/node.h): nodes never outlive their controller.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/control/keys.h"
#include "core/control/membership.h"
#include "core/metrics/accounting.h"
#include "core/runtime/link_command.h"
#include "core/runtime/events.h"
#include "transports/bootstrap/store.h"
#include "transports/base/status.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed {

int64_t realtimeNs();

// The value of the "start" key: a decimal realtime ns > 0, nothing else (no sign, space or suffix).
Result<int64_t> parseStartNs(std::string_view text);

// How a loop that polls the store paces itself. A pure function of the outcomes it was shown (unit-tested
// without a store or a clock): OK and Timeout (the long poll ran out) go on at once; any other error waits
// kFirstWait, doubling up to kMaxWait while errors continue; kUnavailableLimit consecutive Unavailable
// outcomes mean the controller, which hosts the store, is gone.
class StoreWatchBackoff {
 public:
  static constexpr std::chrono::milliseconds kFirstWait{50};
  static constexpr std::chrono::milliseconds kMaxWait{1000};
  static constexpr int kUnavailableLimit = 6;  // waits 50+100+200+400+800 ms between them: ~1.5 s

  struct Next {
    std::chrono::milliseconds wait{0};
    bool controller_gone = false;
    bool first_error = false;  // the first error after a success: the one to log
  };
  Next after(const Status& outcome);

 private:
  std::chrono::milliseconds wait_{0};
  int unavailable_ = 0;
  bool failing_ = false;
};

// Node side. Owns watcher threads that long-poll the stop flag and the next membership generation (and,
// once started, the node's link commands), so the training loop checks them with an atomic load.
// Thread-safe, except startBackground/startLinkWatcher/stopBackground/setBackoffWait, which belong to the
// thread that owns the channel.
class ControlChannel {
 public:
  // world_workers: the number of worker ranks, the bound for ranks in a membership (0: not checked).
  ControlChannel(Store& store, std::string prefix, std::string node, int incarnation, int world_workers = 0);
  ~ControlChannel();

  const std::string& node() const { return node_; }
  int incarnation() const { return incarnation_; }
  // A key of this run's control plane (core/control/keys.h); key(suffix) for a strategy's private keys.
  const control::ControlKeys& keys() const { return keys_; }
  std::string key(const std::string& suffix) const { return keys_.at(suffix); }

  Status announceReady();
  // Blocks until the controller starts training; returns t0 (realtime ns). A malformed start value is
  // InvalidArgument (parseStartNs).
  Result<int64_t> waitStart(Deadline deadline);
  // Seconds since t0 (after waitStart).
  double elapsed() const;
  int64_t startNs() const { return start_ns_; }

  Status reportStats(const NodeStats& stats);
  // Appends a node event (core/runtime/events.h) from this node, at elapsed().
  Status append(events::NodePayload e);
  // The same, best effort: an event the store does not take (the controller has gone at the end of a run,
  // say) is logged, the first of a streak, and never stops the node's work.
  void record(events::NodePayload e);
  Status noticeReceived();

  // Set when the controller published "stop", or when the watchers found the controller gone.
  bool stopRequested() const { return stop_.load(std::memory_order_acquire) != kRunning; }
  // Blocks until stopRequested() or the deadline; returns stopRequested().
  bool waitStopRequested(Deadline deadline);
  // The store stayed Unavailable (StoreWatchBackoff::kUnavailableLimit times in a row): the controller is
  // gone. Implies stopRequested().
  bool controllerLost() const { return stop_.load(std::memory_order_acquire) == kControllerLost; }
  // The newest valid membership generation the watcher has seen (-1 before the first).
  int64_t latestGeneration() const { return latest_generation_.load(std::memory_order_acquire); }
  // Generation `generation`, checked (Membership::decode, and its generation field must be `generation`):
  // DataLoss when malformed (logged once), Timeout when it does not exist by the deadline.
  Result<Membership> membership(int64_t generation, Deadline deadline);
  // Blocks until a valid generation > after exists; returns the newest valid one. Malformed generations are
  // skipped (logged once); Timeout when no valid one appeared by the deadline.
  Result<Membership> waitMembershipAfter(int64_t after, Deadline deadline);

  // Starts the watchers and a reporter that publishes stats() every period; stopBackground() publishes a
  // last report.
  void startBackground(std::function<NodeStats()> stats, std::chrono::milliseconds period);
  // Starts a watcher that reads this node's link commands in order, decodes each (decodeLinkCommand), calls
  // apply for valid ones and acknowledges every one (encodeLinkAck: "1", or "rejected: <why>" for a
  // malformed command or a Status from apply). apply runs on the watcher thread. Ends with stopBackground.
  void startLinkWatcher(std::function<Status(const LinkCommand&)> apply);
  // Ends every background thread (interrupting backoff waits) and publishes a last stats report.
  void stopBackground();

  // How watchers wait after an error: sleeps up to `wait` and returns false when the channel is closing
  // (the default waits on a condition variable that stopBackground signals). Tests replace it to run the
  // watcher loops without sleeping. Set before startBackground.
  using BackoffWait = std::function<bool(std::chrono::milliseconds wait)>;
  void setBackoffWait(BackoffWait wait);

  Store& store() { return store_; }
  // Key prefix of this strategy run in the store.
  const std::string& prefix() const { return prefix_; }

 private:
  // A watcher's long poll: the store answers at once when the key appears, so this bounds only how often an
  // idle watcher asks again (at 69 nodes, 200 ms polls were most of the controller's CPU). stopBackground
  // interrupts the polls in flight (polls_), so it does not delay a node's exit.
  static constexpr std::chrono::milliseconds kWatchPoll{2000};

  // Handles the outcome of one watcher poll: false when the watcher must end (closing, or the controller
  // is gone, which sets the stop flag). `log`: the first error of a streak is worth a line (false when
  // the caller logged it already).
  bool pace(StoreWatchBackoff& backoff, const Status& outcome, const char* watcher, bool log = true);
  bool closing() const { return closing_.load(std::memory_order_acquire); }
  // Moves stop_ to `state` (never back from kControllerLost); returns the previous state.
  int requestStop(int state);
  // Logs one line per key (the first problem only): a malformed value is reported once, not every poll.
  void rejectOnce(const std::string& key, const Status& problem);
  // membership(g) without logging; the caller decides whether a problem is worth a line.
  Result<Membership> readMembership(Store& from, int64_t generation, Deadline deadline);
  Result<Membership> decodeMembership(const std::string& value, int64_t generation) const;
  void watchStop();
  std::atomic<int64_t> events_lost_{0};  // recordEvent's failures: the first of a streak is logged
  void watchMembership();
  void watchLinks(const std::function<Status(const LinkCommand&)>& apply);
  // Runs a watcher on its own thread, counted in watching_ while it runs.
  void startWatcher(std::function<void()> watch);

  Store& store_;
  // The watchers' own client of the store: stopBackground interrupts its polls and no other get.
  std::unique_ptr<Store> polls_;
  std::string prefix_;
  control::ControlKeys keys_{prefix_};
  std::string node_;
  int incarnation_;
  int world_workers_;
  int64_t start_ns_ = 0;
  // One variable, so that controllerLost() always implies stopRequested().
  static constexpr int kRunning = 0, kStopRequested = 1, kControllerLost = 2;
  std::atomic<int> stop_{kRunning};
  std::atomic<int64_t> latest_generation_{-1};
  std::atomic<bool> closing_{false};
  Mutex mu_;
  std::condition_variable_any cv_;         // signalled on stop_ and closing_ (both also set under mu_)
  std::set<std::string> rejected_ CHAOSBED_GUARDED_BY(mu_);  // keys whose malformed value was logged
  BackoffWait backoff_wait_;
  std::function<NodeStats()> stats_fn_;
  std::vector<std::thread> threads_;
  int watching_ CHAOSBED_GUARDED_BY(mu_) = 0;  // watchers not yet returned (signalled on cv_)
};

}  // namespace chaosbed
