// Healing that survives anyone's death (#12): a real `chaosbed run` with a pause (freezer) and a slow fault
// (CPU quota) active has its chaos agent and then itself SIGKILLed, in both orders, as a cgroup-scoped stop
// (systemd, a CI cancel) does. Nobody is left to heal, so the run's cgroups (frozen and throttled nodes in
// them) stay behind; `chaosbed chaos heal`, like the next `chaosbed run`, finds the dead run in the host's
// register (chaos/host_state.h) and leaves no group, no process and no claim of it.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "chaos/clock.h"
#include "chaos/host_state.h"
#include "chaos/state.h"
#include "core/isolation/cgroup.h"
#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const char* const kSpec =
    "apiVersion: chaosbed/v1alpha1\n"
    "kind: Experiment\n"
    "metadata: {name: host-heal}\n"
    "seed: 1\n"
    "cluster: {workers: 2, servers: 1, cpu_per_node: 0.3, transport: ucx, hosts: local}\n"
    "model: {kind: mlp, layers: [32, 32, 4]}\n"
    "data: {dataset: synthetic, samples: 4096, dims: 32, classes: 4}\n"
    "training: {batch_per_worker: 32, learning_rate: 1.0e-6, target_accuracy: 0.99, time_limit_s: 120,\n"
    "           eval_interval_s: 0.5}\n"
    "strategies: [{name: mirrored}]\n"
    "chaos:\n"
    "  faults:\n"
    "    - {name: freeze, action: pause, target: {role: worker, index: 0}, at_s: 0.2, duration_s: 100}\n"
    "    - {name: throttle, action: slow, target: {role: worker, index: 1}, at_s: 0.2, duration_s: 100,\n"
    "       params: {cpu_fraction: 0.2}}\n"
    "metrics: {listen: 127.0.0.1:0}\n";


std::vector<std::string> groupsOf(const std::string& owner) {
  std::vector<std::string> out;
  auto groups = listGroups();
  if (groups.isOk())
    for (const std::string& g : *groups)
      if (g.starts_with(owner + "-")) out.push_back(g);
  return out;
}

// The controller blocks SIGINT and SIGTERM for its signal watcher, and an exec keeps the mask: the chaos
// agent it spawns must start with nothing blocked (SIGINT alone ignored, on purpose), so that an operator's
// or a service manager's SIGTERM stops it.
TEST(ChaosAgent, StartsWithNoSignalBlockedAndStopsOnSigterm) {
  const std::string dir = testing::makeTempDir("chaos-agent-signals");
  ASSERT_TRUE(chaos::writeState(dir, chaos::ChaosState{.controller_pid = ::getpid()}).isOk());
  ASSERT_TRUE(chaos::renewLease(dir, chaos::realClock().monotonicNs()).isOk());
  sigset_t stop_signals, old;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &stop_signals, &old), 0);
  int control_fd = -1;
  auto pid = chaos::spawnAgent(CHAOSBED_BINARY, dir, 60.0, &control_fd);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  // Its status once it runs chaosbed (the exec is done): the masks it started with.
  std::string status;
  for (auto until = SteadyClock::now() + 10s; SteadyClock::now() < until; std::this_thread::sleep_for(10ms)) {
    status = testing::readFile("/proc/" + std::to_string(*pid) + "/status");
    if (status.find("Name:\tchaosbed\n") != std::string::npos) break;
  }
  const auto field = [&](const std::string& name) {
    const size_t at = status.find(name + ":\t");
    return at == std::string::npos ? std::string("?") : status.substr(at + name.size() + 2, 16);
  };
  EXPECT_EQ(field("SigBlk"), "0000000000000000") << status;
  EXPECT_EQ(field("SigIgn"), "0000000000000002") << "SIGINT alone ignored:\n" << status;
  ASSERT_EQ(::kill(*pid, SIGTERM), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(*pid, &wstatus, 0), *pid);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGTERM) << "wait status " << wstatus;
  ::close(control_fd);
}

class HostHeal : public ::testing::TestWithParam<bool> {};  // true: the agent dies first

TEST_P(HostHeal, ChaosHealLeavesNothingOfARunWhoseAgentAndControllerWereKilled) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (cgroups for the pause and slow faults)";
  const CgroupSupport cg = probeCgroups();
  if (!cg.cpu || !cg.freezer) GTEST_SKIP() << "no cgroup cpu and freezer: " << cg.why_not;
  auto root = chaos::hostStateRoot();
  ASSERT_TRUE(root.isOk()) << root.status().toString();

  const std::string dir = testing::makeTempDir("host-heal");
  std::ofstream(dir + "/spec.yaml") << kSpec;
  const std::string out = dir + "/out";
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  const auto owner = chaos::ownerName(run.pid());
  ASSERT_TRUE(owner.has_value());
  const std::string state_dir = *root + "/" + *owner + "/mirrored";

  // Both faults are in effect once the state file lists them and the events say they were applied.
  std::optional<chaos::ChaosState> state;
  for (const Deadline deadline = deadlineIn(60s); SteadyClock::now() < deadline; std::this_thread::sleep_for(50ms)) {
    auto read = chaos::readState(state_dir);
    const std::string events = testing::readFile(out + "/events.jsonl");
    if (read.isOk() && *read && (*read)->entries.size() == 2 && (*read)->agent_pid > 0) {
      size_t applied = 0;
      for (size_t at = events.find("chaos.applied"); at != std::string::npos; at = events.find("chaos.applied", at + 1))
        ++applied;
      if (applied >= 2) {
        state = **read;
        break;
      }
    }
  }
  ASSERT_TRUE(state.has_value()) << "the faults were never both applied:\n" << run.output();

  const pid_t agent = state->agent_pid;
  if (GetParam()) {
    ASSERT_EQ(::kill(agent, SIGKILL), 0);
    run.signal(SIGKILL);
  } else {
    run.signal(SIGKILL);
    ::kill(agent, SIGKILL);  // it may already be healing, or done
  }
  ASSERT_TRUE(run.wait(deadlineIn(10s)).has_value());
  if (GetParam()) {
    EXPECT_FALSE(groupsOf(*owner).empty()) << "with agent and controller dead, the run's cgroups are still there";
  }

  const auto healed_at = SteadyClock::now();
  testing::Command heal({testing::chaosbedBinary(), "chaos", "heal"});
  auto rc = heal.wait(deadlineIn(30s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0) << heal.output();
  EXPECT_LT(SteadyClock::now() - healed_at, 5s) << "healing took longer than 5 s";
  EXPECT_TRUE(groupsOf(*owner).empty()) << "cgroup groups of the dead run are left";
  EXPECT_FALSE(fs::exists(*root + "/" + *owner)) << "the dead run's claim is left";
  // The nodes were in those groups (frozen, throttled): removing a group kills what is in it.
  for (const Deadline d = deadlineIn(5s); !testing::processesMentioning(out).empty() && SteadyClock::now() < d;)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(testing::processesMentioning(out).empty()) << "node processes of the dead run are left";
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));  // what two SIGKILLs and a heal left
  fs::remove_all(dir);
}

// The same at random instants (before, during and after the faults are applied; the agent or the
// controller first, or only the controller): nothing is ever left. CHAOSBED_HEAL_ROUNDS sets the count.
TEST(HostHealSoak, RandomKillInstantsLeaveNothing) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (cgroups for the pause and slow faults)";
  const CgroupSupport cg = probeCgroups();
  if (!cg.cpu || !cg.freezer) GTEST_SKIP() << "no cgroup cpu and freezer: " << cg.why_not;
  auto root = chaos::hostStateRoot();
  ASSERT_TRUE(root.isOk()) << root.status().toString();
  const char* env = std::getenv("CHAOSBED_HEAL_ROUNDS");
  const int rounds = env ? std::atoi(env) : 20;
  std::mt19937 rng(20261201);  // fixed: a failing round can be replayed
  const std::string dir = testing::makeTempDir("host-heal-soak");
  std::ofstream(dir + "/spec.yaml") << kSpec;
  int leaks = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string out = dir + "/out-" + std::to_string(round);
    const int delay_ms = std::uniform_int_distribution<int>(0, 1500)(rng);
    const int order = std::uniform_int_distribution<int>(0, 2)(rng);  // 0 agent first, 1 controller first, 2 controller only
    testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
    const auto owner = chaos::ownerName(run.pid());
    ASSERT_TRUE(owner.has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));  // the kill instant itself is the variable
    auto state = chaos::readState(*root + "/" + *owner + "/mirrored");
    const pid_t agent = state.isOk() && *state ? (*state)->agent_pid : 0;
    if (order == 0 && agent > 0) ::kill(agent, SIGKILL);
    run.signal(SIGKILL);
    if (order == 1 && agent > 0) ::kill(agent, SIGKILL);
    ASSERT_TRUE(run.wait(deadlineIn(10s)).has_value());
    testing::Command heal({testing::chaosbedBinary(), "chaos", "heal"});
    auto rc = heal.wait(deadlineIn(30s));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 0) << heal.output();
    for (const Deadline d = deadlineIn(5s); !testing::processesMentioning(out).empty() && SteadyClock::now() < d;)
      std::this_thread::sleep_for(20ms);
    const bool left = !groupsOf(*owner).empty() || fs::exists(*root + "/" + *owner) ||
                      !testing::processesMentioning(out).empty();
    if (left) {
      ++leaks;
      ADD_FAILURE() << "round " << round << " (kill at " << delay_ms << " ms, order " << order << ") left something";
    }
  }
  std::printf("[heal-soak] %d rounds, %d leaks\n", rounds, leaks);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(KillOrder, HostHeal, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "AgentFirst" : "ControllerFirst"; });

}  // namespace
}  // namespace chaosbed
