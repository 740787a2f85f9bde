// Crash safety of the chaos controller: the controller runs in a forked child; when it is SIGKILLed (or
// hangs), the agent it started heals every applied fault within 5 s, the next start's cleanupStale finds
// nothing left, and no cgroup is left behind.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "chaos/controller.h"
#include "chaos/local_cluster.h"
#include "tests/testing/events_schema.h"

namespace chaosbed::chaos {
namespace {

using namespace std::chrono_literals;

int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// Waits until process pid (any process, not only a child) exits; true if it did within timeout_s.
bool waitGone(pid_t pid, double timeout_s) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  (void)::waitpid(pid, nullptr, WNOHANG);  // reap it if it was reparented to us
  return n == 1;
}

Plan pauseAndSlow() {
  Plan p;
  Fault pause;
  pause.id = 0;
  pause.name = "freeze";
  pause.kind = FaultKind::kPause;
  pause.targets = {"worker-0"};
  Fault slow;
  slow.id = 1;
  slow.name = "throttle";
  slow.kind = FaultKind::kSlow;
  slow.targets = {"worker-1"};
  slow.params.cpu_fraction = 0.25;
  p.faults = {pause, slow};
  p.actions = {{0.0, ActionType::kApply, 0, "worker-0", std::nullopt}, {0.0, ActionType::kApply, 1, "worker-1", std::nullopt}};
  return p;
}

class ChaosCrash : public ::testing::Test {
 protected:
  void SetUp() override {
    CgroupSupport s = probeCgroups();
    if (!s.cpu || !s.freezer) GTEST_SKIP() << "cgroup cpu/freezer not usable here: " << s.why_not;
    if (!std::filesystem::exists(CHAOSBED_BINARY)) GTEST_SKIP() << "chaosbed binary not built: " << CHAOSBED_BINARY;
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);  // the agent is reparented to us when the controller dies
    counters_ = static_cast<std::atomic<uint64_t>*>(
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    group_ = "chaos-crash-" + std::to_string(::getpid());
    dir_ = (std::filesystem::path(::testing::TempDir()) / ("chaos_crash_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto* c = counters_;
    auto cluster = LocalCluster::start(makeNodes({{"worker", 2}}), [c](const NodeInfo& n, int) {
      for (;;) c[n.index].fetch_add(1);
    }, {group_, 1.0});
    ASSERT_TRUE(cluster.isOk()) << cluster.status().toString();
    cluster_ = std::move(cluster).value();
  }
  void TearDown() override {
    cluster_.reset();
    if (counters_) ::munmap(counters_, 4096);
    if (!group_.empty()) {
      Result<std::vector<std::string>> groups = listGroups();
      if (groups.isOk()) {
        EXPECT_EQ(std::count(groups->begin(), groups->end(), group_), 0) << "cgroup " << group_ << " left behind";
      }
    }
    ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  }

  // Forks the controller; it applies pauseAndSlow() and reports the agent's pid, then waits for `mode`:
  // 'k' to be killed, 's' to stop normally when the pipe closes.
  pid_t forkController(int* agent_pid, int* control_write) {
    int up[2], down[2];
    EXPECT_EQ(::pipe(up), 0);
    EXPECT_EQ(::pipe(down), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(up[0]);
      ::close(down[1]);
      Result<std::unique_ptr<EventLog>> log = EventLog::open(dir_ + "/events.jsonl");
      ActuatorSet set(*cluster_, {.pause_mode = PauseMode::kFreezer});
      Controller ctl(pauseAndSlow(), *cluster_, set.map(),
                     {.events = log.isOk() ? log->get() : nullptr, .state_dir = dir_ + "/state",
                      .agent_binary = CHAOSBED_BINARY, .lease_interval_s = 0.2, .lease_timeout_s = 1.0, .strategy = "chaos-crash"});
      if (!ctl.start().isOk() || !ctl.waitProcessed(0, 5s)) ::_exit(3);
      const int agent = ctl.agentPid();
      (void)!::write(up[1], &agent, sizeof agent);
      char ch;
      while (::read(down[0], &ch, 1) < 0 && errno == EINTR) {
      }
      ::_exit(ctl.stop().isOk() ? 0 : 5);  // no destructors: the cluster belongs to the parent
    }
    ::close(up[1]);
    ::close(down[0]);
    EXPECT_EQ(::read(up[0], agent_pid, sizeof *agent_pid), static_cast<ssize_t>(sizeof *agent_pid));
    ::close(up[0]);
    *control_write = down[1];
    return pid;
  }

  void expectHealed() {
    NodeCgroup* frozen = cluster_->cgroup("worker-0");
    NodeCgroup* slowed = cluster_->cgroup("worker-1");
    EXPECT_FALSE(*frozen->isFrozen());
    EXPECT_NEAR(*slowed->cpuLimit(), 1.0, 1e-6);
    Result<std::optional<ChaosState>> st = readState(dir_ + "/state");
    ASSERT_TRUE(st.isOk() && st->has_value());
    EXPECT_TRUE((*st)->finished);
    EXPECT_TRUE((*st)->entries.empty());
    Result<int> again = cleanupStale(dir_ + "/state", nullptr);
    ASSERT_TRUE(again.isOk());
    EXPECT_EQ(*again, 0) << "the next start found something left";
  }

  std::atomic<uint64_t>* counters_ = nullptr;
  std::string group_, dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(ChaosCrash, AgentHealsAfterControllerSigkill) {
  int agent = 0, control = -1;
  const pid_t ctl = forkController(&agent, &control);
  ASSERT_GT(agent, 0);
  EXPECT_TRUE(*cluster_->cgroup("worker-0")->isFrozen());
  EXPECT_NEAR(*cluster_->cgroup("worker-1")->cpuLimit(), 0.25, 1e-6);
  // A SIGKILLed task in a frozen v1 cgroup cannot die until it is thawed: the agent must thaw it.
  ASSERT_EQ(::kill(cluster_->pid("worker-0"), SIGKILL), 0);
  ASSERT_EQ(::kill(ctl, SIGKILL), 0);
  ASSERT_EQ(::waitpid(ctl, nullptr, 0), ctl);
  const int64_t died = monoNs();
  ASSERT_TRUE(waitGone(agent, 5.0)) << "the agent did not finish within 5 s of the controller's death";
  const double healed_s = static_cast<double>(monoNs() - died) / 1e9;
  EXPECT_LT(healed_s, 5.0);
  std::printf("agent healed %.3f s after the controller was SIGKILLed\n", healed_s);
  expectHealed();
  Result<int> st = cluster_->waitExit("worker-0", 5);  // thawed, so the SIGKILL took effect
  ASSERT_TRUE(st.isOk()) << st.status().toString();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
  std::ifstream events(dir_ + "/events.jsonl");
  std::string all((std::istreambuf_iterator<char>(events)), {});
  EXPECT_TRUE(testing::EventsMatchSchema(dir_ + "/events.jsonl"));
  EXPECT_NE(all.find("\"type\":\"chaos.healed\""), std::string::npos) << all;
  ::close(control);
}

// A cgroup-scoped kill may take the agent first: the controller starts another at its next lease renewal,
// and that one heals when the controller dies too.
TEST_F(ChaosCrash, AKilledAgentIsReplacedAndTheReplacementHeals) {
  int agent = 0, control = -1;
  const pid_t ctl = forkController(&agent, &control);
  ASSERT_GT(agent, 0);
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  ASSERT_TRUE(waitGone(agent, 5.0));
  pid_t replacement = 0;
  for (const int64_t until = monoNs() + 5'000'000'000LL; monoNs() < until && replacement == 0;) {
    Result<std::optional<ChaosState>> st = readState(dir_ + "/state");
    if (st.isOk() && st->has_value() && (*st)->agent_pid > 0 && (*st)->agent_pid != agent) replacement = (*st)->agent_pid;
    else ::poll(nullptr, 0, 20);
  }
  ASSERT_GT(replacement, 0) << "no new agent within 5 s of the first one's death";
  EXPECT_EQ(::kill(replacement, 0), 0) << "the replacement agent is not running";
  EXPECT_TRUE(*cluster_->cgroup("worker-0")->isFrozen()) << "the faults stay while the controller lives";
  ASSERT_EQ(::kill(ctl, SIGKILL), 0);
  ASSERT_EQ(::waitpid(ctl, nullptr, 0), ctl);
  ASSERT_TRUE(waitGone(replacement, 5.0)) << "the replacement agent did not heal within 5 s";
  expectHealed();
  std::ifstream events(dir_ + "/events.jsonl");
  std::string all((std::istreambuf_iterator<char>(events)), {});
  EXPECT_TRUE(testing::EventsMatchSchema(dir_ + "/events.jsonl"));
  EXPECT_NE(all.find("\"type\":\"chaos.agent_restarted\""), std::string::npos) << all;
  ::close(control);
}

TEST_F(ChaosCrash, AgentHealsWhenTheLeaseLapses) {
  int agent = 0, control = -1;
  const pid_t ctl = forkController(&agent, &control);
  ASSERT_GT(agent, 0);
  // A hung controller: alive (its pipe to the agent stays open) but no longer renewing its lease.
  ASSERT_EQ(::kill(ctl, SIGSTOP), 0);
  const int64_t stopped = monoNs();
  ASSERT_TRUE(waitGone(agent, 6.0)) << "the agent did not heal after the lease lapsed";
  const double s = static_cast<double>(monoNs() - stopped) / 1e9;
  EXPECT_LT(s, 1.0 + 5.0);  // lease timeout 1 s, then within 5 s
  std::printf("agent healed %.3f s after the controller stopped renewing (lease 1 s)\n", s);
  expectHealed();
  ::kill(ctl, SIGKILL);
  ::kill(ctl, SIGCONT);
  ::waitpid(ctl, nullptr, 0);
  ::close(control);
}

// A controller that stalled past its lease and then wakes: the agent has healed and exited; the controller
// takes those faults as reverted (by the agent) instead of re-injecting or re-recording them, starts a new
// agent that guards an unfinished state, and stops cleanly.
TEST_F(ChaosCrash, AControllerThatWakesAfterTheAgentHealedAdoptsTheHealAndIsGuardedAgain) {
  int agent = 0, control = -1;
  const pid_t ctl = forkController(&agent, &control);
  ASSERT_GT(agent, 0);
  ASSERT_EQ(::kill(ctl, SIGSTOP), 0);
  ASSERT_TRUE(waitGone(agent, 6.0)) << "the agent did not heal after the lease lapsed";
  ASSERT_EQ(::kill(ctl, SIGCONT), 0);
  auto events = [&] {
    std::ifstream in(dir_ + "/events.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  auto count = [](const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  // Await the controller's two reactions in its event log.
  std::string log;
  for (const int64_t until = monoNs() + 5'000'000'000; monoNs() < until;) {
    log = events();
    if (count(log, "\"type\":\"chaos.lease_lapsed\"") == 1 && count(log, "\"type\":\"chaos.agent_restarted\"") == 1) break;
    struct pollfd none{};
    (void)::poll(&none, 0, 20);
  }
  ASSERT_EQ(count(log, "\"type\":\"chaos.lease_lapsed\""), 1u) << log;
  ASSERT_EQ(count(log, "\"type\":\"chaos.agent_restarted\""), 1u) << log;
  EXPECT_EQ(count(log, "\"by\":\"agent: lease lapsed\""), 2u + 2u) << "two chaos.healed by the agent, two chaos.reverted adopted:\n" << log;
  // Nothing re-injected, and the new agent guards an unfinished state.
  EXPECT_FALSE(*cluster_->cgroup("worker-0")->isFrozen());
  EXPECT_NEAR(*cluster_->cgroup("worker-1")->cpuLimit(), 1.0, 1e-6);
  Result<std::optional<ChaosState>> st = readState(dir_ + "/state");
  ASSERT_TRUE(st.isOk() && st->has_value());
  EXPECT_FALSE((*st)->finished);
  EXPECT_TRUE((*st)->entries.empty());
  const pid_t guardian = (*st)->agent_pid;
  ASSERT_GT(guardian, 0);
  EXPECT_NE(guardian, agent);
  EXPECT_EQ(::kill(guardian, 0), 0) << "the new agent is not running";
  // A normal stop: nothing to revert, the state ends finished, the new agent exits.
  ::close(control);
  int status = -1;
  ASSERT_EQ(::waitpid(ctl, &status, 0), ctl);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "controller status " << status;
  EXPECT_TRUE(waitGone(guardian, 5.0));
  expectHealed();
  EXPECT_EQ(count(events(), "\"type\":\"chaos.failed\""), 0u) << events();
  EXPECT_TRUE(testing::EventsMatchSchema(dir_ + "/events.jsonl"));
}

TEST_F(ChaosCrash, NormalStopRevertsAndTheAgentExits) {
  int agent = 0, control = -1;
  const pid_t ctl = forkController(&agent, &control);
  ASSERT_GT(agent, 0);
  ::close(control);  // tells the controller to stop()
  int status = 0;
  ASSERT_EQ(::waitpid(ctl, &status, 0), ctl);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(waitGone(agent, 5.0));
  expectHealed();
  std::ifstream events(dir_ + "/events.jsonl");
  std::string all((std::istreambuf_iterator<char>(events)), {});
  EXPECT_TRUE(testing::EventsMatchSchema(dir_ + "/events.jsonl"));
  EXPECT_EQ(all.find("chaos.healed"), std::string::npos) << "the agent healed after a normal stop";
}

}  // namespace
}  // namespace chaosbed::chaos
