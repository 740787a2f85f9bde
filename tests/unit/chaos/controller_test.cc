#include "chaos/controller.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chaos/schedule/schedule.h"
#include "tests/unit/chaos/chaos_test_util.h"

namespace chaosbed::chaos {
namespace {

using namespace std::chrono_literals;
using testing::parseOk;

// A cluster without processes: records replacements.
// Options with a test clock (and a state directory, an event log) and every other field at its default.
ControllerOptions withClock(Clock* clock, std::string state_dir = {}, EventLog* events = nullptr) {
  ControllerOptions o;
  o.clock = clock;
  o.state_dir = std::move(state_dir);
  o.events = events;
  return o;
}

class FakeCluster : public Cluster {
 public:
  explicit FakeCluster(std::vector<NodeInfo> nodes) : nodes_(std::move(nodes)) {}
  std::vector<NodeInfo> nodes() const override { return nodes_; }
  Result<pid_t> processGroup(const std::string&) override { return Status::notFound("fake"); }
  NodeCgroup* cgroup(const std::string&) override { return nullptr; }
  double cpuQuota(const std::string&) override { return 0; }
  Status replace(const std::string& node) override {
    std::lock_guard<std::mutex> l(mu);
    replaced.push_back(node);
    return Status::ok();
  }
  std::mutex mu;
  std::vector<std::string> replaced;

 private:
  std::vector<NodeInfo> nodes_;
};

// Records every call as "apply fault node" lines; can be told to be unavailable or to fail.
class RecordingActuator : public Actuator {
 public:
  const char* name() const override { return "recording"; }
  Status checkAvailable(const Fault& f, const std::string& node) override {
    if (unavailable) return Status::unavailable("recording actuator off for " + f.name + " on " + node);
    return Status::ok();
  }
  Result<std::vector<HealRecord>> prepare(const Fault&, const std::string& node) override {
    HealRecord r;
    r.op = HealRecord::Op::kThaw;
    r.group = "chaosbed-test";
    r.node = node;
    r.paths = {"/sys/fs/cgroup/chaosbed-no-such-group/" + node};  // healing it finds nothing to undo
    return std::vector<HealRecord>{r};
  }
  Status apply(const Fault& f, const std::string& node) override { return record("apply", f, node); }
  Status escalate(const Fault& f, const std::string& node) override { return record("escalate", f, node); }
  Status revert(const Fault& f, const std::string& node) override {
    if (fail_revert) return Status::ioError("revert refused");
    return record("revert", f, node);
  }
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> l(mu);
    return calls_;
  }
  bool unavailable = false;
  bool fail_revert = false;

 private:
  Status record(const char* what, const Fault& f, const std::string& node) {
    std::lock_guard<std::mutex> l(mu);
    calls_.push_back(std::string(what) + " " + f.name + " " + node);
    return Status::ok();
  }
  std::mutex mu;
  std::vector<std::string> calls_;
};

class ChaosController : public ::testing::Test {
 protected:
  std::map<FaultKind, Actuator*> actuators() {
    std::map<FaultKind, Actuator*> m;
    for (const FaultKindTraits& k : faultKinds()) m[k.kind] = &act;
    return m;
  }
  Plan plan(const std::string& yaml, double horizon = 100) {
    Result<Plan> p = drawPlan(parseOk(yaml), cluster.nodes(), 1, horizon);
    EXPECT_TRUE(p.isOk()) << p.status().toString();
    return p.isOk() ? *p : Plan{};
  }
  std::string tmpDir(const std::string& name) {
    std::string d = ::testing::TempDir() + "/chaos_ctl_" + name + "_" + std::to_string(::getpid());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }

  FakeCluster cluster{makeNodes({{"worker", 3}, {"ps", 1}})};
  RecordingActuator act;
  ManualClock clock;
};

TEST_F(ChaosController, AppliesAndRevertsAtPlannedTimes) {
  Controller c(plan("chaos:\n  faults:\n    - {name: p, action: pause, target: {role: worker, index: 1}, at_s: 10, duration_s: 5}\n"),
               cluster, actuators(), withClock(&clock));
  ASSERT_TRUE(c.start().isOk());
  ASSERT_TRUE(c.waitProcessed(9.9, 0ms) == false);  // the clock has not moved
  clock.advanceSeconds(9.9);
  ASSERT_TRUE(c.waitProcessed(9.9, 5s));
  EXPECT_TRUE(act.calls().empty());
  clock.advanceSeconds(0.1);
  ASSERT_TRUE(c.waitProcessed(10, 5s));
  EXPECT_EQ(act.calls(), std::vector<std::string>{"apply p worker-1"});
  EXPECT_EQ(c.activeFaults(FaultKind::kPause), 1);
  clock.advanceSeconds(5);
  ASSERT_TRUE(c.waitProcessed(15, 5s));
  EXPECT_EQ(act.calls(), (std::vector<std::string>{"apply p worker-1", "revert p worker-1"}));
  EXPECT_EQ(c.activeFaults(FaultKind::kPause), 0);
  ASSERT_TRUE(c.stop().isOk());
  EXPECT_EQ(c.leakCount(), 0);
  // With a manual clock every action runs exactly on time.
  for (int64_t d : c.injectionDelaysNs()) EXPECT_EQ(d, 0);
}

TEST_F(ChaosController, StopRevertsEverythingStillApplied) {
  Controller c(plan("chaos:\n  faults:\n    - {name: s, action: slow, target: {role: worker}, at_s: 1, params: {cpu_fraction: 0.5}}\n"
                    "    - {name: l, action: link, target: {between: [{role: worker, index: 0}, {role: ps}]}, at_s: 2, "
                    "params: {bandwidth_mbps: 10}}\n"),
               cluster, actuators(), withClock(&clock));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(3);
  ASSERT_TRUE(c.waitProcessed(3, 5s));
  EXPECT_EQ(c.activeFaults(FaultKind::kSlow), 3);
  EXPECT_EQ(c.activeFaults(FaultKind::kLink), 2);
  ASSERT_TRUE(c.stop().isOk());
  std::vector<std::string> calls = act.calls();
  ASSERT_EQ(calls.size(), 10u);
  // Newest first: the link (applied last) is reverted first.
  EXPECT_EQ(calls[5].rfind("revert l", 0), 0u) << calls[5];
  EXPECT_EQ(calls[9].rfind("revert s", 0), 0u) << calls[9];
  EXPECT_EQ(c.activeFaults(FaultKind::kSlow), 0);
  EXPECT_EQ(c.leakCount(), 0);
}

TEST_F(ChaosController, FailedRevertAtStopIsALeakAndStaysInTheStateFile) {
  const std::string dir = tmpDir("leak");
  Controller c(plan("chaos:\n  faults:\n    - {name: s, action: slow, target: {role: ps}, at_s: 1, params: {cpu_fraction: 0.5}}\n"),
               cluster, actuators(), withClock(&clock, dir));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(1);
  ASSERT_TRUE(c.waitProcessed(1, 5s));
  act.fail_revert = true;
  EXPECT_FALSE(c.stop().isOk());
  EXPECT_EQ(c.leakCount(), 1);
  Result<std::optional<ChaosState>> st = readState(dir);
  ASSERT_TRUE(st.isOk() && st->has_value());
  EXPECT_FALSE((*st)->finished);
  ASSERT_EQ((*st)->entries.size(), 1u);
  EXPECT_EQ((*st)->entries[0].node, "ps-0");
  EXPECT_EQ((*st)->entries[0].heal[0].node, "ps-0");
}

TEST_F(ChaosController, StateFileListsAppliedFaultsAndCleanupStaleHealsThem) {
  const std::string dir = tmpDir("state");
  Controller c(plan("chaos:\n  faults:\n    - {name: p, action: pause, target: {role: worker, index: 2}, at_s: 1}\n"
                    "    - {name: q, action: pause, target: {role: worker, index: 1}, at_s: 1, duration_s: 1}\n"),
               cluster, actuators(), withClock(&clock, dir));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(1);
  ASSERT_TRUE(c.waitProcessed(1, 5s));
  Result<std::optional<ChaosState>> st = readState(dir);
  ASSERT_TRUE(st.isOk() && st->has_value());
  EXPECT_EQ((*st)->controller_pid, ::getpid());
  EXPECT_EQ((*st)->entries.size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/lease"));
  clock.advanceSeconds(1);
  ASSERT_TRUE(c.waitProcessed(2, 5s));
  st = readState(dir);
  ASSERT_EQ((*st)->entries.size(), 1u);  // q was reverted
  EXPECT_EQ((*st)->entries[0].name, "p");
  ASSERT_TRUE(c.stop().isOk());
  st = readState(dir);
  EXPECT_TRUE((*st)->finished);
  EXPECT_TRUE((*st)->entries.empty());
  EXPECT_FALSE(std::filesystem::exists(dir + "/lease"));
  Result<int> healed = cleanupStale(dir, nullptr);
  ASSERT_TRUE(healed.isOk());
  EXPECT_EQ(*healed, 0);  // nothing left
}

TEST_F(ChaosController, CleanupStaleHealsAnUnfinishedState) {
  const std::string dir = tmpDir("stale");
  ChaosState s;
  s.controller_pid = 12345;
  HealRecord r;
  r.op = HealRecord::Op::kThaw;
  r.group = "chaosbed-test";
  r.node = "worker-0";
  r.paths = {"/sys/fs/cgroup/chaosbed-no-such-group/worker-0"};
  s.entries.push_back({3, "x", "link", "worker-0", {r}});
  ASSERT_TRUE(writeState(dir, s).isOk());
  Result<int> healed = cleanupStale(dir, nullptr);
  ASSERT_TRUE(healed.isOk()) << healed.status().toString();
  EXPECT_EQ(*healed, 1);  // a cgroup that is gone is healed
  Result<std::optional<ChaosState>> st = readState(dir);
  EXPECT_TRUE((*st)->finished);
  EXPECT_EQ(*cleanupStale(dir, nullptr), 0);
}

TEST_F(ChaosController, ProgressTriggerFiresAtTheNamedStep) {
  Controller c(plan("chaos:\n  faults:\n    - {name: t, action: pause, target: {role: worker, index: 0}, "
                    "when: {node: worker-2, step: 300}, duration_s: 2}\n"),
               cluster, actuators(), withClock(&clock));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(50);
  c.notify("worker-1", 500, 0);  // another node: no
  c.notify("worker-2", 299, 0);  // not yet
  ASSERT_TRUE(c.waitProcessed(50, 5s));
  EXPECT_TRUE(act.calls().empty());
  c.notify("worker-2", 300, 0);
  ASSERT_TRUE(c.waitProcessed(50, 5s));
  EXPECT_EQ(act.calls(), std::vector<std::string>{"apply t worker-0"});
  c.notify("worker-2", 301, 0);  // fires once
  clock.advanceSeconds(2);
  ASSERT_TRUE(c.waitProcessed(52, 5s));
  EXPECT_EQ(act.calls(), (std::vector<std::string>{"apply t worker-0", "revert t worker-0"}));
  ASSERT_TRUE(c.stop().isOk());
}

TEST_F(ChaosController, EpochTriggerFromAnyNode) {
  Controller c(plan("chaos:\n  faults:\n    - {name: e, action: slow, target: {role: ps}, when: {epoch: 2}, "
                    "params: {cpu_fraction: 0.5}}\n"),
               cluster, actuators(), withClock(&clock));
  ASSERT_TRUE(c.start().isOk());
  c.notify("worker-0", 10, 1);
  c.notify("worker-1", 20, 2);
  ASSERT_TRUE(c.waitProcessed(0, 5s));
  EXPECT_EQ(act.calls(), std::vector<std::string>{"apply e ps-0"});
  ASSERT_TRUE(c.stop().isOk());
}

TEST_F(ChaosController, PreemptEscalatesAfterGraceAndReplaces) {
  Controller c(plan("chaos:\n  time_scale: 60\n  faults:\n    - {name: sp, action: preempt, profile: gcp, "
                    "target: {role: worker, index: 1}, at_s: 5, restart_after: {fixed_s: 120}}\n"),
               cluster, actuators(), withClock(&clock));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(5);
  ASSERT_TRUE(c.waitProcessed(5, 5s));
  EXPECT_EQ(c.activeFaults(FaultKind::kPreempt), 1);
  clock.advanceSeconds(0.5);  // 30 s notice / 60
  ASSERT_TRUE(c.waitProcessed(5.5, 5s));
  EXPECT_EQ(act.calls(), (std::vector<std::string>{"apply sp worker-1", "escalate sp worker-1"}));
  EXPECT_EQ(c.activeFaults(FaultKind::kPreempt), 0);
  clock.advanceSeconds(2);  // 120 s / 60
  ASSERT_TRUE(c.waitProcessed(7.5, 5s));
  {
    std::lock_guard<std::mutex> l(cluster.mu);
    EXPECT_EQ(cluster.replaced, std::vector<std::string>{"worker-1"});
  }
  ASSERT_TRUE(c.stop().isOk());
}

TEST_F(ChaosController, RefusesToStartWhenAnActuatorIsUnavailable) {
  act.unavailable = true;
  Controller c(plan("chaos:\n  faults:\n    - {name: p, action: pause, target: {role: worker, index: 0}, at_s: 1}\n"), cluster,
               actuators(), withClock(&clock));
  Status s = c.start();
  ASSERT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("refusing to start"), std::string::npos);
  EXPECT_NE(s.message().find("recording actuator off for p on worker-0"), std::string::npos);
}

TEST_F(ChaosController, LinkWithoutLinkControlIsRefused) {
  ActuatorSet set(cluster, {});
  Controller c(plan("chaos:\n  faults:\n    - {name: l, action: link, target: {between: [{role: worker}, {role: ps}]}, "
                    "at_s: 1, params: {latency_ms: 5}}\n"),
               cluster, set.map(), withClock(&clock));
  Status s = c.start();
  ASSERT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no link control"), std::string::npos) << s.message();
}

TEST_F(ChaosController, SlowWithoutCgroupIsRefused) {
  ActuatorSet set(cluster, {});
  Controller c(plan("chaos:\n  faults:\n    - {name: s, action: slow, target: {role: ps}, at_s: 1, params: {cpu_fraction: 0.5}}\n"),
               cluster, set.map(), withClock(&clock));
  Status s = c.start();
  ASSERT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("slow of ps-0"), std::string::npos) << s.message();
}

TEST_F(ChaosController, EventLogHasPlannedAndAppliedLines) {
  const std::string dir = tmpDir("events");
  Result<std::unique_ptr<EventLog>> log = EventLog::open(dir + "/events.jsonl");
  ASSERT_TRUE(log.isOk());
  Controller c(plan("chaos:\n  faults:\n    - {name: p, action: pause, target: {role: worker, index: 0}, at_s: 1, duration_s: 1}\n"),
               cluster, actuators(), withClock(&clock, {}, log->get()));
  ASSERT_TRUE(c.start().isOk());
  clock.advanceSeconds(1);
  ASSERT_TRUE(c.waitProcessed(1, 5s));
  clock.advanceSeconds(1);
  ASSERT_TRUE(c.waitProcessed(2, 5s));
  ASSERT_TRUE(c.stop().isOk());
  std::ifstream in(dir + "/events.jsonl");
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0]["type"], "chaos.planned");
  EXPECT_EQ(lines[1]["type"], "chaos.planned");
  EXPECT_EQ(lines[2]["type"], "chaos.applied");
  EXPECT_EQ(lines[2]["node"], "worker-0");
  EXPECT_DOUBLE_EQ(lines[2]["planned_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(lines[2]["delay_ms"].get<double>(), 0.0);
  EXPECT_TRUE(lines[2].contains("wall_ns"));
  EXPECT_TRUE(lines[2].contains("mono_ns"));
  EXPECT_EQ(lines[3]["type"], "chaos.reverted");
}

// An error message may carry bytes that are not UTF-8 (a file name): the line is still written, and parses.
TEST_F(ChaosController, EventLogWritesALineWithBytesThatAreNotUtf8Replaced) {
  const std::string dir = tmpDir("events-utf8");
  Result<std::unique_ptr<EventLog>> log = EventLog::open(dir + "/events.jsonl");
  ASSERT_TRUE(log.isOk());
  Status s;
  EXPECT_NO_THROW(s = (*log)->append({{"type", "chaos.failed"}, {"error", "open /x/\xff\xfe: denied"}}));
  EXPECT_TRUE(s.isOk()) << s.toString();
  std::ifstream in(dir + "/events.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
  ASSERT_TRUE(e.is_object()) << line;
  EXPECT_EQ(e["error"], "open /x/\ufffd\ufffd: denied");
}

TEST_F(ChaosController, RealClockInjectionDelayIsSmall) {
  // 50 faults 2 ms apart on the real clock: each is applied within a few ms of its planned time.
  Plan p;
  for (int i = 0; i < 50; ++i) {
    Fault f;
    f.id = static_cast<uint64_t>(i);
    f.name = "f";
    f.kind = FaultKind::kPause;
    f.targets = {"ps-0"};
    f.duration_s = 0.001;
    p.faults.push_back(f);
    p.actions.push_back({0.01 + i * 0.002, ActionType::kApply, f.id, "ps-0", std::nullopt});
    p.actions.push_back({0.011 + i * 0.002, ActionType::kRevert, f.id, "ps-0", std::nullopt});
  }
  sortActions(p.actions);
  Controller c(std::move(p), cluster, actuators(), {});
  ASSERT_TRUE(c.start().isOk());
  ASSERT_TRUE(c.waitProcessed(0.2, 10s));
  ASSERT_TRUE(c.stop().isOk());
  std::vector<int64_t> d = c.injectionDelaysNs();
  ASSERT_EQ(d.size(), 50u);
  std::sort(d.begin(), d.end());
  EXPECT_GE(d.front(), 0);
  EXPECT_LT(d[25], 50'000'000) << "median injection delay " << d[25] << " ns";  // generous: shared 2-core box
}

}  // namespace
}  // namespace chaosbed::chaos
