// ControlChannel against a scripted store: checked reads (start, membership), watchers that back off and
// stop the node when the store is gone, and the link-command watcher's answers to malformed commands.
// No sleeps: tests wait on store calls (ScriptedStore::waitGets), on the stop flag, or on a promise that
// the injected backoff wait fulfils.

#include <glog/logging.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/runtime/control.h"
#include "core/runtime/link_command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

constexpr char kRun[] = "run";
std::string runKey(const std::string& suffix) { return std::string(kRun) + "/" + suffix; }

// A Store that forwards every call to another one.
class Forward : public Store {
 public:
  explicit Forward(Store& to) : to_(to) {}
  Status set(const std::string& k, const std::string& v) override { return to_.set(k, v); }
  Result<std::string> get(const std::string& k, Deadline d) override { return to_.get(k, d); }
  Result<int64_t> add(const std::string& k, int64_t d) override { return to_.add(k, d); }
  Result<bool> contains(const std::string& k) override { return to_.contains(k); }
  Result<std::vector<std::optional<std::string>>> peek(const std::vector<std::string>& k) override {
    return to_.peek(k);
  }
  Result<int64_t> append(const std::string& k, const std::string& v) override { return to_.append(k, v); }
  Result<std::vector<std::string>> readList(const std::string& k, int64_t from, int n) override {
    return to_.readList(k, from, n);
  }
  void interruptGets() override { to_.interruptGets(); }
  std::unique_ptr<Store> session() override { return to_.session(); }

 private:
  Store& to_;
};

// A Store whose chosen keys fail at once with a chosen status (a dead or broken store); other keys behave
// like the real store (get blocks until the key exists or the deadline). Counts get calls per key.
class ScriptedStore : public Store {
 public:
  void fail(const std::string& key, Status status) {
    std::lock_guard lock(mu_);
    failing_[key] = std::move(status);
  }
  // From now on a blocked or future get of a missing key returns Timeout at once (lets watchers wind down).
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
  }
  // From now on a get ignores its deadline: only the key, release() or interruptGets() end it.
  void ignoreDeadlines() {
    std::lock_guard lock(mu_);
    deaf_ = true;
  }
  int gets(const std::string& key) {
    std::lock_guard lock(mu_);
    return gets_[key];
  }
  // Blocks until get(key) was called at least n times; false at the deadline.
  bool waitGets(const std::string& key, int n, Deadline deadline) {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return gets_[key] >= n; });
  }

  Status set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard lock(mu_);
      map_[key] = value;
    }
    cv_.notify_all();
    return Status::ok();
  }
  Result<std::string> get(const std::string& key, Deadline deadline) override {
    std::unique_lock lock(mu_);
    ++gets_[key];
    cv_.notify_all();
    if (auto it = failing_.find(key); it != failing_.end()) return it->second;
    const uint64_t interrupts = interrupts_;
    const auto answered = [&] { return map_.count(key) > 0 || released_ || interrupts_ != interrupts; };
    if (deaf_) {
      cv_.wait(lock, answered);
    } else if (!cv_.wait_until(lock, deadline, answered)) {
      return Status::timeout("scripted store: no key " + key);
    }
    if (!map_.count(key)) {
      if (interrupts_ != interrupts) return Status::cancelled("scripted store: get " + key + " interrupted");
      return Status::timeout("scripted store: no key " + key);
    }
    return map_[key];
  }
  void interruptGets() override {
    {
      std::lock_guard lock(mu_);
      ++interrupts_;
    }
    cv_.notify_all();
  }
  // The channel's watchers poll through a session: this one forwards every call, counts included.
  std::unique_ptr<Store> session() override { return std::make_unique<Forward>(*this); }
  Result<int64_t> add(const std::string&, int64_t) override { return Status::internal("not scripted"); }
  Result<int64_t> append(const std::string&, const std::string&) override { return Status::internal("not scripted"); }
  Result<std::vector<std::string>> readList(const std::string&, int64_t, int) override {
    return Status::internal("not scripted");
  }
  Result<std::vector<std::optional<std::string>>> peek(const std::vector<std::string>& keys) override {
    std::lock_guard lock(mu_);
    std::vector<std::optional<std::string>> values;
    for (const std::string& key : keys) {
      if (auto it = failing_.find(key); it != failing_.end()) return it->second;
      auto found = map_.find(key);
      values.push_back(found == map_.end() ? std::nullopt : std::optional<std::string>(found->second));
    }
    return values;
  }
  Result<bool> contains(const std::string& key) override {
    std::lock_guard lock(mu_);
    if (auto it = failing_.find(key); it != failing_.end()) return it->second;
    return map_.count(key) > 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
  std::map<std::string, Status> failing_;
  std::map<std::string, int> gets_;
  bool released_ = false;
  bool deaf_ = false;
  uint64_t interrupts_ = 0;
};

// Records the backoff waits the watchers ask for, without sleeping; fulfils `done` at the limit-th wait
// and then answers "closing" so the watcher ends.
struct RecordedWaits {
  explicit RecordedWaits(size_t limit = SIZE_MAX) : limit(limit) {}
  ControlChannel::BackoffWait fn() {
    return [this](ms wait) {
      std::lock_guard lock(mu);
      waits.push_back(wait);
      if (waits.size() == limit) done.set_value();
      return waits.size() < limit;
    };
  }
  std::vector<ms> get() {
    std::lock_guard lock(mu);
    return waits;
  }
  size_t limit;
  std::mutex mu;
  std::vector<ms> waits;
  std::promise<void> done;
};

// Counts WARNING-or-worse log lines that contain `needle`.
class LogCounter : public google::LogSink {
 public:
  explicit LogCounter(std::string needle) : needle_(std::move(needle)) { google::AddLogSink(this); }
  ~LogCounter() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const google::LogMessageTime&,
            const char* message, size_t length) override {
    if (severity < google::GLOG_WARNING) return;
    if (std::string(message, length).find(needle_) == std::string::npos) return;
    std::lock_guard lock(mu_);
    ++count_;
  }
  int count() {
    std::lock_guard lock(mu_);
    return count_;
  }

 private:
  std::string needle_;
  std::mutex mu_;
  int count_ = 0;
};

NodeStats noStats() { return NodeStats{}; }
constexpr auto kNoReports = std::chrono::hours(1);  // the reporter publishes once and then waits

// ------------------------------------------------------------------------------------------ backoff

TEST(StoreWatchBackoff, DoublesToTheCapAfterErrorsAndResetsOnSuccessOrTimeout) {
  StoreWatchBackoff b;
  auto n = b.after(Status::internal("x"));
  EXPECT_EQ(n.wait, 50ms);
  EXPECT_TRUE(n.first_error);
  std::vector<ms> waits;
  for (int i = 0; i < 8; ++i) {
    n = b.after(Status::invalidArgument("x"));
    EXPECT_FALSE(n.first_error);
    EXPECT_FALSE(n.controller_gone);
    waits.push_back(n.wait);
  }
  EXPECT_EQ(waits, (std::vector<ms>{100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms, 1000ms, 1000ms}));
  n = b.after(Status::timeout("long poll ran out"));
  EXPECT_EQ(n.wait, 0ms);
  EXPECT_FALSE(n.controller_gone);
  n = b.after(Status::internal("x"));
  EXPECT_EQ(n.wait, 50ms) << "a timeout resets the backoff";
  EXPECT_TRUE(n.first_error);
  (void)b.after(Status::ok());
  EXPECT_EQ(b.after(Status::internal("x")).wait, 50ms) << "a success resets the backoff";
}

TEST(StoreWatchBackoff, DeclaresTheControllerGoneAfterConsecutiveUnavailable) {
  StoreWatchBackoff b;
  for (int i = 1; i < StoreWatchBackoff::kUnavailableLimit; ++i) {
    auto n = b.after(Status::unavailable("store: connection lost"));
    EXPECT_FALSE(n.controller_gone) << i;
    EXPECT_GT(n.wait, 0ms) << i;
  }
  // Another kind of error breaks the streak...
  EXPECT_FALSE(b.after(Status::internal("x")).controller_gone);
  for (int i = 1; i < StoreWatchBackoff::kUnavailableLimit; ++i)
    EXPECT_FALSE(b.after(Status::unavailable("x")).controller_gone) << i;
  // ...and so does a success; only kUnavailableLimit in a row count.
  EXPECT_TRUE(b.after(Status::unavailable("x")).controller_gone);
  StoreWatchBackoff c;
  for (int i = 1; i < StoreWatchBackoff::kUnavailableLimit; ++i) (void)c.after(Status::unavailable("x"));
  (void)c.after(Status::ok());
  EXPECT_FALSE(c.after(Status::unavailable("x")).controller_gone);
}

// ------------------------------------------------------------------------------------------ watchers

TEST(ControlWatchers, StopWatcherBacksOffOnErrorsWithoutStopping) {
  ScriptedStore store;
  store.fail(runKey("stop"), Status::internal("store: broken"));
  ControlChannel control(store, kRun, "worker-0", 0);
  RecordedWaits waits(10);
  control.setBackoffWait(waits.fn());
  control.startBackground(noStats, kNoReports);
  ASSERT_EQ(waits.done.get_future().wait_for(10s), std::future_status::ready);
  store.release();
  control.stopBackground();
  // One get per backoff wait: the watcher never polls twice without waiting in between.
  EXPECT_EQ(store.gets(runKey("stop")), 10);
  EXPECT_EQ(waits.get(),
            (std::vector<ms>{50ms, 100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms, 1000ms, 1000ms, 1000ms}));
  EXPECT_FALSE(control.stopRequested()) << "an error that is not Unavailable does not mean the controller is gone";
  EXPECT_FALSE(control.controllerLost());
}

TEST(ControlWatchers, StopBackgroundInterruptsTheLongPollsInFlight) {
  ScriptedStore store;
  store.ignoreDeadlines();  // a poll ends only when interrupted: without the interruption this never returns
  ControlChannel control(store, kRun, "worker-0", 0);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  LogCounter warnings("watcher");
  control.startBackground(noStats, kNoReports);
  control.startLinkWatcher([](const LinkCommand&) { return Status::ok(); });
  for (const char* key : {"stop", "membership/0", "link/worker-0/0"})
    ASSERT_TRUE(store.waitGets(runKey(key), 1, deadlineIn(10s))) << key << " is not being watched";
  control.stopBackground();
  EXPECT_EQ(warnings.count(), 0) << "an interruption at shutdown is not a store error";
  EXPECT_TRUE(waits.get().empty()) << "no watcher backed off";
  EXPECT_FALSE(control.stopRequested());
}

TEST(ControlWatchers, StopWatcherStopsTheNodeWhenTheStoreIsGone) {
  ScriptedStore store;
  store.fail(runKey("stop"), Status::unavailable("store: connection lost"));
  ControlChannel control(store, kRun, "worker-0", 0);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  LogCounter gone("the controller is gone");
  control.startBackground(noStats, kNoReports);
  ASSERT_TRUE(control.waitStopRequested(deadlineIn(10s)));
  EXPECT_TRUE(control.controllerLost());
  store.release();
  control.stopBackground();
  EXPECT_EQ(store.gets(runKey("stop")), StoreWatchBackoff::kUnavailableLimit);
  EXPECT_EQ(waits.get(), (std::vector<ms>{50ms, 100ms, 200ms, 400ms, 800ms}));
  EXPECT_EQ(gone.count(), 1);
}

TEST(ControlWatchers, MembershipWatcherStopsTheNodeWhenTheStoreIsGone) {
  ScriptedStore store;
  store.fail(runKey("membership/0"), Status::unavailable("store: connection lost"));
  ControlChannel control(store, kRun, "worker-0", 0);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  control.startBackground(noStats, kNoReports);
  ASSERT_TRUE(control.waitStopRequested(deadlineIn(10s)));
  EXPECT_TRUE(control.controllerLost());
  store.release();
  control.stopBackground();
  EXPECT_EQ(store.gets(runKey("membership/0")), StoreWatchBackoff::kUnavailableLimit);
  EXPECT_EQ(control.latestGeneration(), -1);
}

TEST(ControlWatchers, LinkWatcherStopsTheNodeWhenTheStoreIsGone) {
  ScriptedStore store;
  store.fail(runKey("link/worker-0/0"), Status::unavailable("store: connection lost"));
  ControlChannel control(store, kRun, "worker-0", 0);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  int applied = 0;
  control.startLinkWatcher([&](const LinkCommand&) {
    ++applied;
    return Status::ok();
  });
  ASSERT_TRUE(control.waitStopRequested(deadlineIn(10s)));
  EXPECT_TRUE(control.controllerLost());
  control.stopBackground();
  EXPECT_EQ(store.gets(runKey("link/worker-0/0")), StoreWatchBackoff::kUnavailableLimit);
  EXPECT_EQ(applied, 0);
}

TEST(ControlWatchers, MembershipWatcherNeverFollowsAMalformedGeneration) {
  ScriptedStore store;
  ASSERT_TRUE(store.set(runKey("membership/0"), R"({"generation": 0, "workers": [0, 0]})").isOk());
  ControlChannel control(store, kRun, "worker-0", 0, /*world_workers=*/2);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  LogCounter rejected("membership/0");
  control.startBackground(noStats, kNoReports);
  ASSERT_TRUE(store.waitGets(runKey("membership/0"), 3, deadlineIn(10s)));
  EXPECT_EQ(control.latestGeneration(), -1);
  // The controller rewrites it: the watcher, which kept polling at the backoff's pace, follows it now.
  Membership m;
  m.generation = 0;
  m.workers = {0, 1};
  ASSERT_TRUE(store.set(runKey("membership/0"), m.toJson().dump()).isOk());
  ASSERT_TRUE(store.waitGets(runKey("membership/1"), 1, deadlineIn(10s)));
  EXPECT_EQ(control.latestGeneration(), 0);
  store.release();
  control.stopBackground();
  EXPECT_EQ(rejected.count(), 1) << "a malformed value is logged once, not at every poll";
  const auto w = waits.get();
  ASSERT_GE(w.size(), 2u);
  EXPECT_EQ(w[0], 50ms);
  EXPECT_EQ(w[1], 100ms);
}

TEST(ControlWatchers, MembershipWatcherSkipsAMalformedGenerationOnceANewerOneExists) {
  ScriptedStore store;
  Membership m;
  m.generation = 1;
  m.workers = {0, 1};
  ASSERT_TRUE(store.set(runKey("membership/0"), "null").isOk());
  ASSERT_TRUE(store.set(runKey("membership/1"), m.toJson().dump()).isOk());
  ControlChannel control(store, kRun, "worker-0", 0, 2);
  RecordedWaits waits;
  control.setBackoffWait(waits.fn());
  control.startBackground(noStats, kNoReports);
  ASSERT_TRUE(store.waitGets(runKey("membership/2"), 1, deadlineIn(10s)));
  EXPECT_EQ(control.latestGeneration(), 1);
  store.release();
  control.stopBackground();
}

// ------------------------------------------------------------------------------------------ link commands

TEST(ControlLinkWatcher, RejectsMalformedCommandsAndAcknowledgesEveryOne) {
  ScriptedStore store;
  ControlChannel control(store, kRun, "worker-0", 0);
  std::mutex mu;
  std::vector<LinkCommand> applied;
  control.startLinkWatcher([&](const LinkCommand& c) {
    std::lock_guard lock(mu);
    applied.push_back(c);
    return c.peers == std::vector<std::string>{"ps-9"} ? Status::invalidArgument("shaper: no rank for ps-9")
                                                       : Status::ok();
  });
  const std::string base = "link/worker-0/";
  ASSERT_TRUE(store.set(runKey(base + "0"), R"({"op": "set", "peers": ["worker-1"], "latency_ms": null})").isOk());
  ASSERT_TRUE(store.set(runKey(base + "1"), R"({"op": "set", "peers": [1], "latency_ms": 5})").isOk());
  ASSERT_TRUE(store.set(runKey(base + "2"), "}{").isOk());
  ASSERT_TRUE(store.set(runKey(base + "3"), R"({"op": "set", "peers": ["ps-9"]})").isOk());
  const LinkCommand good{.op = LinkCommand::Op::kSet, .peers = {"worker-1"}, .latency_ms = 20};
  ASSERT_TRUE(store.set(runKey(base + "4"), encodeLinkCommand(good)).isOk());

  auto ack = [&](int i) {
    auto v = store.get(runKey(base + "ack/" + std::to_string(i)), deadlineIn(10s));
    EXPECT_TRUE(v.isOk()) << "command " << i << " was not acknowledged";
    return v.isOk() ? *v : std::string();
  };
  const std::string a0 = ack(0), a1 = ack(1), a2 = ack(2), a3 = ack(3), a4 = ack(4);
  store.release();
  control.stopBackground();

  EXPECT_EQ(a0.rfind("rejected: ", 0), 0u) << a0;
  EXPECT_NE(a0.find("latency_ms"), std::string::npos) << a0;
  EXPECT_EQ(a1.rfind("rejected: ", 0), 0u) << a1;
  EXPECT_NE(a1.find("peers[0]"), std::string::npos) << a1;
  EXPECT_EQ(a2.rfind("rejected: ", 0), 0u) << a2;
  EXPECT_EQ(decodeLinkAck(a3).code(), StatusCode::kInvalidArgument) << "an apply failure is a rejection: " << a3;
  EXPECT_NE(a3.find("ps-9"), std::string::npos) << a3;
  EXPECT_EQ(a4, kLinkAckApplied);
  EXPECT_TRUE(decodeLinkAck(a4).isOk());
  // Malformed commands never reach the shaper; valid ones do, in order.
  std::lock_guard lock(mu);
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[0].peers, std::vector<std::string>{"ps-9"});
  EXPECT_EQ(applied[1], good);
  EXPECT_FALSE(control.stopRequested());
}

// ------------------------------------------------------------------------------------------ checked reads

TEST(ControlReads, WaitStartRejectsAMalformedStartTime) {
  for (const char* bad : {"soon", "12abc", "-1", "", "99999999999999999999999"}) {
    ScriptedStore store;
    ASSERT_TRUE(store.set(runKey("start"), bad).isOk());
    ControlChannel control(store, kRun, "worker-0", 0);
    Result<int64_t> r = Status::internal("unset");
    EXPECT_NO_THROW(r = control.waitStart(deadlineIn(5s)));
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad << ": " << r.status().toString();
  }
  ScriptedStore store;
  ASSERT_TRUE(store.set(runKey("start"), "1700000000000000000").isOk());
  ControlChannel control(store, kRun, "worker-0", 0);
  auto r = control.waitStart(deadlineIn(5s));
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(*r, 1700000000000000000);
}

TEST(ControlReads, MembershipIsCheckedAgainstTheWorldAndItsKey) {
  ScriptedStore store;
  ControlChannel control(store, kRun, "worker-0", 0, /*world_workers=*/2);
  ASSERT_TRUE(store.set(runKey("membership/0"), R"({"generation": 0, "workers": [0, 1]})").isOk());
  ASSERT_TRUE(store.set(runKey("membership/1"), R"({"generation": 1, "workers": [0, 2]})").isOk());
  ASSERT_TRUE(store.set(runKey("membership/2"), R"({"generation": 7, "workers": [0]})").isOk());
  ASSERT_TRUE(store.set(runKey("membership/3"), R"({"generation": 3, "workers": [1], "rollback": null})").isOk());
  EXPECT_TRUE(control.membership(0, deadlineIn(5s)).isOk());
  for (int g = 1; g <= 3; ++g) {
    Result<Membership> m = Status::internal("unset");
    EXPECT_NO_THROW(m = control.membership(g, deadlineIn(5s)));
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << g << ": " << m.status().toString();
  }
  EXPECT_NE(control.membership(1, deadlineIn(5s)).status().message().find("workers[1]"), std::string::npos);
  EXPECT_NE(control.membership(2, deadlineIn(5s)).status().message().find("under the key of generation 2"),
            std::string::npos);
}

TEST(ControlReads, WaitMembershipAfterSkipsMalformedGenerations) {
  ScriptedStore store;
  ControlChannel control(store, kRun, "worker-0", 0, 3);
  ASSERT_TRUE(store.set(runKey("membership/1"), R"({"generation": 1, "workers": "all"})").isOk());
  // Only a malformed generation after 0: nothing to follow yet, so the wait ends as a plain Timeout.
  auto m = control.waitMembershipAfter(0, deadlineIn(20ms));
  EXPECT_EQ(m.status().code(), StatusCode::kTimeout) << m.status().toString();
  ASSERT_TRUE(store.set(runKey("membership/2"), R"({"generation": 2, "workers": [0, 2]})").isOk());
  ASSERT_TRUE(store.set(runKey("membership/3"), R"({"generation": 3, "workers": [9]})").isOk());
  m = control.waitMembershipAfter(0, deadlineIn(5s));
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->generation, 2) << "the newest valid generation, skipping malformed ones on both sides";
  EXPECT_EQ(m->workers, (std::vector<int>{0, 2}));
}

TEST(ControlReads, WaitMembershipAfterCatchesUpManyGenerationsWithoutReadingEachOne) {
  // A node that wakes 70 generations behind (paused, or starved beside hundreds of others) jumps to the
  // newest valid one by looking ahead in batches (two full windows and a part), not by a get per
  // generation; a malformed newest one is passed over for the valid one before it.
  ScriptedStore store;
  ControlChannel control(store, kRun, "worker-0", 0, 3);
  for (int g = 1; g <= 70; ++g)
    ASSERT_TRUE(store.set(runKey("membership/" + std::to_string(g)),
                          R"({"generation": )" + std::to_string(g) + R"(, "workers": [0, 1]})").isOk());
  ASSERT_TRUE(store.set(runKey("membership/71"), R"({"generation": 71, "workers": "all"})").isOk());
  auto m = control.waitMembershipAfter(0, deadlineIn(5s));
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->generation, 70);
  EXPECT_EQ(store.gets(runKey("membership/1")), 1);
  int later_gets = 0;
  for (int g = 2; g <= 71; ++g) later_gets += store.gets(runKey("membership/" + std::to_string(g)));
  EXPECT_EQ(later_gets, 0) << "the generations after the first were read one by one";
}

}  // namespace
}  // namespace chaosbed
