// Launcher: real node processes. Exit notices (code, signal, latency), process groups, the environment,
// PR_SET_PDEATHSIG (a launcher SIGKILLed -> its nodes die), stopAll and the destructor leave nothing behind.
//
// Nodes are /bin/sh snippets or this test binary itself (the launcher's default binary is /proc/self/exe):
// with CHAOSBED_TEST_HELPER set, the binary acts as a helper node before main runs (see runHelper).

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/isolation/cgroup.h"
#include "core/launcher/launcher.h"
#include "tests/testing/command.h"

extern char** environ;

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

NodeSpec makeNode(std::string name, std::string role, int index, std::string binary,
                  std::vector<std::string> args = {}) {
  NodeSpec spec;
  spec.name = std::move(name);
  spec.role = std::move(role);
  spec.index = index;
  spec.binary = std::move(binary);
  spec.args = std::move(args);
  return spec;
}

// Helper modes, chosen by CHAOSBED_TEST_HELPER in a node started from this binary:
//   exit:N  -> exit with N
//   cgroup  -> print /proc/self/cgroup (the first thing the process does: proves placement before exec)
//   middle  -> a launcher that starts `sleep 60` as its node, writes the node's pid to fd 3, then waits to
//              be killed
int runHelper(const std::string& mode) {
  if (mode.rfind("exit:", 0) == 0) return std::atoi(mode.c_str() + 5);
  if (mode == "cgroup") {
    std::ifstream in("/proc/self/cgroup");
    std::cout << in.rdbuf() << std::flush;
    return 0;
  }
  if (mode == "middle") {
    LauncherOptions opts;
    opts.log_dir = std::getenv("CHAOSBED_TEST_LOGDIR");
    auto launcher = Launcher::create(opts);
    if (!launcher.isOk()) return 10;
    NodeSpec spec = makeNode("grandchild", "worker", 0, "sleep", {"60"});
    auto pid = (*launcher)->start(spec);
    if (!pid.isOk()) return 11;
    pid_t p = *pid;
    if (::write(3, &p, sizeof p) != sizeof p) return 12;
    for (;;) ::pause();
  }
  return 99;
}

const bool kIsHelper = [] {
  if (const char* mode = std::getenv("CHAOSBED_TEST_HELPER")) std::_Exit(runHelper(mode));
  return false;
}();

// Dead: gone from /proc, or a zombie waiting for a parent that is not us.
bool processGone(pid_t pid) {
  const std::string stat = testing::readFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return true;
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'Z' || stat[paren + 2] == 'X');
}

// Waits (bounded) until pid has exited. A pidfd polls readable once the process is dead, whoever its parent
// is, so no polling of /proc is needed.
bool awaitGone(pid_t pid, std::chrono::milliseconds timeout) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // already reaped
  pollfd p{fd, POLLIN, 0};
  int n;
  do n = ::poll(&p, 1, static_cast<int>(timeout.count())); while (n < 0 && errno == EINTR);
  ::close(fd);
  return n == 1;
}

// Live (not zombie) processes whose process group is pgid.
std::vector<pid_t> liveInGroup(pid_t pgid) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = testing::readFile((e.path() / "stat").string());
    size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(paren + 2));
    char state;
    long ppid, pgrp;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z' && state != 'X') out.push_back(std::stoi(name));
  }
  return out;
}

// Waits (bounded) until no live process is left in group pgid. The launcher SIGKILLs a node's group before
// its exit notice, but a killed process dies only once it is scheduled: on a loaded machine a helper can
// still be runnable when the notice arrives. Its members can no longer fork, so awaiting each one suffices.
bool awaitGroupGone(pid_t pgid, std::chrono::milliseconds timeout) {
  for (pid_t p : liveInGroup(pgid))
    if (!awaitGone(p, timeout)) return false;
  return liveInGroup(pgid).empty();
}

// Collects exit notices from the launcher thread.
class Notices {
 public:
  ExitCallback callback() {
    return [this](const ExitInfo& e) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back(e);
      cv_.notify_all();
    };
  }
  std::optional<ExitInfo> next(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !got_.empty(); })) return std::nullopt;
    ExitInfo e = got_.front();
    got_.pop_front();
    return e;
  }
  size_t pending() {
    std::lock_guard<std::mutex> lock(mu_);
    return got_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ExitInfo> got_;
};

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_dir_ = std::filesystem::temp_directory_path() /
               ("chaosbed-launcher-test-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(log_dir_);
  }
  void TearDown() override { std::filesystem::remove_all(log_dir_); }

  std::unique_ptr<Launcher> makeLauncher(std::chrono::milliseconds grace = 2000ms) {
    LauncherOptions opts;
    opts.log_dir = log_dir_.string();
    opts.on_exit = notices_.callback();
    opts.stop_grace = grace;
    opts.cgroup_group = "test-" + std::to_string(::getpid());
    auto l = Launcher::create(opts);
    EXPECT_TRUE(l.isOk()) << l.status().toString();
    return l.isOk() ? std::move(l).value() : nullptr;
  }

  static NodeSpec shell(const std::string& name, const std::string& script) {
    return makeNode(name, "worker", 0, "/bin/sh", {"-c", script});
  }

  std::string readLog(Launcher& l, const std::string& name) {
    std::ifstream in(l.logPath(name));
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // Waits (bounded) until the node's log contains text, woken by inotify as the log grows.
  bool awaitLog(Launcher& l, const std::string& name, const std::string& text,
                std::chrono::milliseconds timeout = 5000ms) {
    int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) return false;
    ::inotify_add_watch(fd, l.logPath(name).c_str(), IN_MODIFY);
    auto deadline = SteadyClock::now() + timeout;
    bool found;
    while (!(found = readLog(l, name).find(text) != std::string::npos)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left <= 0ms) break;
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(left.count())) > 0) {
        char buf[4096];
        while (::read(fd, buf, sizeof buf) > 0) {
        }
      }
    }
    ::close(fd);
    return found;
  }

  std::filesystem::path log_dir_;
  Notices notices_;
};

TEST_F(LauncherTest, ExitNoticeCarriesExitCode) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  auto pid = l->start(shell("worker-0", "exit 3"));
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  auto e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->name, "worker-0");
  EXPECT_EQ(e->pid, *pid);
  EXPECT_EQ(e->incarnation, 1);
  EXPECT_FALSE(e->signaled);
  EXPECT_EQ(e->code, 3);
  EXPECT_FALSE(e->requested);
  EXPECT_EQ(e->describe(), "exited with code 3");
  EXPECT_FALSE(l->running("worker-0"));
  EXPECT_EQ(l->pid("worker-0").status().code(), StatusCode::kUnavailable);
  auto w = l->waitExit("worker-0", deadlineIn(1s));
  ASSERT_TRUE(w.isOk());
  EXPECT_EQ(w->code, 3);
}

TEST_F(LauncherTest, KillNoticeArrivesWithinMilliseconds) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  auto pid = l->start(makeNode("ps-0", "ps", 0, "sleep", {"60"}));
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  EXPECT_TRUE(l->running("ps-0"));
  auto killed_at = SteadyClock::now();
  ASSERT_TRUE(l->signal("ps-0", SIGKILL).isOk());
  auto e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->signaled);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_EQ(e->describe(), "killed by signal 9 (SIGKILL)");
  auto latency = std::chrono::duration_cast<std::chrono::microseconds>(e->at - killed_at);
  RecordProperty("notice_latency_us", std::to_string(latency.count()));
  EXPECT_LT(latency, 100ms) << "exit notice took " << latency.count() << " us";
  EXPECT_EQ(l->signal("ps-0", SIGTERM).code(), StatusCode::kUnavailable);
  EXPECT_EQ(l->signal("nobody", SIGTERM).code(), StatusCode::kNotFound);
}

TEST_F(LauncherTest, NodeLeadsItsOwnProcessGroupAndGetsItsIdentity) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  NodeSpec spec = shell("evaluator-1",
                        "echo \"node=$CHAOSBED_NODE role=$CHAOSBED_ROLE rank=$CHAOSBED_RANK "
                        "inc=$CHAOSBED_INCARNATION extra=$EXTRA\"; echo to-stderr >&2; exec sleep 60");
  spec.role = "evaluator";
  spec.index = 1;
  spec.env["EXTRA"] = "x y";
  auto pid = l->start(spec);
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  EXPECT_EQ(::getpgid(*pid), *pid);
  EXPECT_NE(::getpgid(*pid), ::getpgrp());
  ASSERT_TRUE(awaitLog(*l, "evaluator-1", "to-stderr\n"));
  ASSERT_TRUE(l->signal("evaluator-1", SIGTERM).isOk());
  auto e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGTERM);
  std::string log = readLog(*l, "evaluator-1");
  EXPECT_NE(log.find("--- chaosbed launcher: evaluator-1 incarnation 1: /bin/sh -c"), std::string::npos) << log;
  EXPECT_NE(log.find("node=evaluator-1 role=evaluator rank=1 inc=1 extra=x y\n"), std::string::npos) << log;
  EXPECT_NE(log.find("to-stderr\n"), std::string::npos) << log;
}

TEST_F(LauncherTest, NodeExitTakesItsProcessGroupAlong) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  // The shell leaves a helper in its group and exits: the launcher kills the helper with the node.
  auto pid = l->start(shell("worker-0", "sleep 60 & sleep 60 & echo forked; wait"));
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  ASSERT_TRUE(awaitLog(*l, "worker-0", "\nforked\n"));  // both helpers exist now
  ASSERT_EQ(liveInGroup(*pid).size(), 3u);
  ASSERT_EQ(::kill(*pid, SIGKILL), 0);  // only the leader, as a crash would
  auto e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_TRUE(awaitGroupGone(*pid, 5000ms));
}

TEST_F(LauncherTest, DefaultBinaryIsTheRunningExecutable) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  NodeSpec spec = makeNode("worker-1", "worker", 1, "");  // "": the running executable
  spec.env["CHAOSBED_TEST_HELPER"] = "exit:7";
  ASSERT_TRUE(l->start(spec).isOk());
  auto e = notices_.next(10s);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->signaled);
  EXPECT_EQ(e->code, 7);
}

TEST_F(LauncherTest, ExecFailureIsReportedByStart) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  std::filesystem::create_directories(log_dir_);
  std::string bogus = (log_dir_ / "not-a-program").string();
  {
    std::ofstream out(bogus);
    out << "\x7f" << "garbage, not ELF, no shebang";
  }
  ::chmod(bogus.c_str(), 0755);
  auto r = l->start(makeNode("worker-0", "worker", 0, bogus));
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("exec " + bogus), std::string::npos) << r.status().toString();
  EXPECT_EQ(notices_.pending(), 0u);  // a node that never ran sends no notice
  // The name is free again, and a missing binary is caught before forking.
  auto missing = l->start(makeNode("worker-0", "worker", 0, "/nonexistent/bin"));
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("/nonexistent/bin"), std::string::npos);
  auto bad_name = l->start(makeNode("a/b", "worker", 0, "true"));
  EXPECT_EQ(bad_name.status().code(), StatusCode::kInvalidArgument);
  auto dup = l->start(makeNode("w", "worker", 0, "sleep", {"60"}));
  ASSERT_TRUE(dup.isOk());
  EXPECT_EQ(l->start(makeNode("w", "worker", 0, "true")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(LauncherTest, RestartStartsANewIncarnationUnderTheSameName) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  auto first = l->start(shell("worker-2", "echo inc=$CHAOSBED_INCARNATION; exec sleep 60"));
  ASSERT_TRUE(first.isOk());
  ASSERT_TRUE(awaitLog(*l, "worker-2", "inc=1\n"));
  auto second = l->restart("worker-2", deadlineIn(5s));
  ASSERT_TRUE(second.isOk()) << second.status().toString();
  EXPECT_NE(*first, *second);
  auto e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->pid, *first);
  EXPECT_EQ(e->incarnation, 1);
  EXPECT_TRUE(e->requested);
  EXPECT_EQ(l->incarnation("worker-2"), 2);
  EXPECT_EQ(l->pid("worker-2").value(), *second);
  ASSERT_TRUE(awaitLog(*l, "worker-2", "inc=2\n"));
  // A dead node restarts too (the `replace` fault).
  ASSERT_TRUE(l->signal("worker-2", SIGKILL).isOk());
  e = notices_.next(5s);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->requested);
  EXPECT_EQ(e->incarnation, 2);
  auto third = l->restart("worker-2", deadlineIn(5s));
  ASSERT_TRUE(third.isOk());
  EXPECT_EQ(l->incarnation("worker-2"), 3);
  EXPECT_TRUE(awaitLog(*l, "worker-2", "inc=3\n"));
  ASSERT_TRUE(l->stopAll(1s).isOk());
  EXPECT_EQ(l->restart("nobody", deadlineIn(1s)).status().code(), StatusCode::kNotFound);
}

TEST_F(LauncherTest, StopAllTermsThenKillsAndLeavesNoProcess) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    auto p = l->start(makeNode("worker-" + std::to_string(i), "worker", i, "sleep", {"60"}));
    ASSERT_TRUE(p.isOk());
    pids.push_back(*p);
  }
  // This one ignores SIGTERM (and sleeps in the foreground so that the shell is not reaped early).
  auto stubborn = l->start(shell("ps-0", "trap '' TERM; echo ready; while :; do sleep 1; done"));
  ASSERT_TRUE(stubborn.isOk());
  pids.push_back(*stubborn);
  // The trap must be in place before the test sends SIGTERM: wait for the shell's "ready" line.
  ASSERT_TRUE(awaitLog(*l, "ps-0", "\nready\n"));
  ASSERT_TRUE(l->signal("worker-0", SIGSTOP).isOk());  // a paused node still stops

  auto t0 = SteadyClock::now();
  ASSERT_TRUE(l->stopAll(300ms).isOk());
  auto took = SteadyClock::now() - t0;
  EXPECT_GE(took, 300ms);  // waited out the grace for the stubborn node
  EXPECT_LT(took, 5s);
  std::map<std::string, ExitInfo> seen;
  for (int i = 0; i < 4; ++i) {
    auto e = notices_.next(5s);
    ASSERT_TRUE(e) << "notice " << i;
    seen[e->name] = *e;
  }
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(notices_.pending(), 0u);
  for (int i = 0; i < 3; ++i) {
    const ExitInfo& e = seen["worker-" + std::to_string(i)];
    EXPECT_TRUE(e.requested);
    EXPECT_EQ(e.signal, SIGTERM) << e.name;
  }
  EXPECT_EQ(seen["ps-0"].signal, SIGKILL);
  for (pid_t p : pids) {
    EXPECT_TRUE(processGone(p)) << p;
    EXPECT_TRUE(awaitGroupGone(p, 5000ms)) << p;
  }
}

TEST_F(LauncherTest, DestructorStopsEverything) {
  std::vector<pid_t> pids;
  {
    auto l = makeLauncher(200ms);
    ASSERT_TRUE(l);
    for (int i = 0; i < 2; ++i) {
      auto p = l->start(makeNode("worker-" + std::to_string(i), "worker", i, "sleep", {"60"}));
      ASSERT_TRUE(p.isOk());
      pids.push_back(*p);
    }
  }
  for (pid_t p : pids) EXPECT_TRUE(processGone(p)) << p;
  EXPECT_EQ(notices_.pending(), 2u);
}

TEST_F(LauncherTest, StartFromAShortLivedThreadSurvivesTheThread) {
  auto l = makeLauncher();
  ASSERT_TRUE(l);
  Result<pid_t> pid = Status::internal("not started");
  std::thread([&] { pid = l->start(makeNode("worker-0", "worker", 0, "sleep", {"60"})); })
      .join();
  ASSERT_TRUE(pid.isOk());
  // PR_SET_PDEATHSIG is per forking thread: had the short-lived thread forked, the node would die now.
  auto w = l->waitExit("worker-0", deadlineIn(300ms));
  EXPECT_EQ(w.status().code(), StatusCode::kTimeout);
  EXPECT_TRUE(l->running("worker-0"));
}

TEST_F(LauncherTest, NodesDieWithTheirLauncher) {
  std::filesystem::create_directories(log_dir_);
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  std::vector<std::string> env_strings = {"CHAOSBED_TEST_HELPER=middle", "CHAOSBED_TEST_LOGDIR=" + log_dir_.string()};
  for (char** e = environ; *e; ++e) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char* argv[] = {self.data(), nullptr};
  pid_t middle = -1;
  ASSERT_EQ(::posix_spawn(&middle, self.c_str(), &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);

  pollfd pfd{fds[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 10000), 1) << "the middle launcher did not report its node";
  pid_t grandchild = -1;
  ASSERT_EQ(::read(fds[0], &grandchild, sizeof grandchild), static_cast<ssize_t>(sizeof grandchild));
  ::close(fds[0]);
  ASSERT_GT(grandchild, 0);
  EXPECT_FALSE(processGone(grandchild));

  ASSERT_EQ(::kill(middle, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(middle, &status, 0), middle);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(awaitGone(grandchild, 2000ms)) << "node " << grandchild << " outlived its launcher";
}

}  // namespace
}  // namespace chaosbed
