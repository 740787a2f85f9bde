// Node isolation on real cgroups: a CPU quota really caps a CPU-bound process, the freezer really stops it,
// destroy/removeGroup leave nothing behind, and the launcher places a node in its cgroup before it execs.
// Skipped (with the reason) where cgroups are not writable.

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/isolation/cgroup.h"
#include "core/launcher/launcher.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

// CPU time of a process, from /proc/<pid>/schedstat (ns on the CPU).
std::chrono::nanoseconds cpuTime(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  long long ns = -1;
  in >> ns;
  return std::chrono::nanoseconds(ns);
}

// A forked CPU-bound child that counts in shared memory; dies with the test (PR_SET_PDEATHSIG).
class Spinner {
 public:
  Spinner() {
    void* mem = ::mmap(nullptr, sizeof(std::atomic<uint64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    counter_ = new (mem) std::atomic<uint64_t>(0);
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      for (;;) counter_->fetch_add(1, std::memory_order_relaxed);
    }
  }
  ~Spinner() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::munmap(counter_, sizeof(std::atomic<uint64_t>));
  }
  pid_t pid() const { return pid_; }
  uint64_t count() const { return counter_->load(); }
  // Waits (bounded) until the counter passes `above`.
  bool awaitProgress(uint64_t above, std::chrono::milliseconds timeout) const {
    auto deadline = SteadyClock::now() + timeout;
    while (count() <= above) {
      if (SteadyClock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  int reap() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::atomic<uint64_t>* counter_ = nullptr;
};

namespace fs = std::filesystem;

// Raises a cgroup's CPU weight (v1 cpu.shares, v2 cpu.weight) to the maximum and restores it on scope exit.
class ShareBoost {
 public:
  ShareBoost(std::string dir, int version)
      : file_(std::move(dir) + (version == 1 ? "/cpu.shares" : "/cpu.weight")) {
    std::ifstream in(file_);
    std::getline(in, old_);
    if (!old_.empty()) std::ofstream(file_) << (version == 1 ? "262144" : "10000");
  }
  ~ShareBoost() {
    if (!old_.empty()) std::ofstream(file_) << old_;
  }

 private:
  std::string file_;
  std::string old_;
};

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CgroupSupport s = probeCgroups();
    if (!s.cpu || !s.freezer) GTEST_SKIP() << "cgroups not usable here: " << s.why_not;
    group_ = "test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    if (!group_.empty()) {
      EXPECT_TRUE(removeGroup(group_).isOk());
    }
  }
  std::string group_;
};

TEST_F(CgroupTest, QuotaCapsACpuBoundProcess) {
  auto slow = NodeCgroup::create(group_, "slow");
  auto fast = NodeCgroup::create(group_, "fast");
  ASSERT_TRUE(slow.isOk()) << slow.status().toString();
  ASSERT_TRUE(fast.isOk()) << fast.status().toString();
  ASSERT_TRUE(slow->setCpuLimit(0.25).isOk());
  ASSERT_TRUE(fast->setCpuLimit(0).isOk());
  EXPECT_DOUBLE_EQ(slow->cpuLimit().value(), 0.25);
  EXPECT_DOUBLE_EQ(fast->cpuLimit().value(), 0.0);
  // Other work on this machine (parallel builds) would take the CPU the quota allows: give the test's
  // cgroups top CPU weight for the measurement, so that only the quota limits the spinner.
  std::string group_dir = fs::path(slow->paths()[0]).parent_path().string();
  ShareBoost boost_base(fs::path(group_dir).parent_path().string(), slow->version());
  ShareBoost boost_group(group_dir, slow->version());
  ShareBoost boost_slow(slow->paths()[0], slow->version());
  ShareBoost boost_fast(fast->paths()[0], fast->version());
  Spinner throttled, control;
  ASSERT_TRUE(slow->addProcess(throttled.pid()).isOk());
  ASSERT_TRUE(fast->addProcess(control.pid()).isOk());
  auto procs = slow->processes();
  ASSERT_TRUE(procs.isOk());
  EXPECT_EQ(*procs, std::vector<pid_t>{throttled.pid()});

  auto t0 = SteadyClock::now();
  auto a0 = cpuTime(throttled.pid()), b0 = cpuTime(control.pid());
  std::this_thread::sleep_for(1500ms);  // the measurement window: 15 CFS periods
  auto wall = SteadyClock::now() - t0;
  auto a1 = cpuTime(throttled.pid()), b1 = cpuTime(control.pid());
  double share = std::chrono::duration<double>(a1 - a0) / std::chrono::duration<double>(wall);
  double control_share = std::chrono::duration<double>(b1 - b0) / std::chrono::duration<double>(wall);
  RecordProperty("throttled_share", std::to_string(share));
  RecordProperty("control_share", std::to_string(control_share));
  std::printf("0.25-CPU cgroup got %.3f of a core; the unlimited control got %.3f\n", share, control_share);
  EXPECT_LE(share, 0.35) << "the quota did not cap the process";
  // The floor only holds when the machine had a free core for it (other builds may be running here).
  if (control_share >= 0.5) {
    EXPECT_GE(share, 0.15) << "the process got far less than its quota on a machine with spare CPU";
  } else {
    std::printf("machine too busy (control got %.2f of a core): lower bound not checked\n", control_share);
  }
}

TEST_F(CgroupTest, FreezeStopsProgressAndThawResumesIt) {
  auto cg = NodeCgroup::create(group_, "worker-0");
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  Spinner child;
  ASSERT_TRUE(cg->addProcess(child.pid()).isOk());
  ASSERT_TRUE(child.awaitProgress(0, 5s));
  EXPECT_FALSE(cg->isFrozen().value());

  ASSERT_TRUE(cg->freeze().isOk());
  EXPECT_TRUE(cg->isFrozen().value());
  ASSERT_TRUE(cg->freeze().isOk());  // idempotent
  uint64_t at_freeze = child.count();
  auto cpu_at_freeze = cpuTime(child.pid());
  std::this_thread::sleep_for(200ms);  // a window in which a running child would count millions
  EXPECT_EQ(child.count(), at_freeze);
  EXPECT_EQ(cpuTime(child.pid()), cpu_at_freeze);

  ASSERT_TRUE(cg->thaw().isOk());
  EXPECT_FALSE(cg->isFrozen().value());
  EXPECT_TRUE(child.awaitProgress(at_freeze, 5s));
}

TEST_F(CgroupTest, DestroyKillsWhatIsLeftAndRemovesTheDirectories) {
  auto cg = NodeCgroup::create(group_, "ps-0");
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  std::vector<std::string> paths = cg->paths();
  ASSERT_EQ(paths.size(), cg->version() == 1 ? 2u : 1u);
  for (const auto& p : paths) EXPECT_TRUE(std::filesystem::exists(p)) << p;
  Spinner child;
  ASSERT_TRUE(cg->addProcess(child.pid()).isOk());
  ASSERT_TRUE(cg->freeze().isOk());  // even a frozen process goes
  ASSERT_TRUE(cg->destroy().isOk());
  int status = child.reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const auto& p : paths) EXPECT_FALSE(std::filesystem::exists(p)) << p;
  EXPECT_TRUE(cg->destroy().isOk());  // idempotent
}

TEST_F(CgroupTest, RemoveGroupCleansUpACrashedRun) {
  Spinner child;
  {
    auto a = NodeCgroup::create(group_, "worker-0");
    auto b = NodeCgroup::create(group_, "worker-1");
    ASSERT_TRUE(a.isOk() && b.isOk());
    ASSERT_TRUE(a->addProcess(child.pid()).isOk());
    ASSERT_TRUE(a->freeze().isOk());
  }  // the handles go; the cgroups stay, as after a crash
  auto groups = listGroups();
  ASSERT_TRUE(groups.isOk());
  EXPECT_NE(std::find(groups->begin(), groups->end(), group_), groups->end());
  ASSERT_TRUE(removeGroup(group_).isOk());
  int status = child.reap();
  EXPECT_TRUE(WIFSIGNALED(status));
  groups = listGroups();
  ASSERT_TRUE(groups.isOk());
  EXPECT_EQ(std::find(groups->begin(), groups->end(), group_), groups->end());
  EXPECT_TRUE(removeGroup(group_).isOk());  // idempotent
}

// The v2 code path on a real kernel: where the machine is v1 but also mounts the unified (cgroup2) hierarchy
// without controllers (systemd's hybrid layout), its freezer (cgroup.freeze) still works.
TEST_F(CgroupTest, V2FreezerOnTheHybridUnifiedMount) {
  const std::string unified = "/sys/fs/cgroup/unified";
  if (probeCgroups().version == 2 || ::access((unified + "/cgroup.procs").c_str(), W_OK) != 0)
    GTEST_SKIP() << "no separate writable cgroup2 mount at " << unified;
  CgroupRoots roots;
  roots.version = 2;
  roots.unified_root = unified;
  auto cg = NodeCgroup::create(group_, "worker-0", roots);
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  if (!fs::exists(cg->paths()[0] + "/cgroup.freeze")) {
    EXPECT_TRUE(removeGroup(group_, roots).isOk());
    GTEST_SKIP() << "kernel without cgroup.freeze";
  }
  Spinner child;
  ASSERT_TRUE(cg->addProcess(child.pid()).isOk());
  EXPECT_EQ(cg->processes().value(), std::vector<pid_t>{child.pid()});
  ASSERT_TRUE(child.awaitProgress(0, 5s));
  ASSERT_TRUE(cg->freeze().isOk());
  EXPECT_TRUE(cg->isFrozen().value());
  uint64_t at_freeze = child.count();
  std::this_thread::sleep_for(200ms);  // the observation window
  EXPECT_EQ(child.count(), at_freeze);
  ASSERT_TRUE(cg->thaw().isOk());
  EXPECT_TRUE(child.awaitProgress(at_freeze, 5s));
  EXPECT_GE(cg->cpuUsage().value(), std::chrono::microseconds(1));  // cpu.stat exists without the controller
  ASSERT_TRUE(cg->freeze().isOk());
  const Status removed = removeGroup(group_, roots);  // thaws, kills, removes
  ASSERT_TRUE(removed.isOk()) << removed.toString();
  int status = child.reap();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(fs::exists(unified + "/chaosbed/" + group_));
}

TEST_F(CgroupTest, LauncherPlacesTheNodeBeforeItExecs) {
  std::filesystem::path log_dir = std::filesystem::temp_directory_path() / ("chaosbed-iso-" + group_);
  std::vector<std::string> paths;
  {
    LauncherOptions opts;
    opts.log_dir = log_dir.string();
    opts.cgroup_group = group_;
    auto l = Launcher::create(opts);
    ASSERT_TRUE(l.isOk()) << l.status().toString();
    // This test binary as the node: it prints /proc/self/cgroup before anything else (launcher_process_test).
    NodeSpec probe;
    probe.name = "worker-0";
    probe.role = "worker";
    probe.env["CHAOSBED_TEST_HELPER"] = "cgroup";
    probe.cpus = 0.5;
    ASSERT_TRUE((*l)->start(probe).isOk());
    auto e = (*l)->waitExit("worker-0", deadlineIn(10s));
    ASSERT_TRUE(e.isOk());
    EXPECT_EQ(e->code, 0);
    std::ifstream in((*l)->logPath("worker-0"));
    std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string where = "/chaosbed/" + group_ + "/worker-0\n";
    if (probeCgroups().version == 1) {
      EXPECT_NE(log.find(":cpu:" + where), std::string::npos) << log;
      EXPECT_NE(log.find(":freezer:" + where), std::string::npos) << log;
    } else {
      EXPECT_NE(log.find("0::" + where), std::string::npos) << log;
    }
    NodeCgroup* cg = (*l)->cgroup("worker-0");
    ASSERT_NE(cg, nullptr);
    EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 0.5);
    paths = cg->paths();

    // A frozen, throttled node restarts thawed with its configured quota, and stops even when frozen.
    NodeSpec sleeper;
    sleeper.name = "ps-0";
    sleeper.role = "ps";
    sleeper.args = {"60"};
    sleeper.binary = "sleep";
    sleeper.cpus = 0.25;
    auto pid = (*l)->start(sleeper);
    ASSERT_TRUE(pid.isOk());
    NodeCgroup* ps = (*l)->cgroup("ps-0");
    ASSERT_NE(ps, nullptr);
    EXPECT_EQ(ps->processes().value(), std::vector<pid_t>{*pid});
    ASSERT_TRUE(ps->setCpuLimit(0.05).isOk());
    ASSERT_TRUE(ps->freeze().isOk());
    auto again = (*l)->restart("ps-0", deadlineIn(5s));
    ASSERT_TRUE(again.isOk()) << again.status().toString();
    EXPECT_FALSE(ps->isFrozen().value());
    EXPECT_DOUBLE_EQ(ps->cpuLimit().value(), 0.25);
    EXPECT_EQ(ps->processes().value(), std::vector<pid_t>{*again});
    ASSERT_TRUE(ps->freeze().isOk());
    ASSERT_TRUE((*l)->stopAll(200ms).isOk());
    EXPECT_FALSE((*l)->running("ps-0"));
  }
  for (const auto& p : paths) EXPECT_FALSE(std::filesystem::exists(p)) << p;
  auto groups = listGroups();
  ASSERT_TRUE(groups.isOk());
  EXPECT_EQ(std::find(groups->begin(), groups->end(), group_), groups->end());
  std::filesystem::remove_all(log_dir);
}

}  // namespace
}  // namespace chaosbed
