// The chaos actuators on real child processes: kill, preempt with grace, pause (freezer and SIGSTOP),
// slow (cgroup CPU quota, measured), revert on stop, and link faults between emulated hosts in
// their kernels (htb, blackhole routes).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "chaos/actuators/heal.h"
#include "chaos/actuators/link.h"
#include "chaos/controller.h"
#include "chaos/local_cluster.h"
#include "core/isolation/emulated_hosts.h"
#include "core/isolation/command.h"
#include "transports/bootstrap/net.h"

namespace chaosbed::chaos {
namespace {

using namespace std::chrono_literals;

int64_t monoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
}

// Measurement windows (not synchronisation): how much a node progresses or computes over a fixed time.
void waitFor(double s) {
  timespec ts{static_cast<time_t>(s), static_cast<long>((s - static_cast<time_t>(s)) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int64_t cpuNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/schedstat");
  int64_t ns = -1;
  in >> ns;
  return ns;
}

// One shared page of progress counters, one per node index, visible to the forked nodes.
struct Counters {
  Counters() {
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    c = static_cast<std::atomic<uint64_t>*>(p);
  }
  ~Counters() { ::munmap(c, 4096); }
  std::atomic<uint64_t>* c;
};

Plan onePlan(FaultKind kind, const std::string& node, FaultParams params = {}, std::optional<double> duration = {},
             double at = 0.0) {
  Plan p;
  Fault f;
  f.name = "t";
  f.kind = kind;
  f.targets = {node};
  f.params = params;
  f.duration_s = duration;
  f.at_s = at;
  p.faults.push_back(f);
  p.actions.push_back({at, ActionType::kApply, 0, node, std::nullopt});
  if (kind == FaultKind::kPreempt) p.actions.push_back({at + params.grace_s, ActionType::kEscalate, 0, node, std::nullopt});
  if (duration) p.actions.push_back({at + *duration, ActionType::kRevert, 0, node, std::nullopt});
  return p;
}

class ChaosActuators : public ::testing::Test {
 protected:
  void requireCgroups() {
    CgroupSupport s = probeCgroups();
    if (!s.cpu || !s.freezer) GTEST_SKIP() << "cgroup cpu/freezer not usable here: " << s.why_not;
  }
  std::string group() { return "chaos-it-" + std::to_string(::getpid()); }
  Counters counters;
};

TEST_F(ChaosActuators, KillSigkillsTheNode) {
  auto* c = counters.c;
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [c](const NodeInfo&, int) {
    for (;;) c[0].fetch_add(1);
  }, {});
  ASSERT_TRUE(cluster.isOk()) << cluster.status().toString();
  SignalActuator act(**cluster);
  Plan p = onePlan(FaultKind::kKill, "worker-0");
  ASSERT_TRUE(act.apply(p.faults[0], "worker-0").isOk());
  Result<int> st = (*cluster)->waitExit("worker-0", 5);
  ASSERT_TRUE(st.isOk()) << st.status().toString();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
  // Idempotent: the node is gone now.
  EXPECT_EQ(act.apply(p.faults[0], "worker-0").code(), StatusCode::kNotFound);
  // And replace brings a new incarnation.
  ASSERT_TRUE((*cluster)->replace("worker-0").isOk());
  EXPECT_EQ((*cluster)->incarnation("worker-0"), 1);
  EXPECT_GT((*cluster)->pid("worker-0"), 0);
}

TEST_F(ChaosActuators, PreemptGivesNoticeThenKillsAfterGrace) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const int wfd = report[1];
  static int notice_fd;
  notice_fd = wfd;
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [](const NodeInfo&, int) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { (void)!::write(notice_fd, "T", 1); };  // the notice; keep running
    ::sigaction(SIGTERM, &sa, nullptr);
    for (;;) ::pause();
  }, {});
  ASSERT_TRUE(cluster.isOk());
  ::close(report[1]);
  FaultParams params;
  params.grace_s = 0.3;
  Plan p = onePlan(FaultKind::kPreempt, "worker-0", params, std::nullopt, 0.05);
  ActuatorSet set(**cluster, {});
  Controller ctl(std::move(p), **cluster, set.map(), {});
  ASSERT_TRUE(ctl.start().isOk());
  pollfd pf{report[0], POLLIN, 0};
  ASSERT_EQ(::poll(&pf, 1, 5000), 1) << "no SIGTERM notice within 5 s";
  char ch = 0;
  ASSERT_EQ(::read(report[0], &ch, 1), 1);
  EXPECT_EQ(ch, 'T');
  const int64_t notice = monoNs();
  Result<int> st = (*cluster)->waitExit("worker-0", 5);
  const double lived = static_cast<double>(monoNs() - notice) / 1e9;
  ASSERT_TRUE(st.isOk());
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
  EXPECT_GE(lived, 0.25) << "killed before the grace period ended";
  EXPECT_LT(lived, 1.5);
  ASSERT_TRUE(ctl.stop().isOk());
  ::close(report[0]);
}

TEST_F(ChaosActuators, PauseWithFreezerStopsProgressAndResumes) {
  requireCgroups();
  auto* c = counters.c;
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [c](const NodeInfo&, int) {
    for (;;) c[0].fetch_add(1);
  }, {group(), 0.5});
  ASSERT_TRUE(cluster.isOk()) << cluster.status().toString();
  ActuatorSet set(**cluster, {.pause_mode = PauseMode::kFreezer});
  Controller ctl(onePlan(FaultKind::kPause, "worker-0"), **cluster, set.map(), {});
  ASSERT_TRUE(ctl.start().isOk());
  ASSERT_TRUE(ctl.waitProcessed(0, 5s));
  EXPECT_EQ(ctl.activeFaults(FaultKind::kPause), 1);
  EXPECT_TRUE(*(*cluster)->cgroup("worker-0")->isFrozen());
  const uint64_t p0 = c[0].load();
  waitFor(0.3);
  EXPECT_EQ(c[0].load(), p0) << "a frozen node made progress";
  ASSERT_TRUE(ctl.stop().isOk());  // reverts: thaw
  EXPECT_FALSE(*(*cluster)->cgroup("worker-0")->isFrozen());
  waitFor(0.3);
  EXPECT_GT(c[0].load(), p0) << "no progress after the pause was reverted";
  EXPECT_EQ(ctl.leakCount(), 0);
}

TEST_F(ChaosActuators, PauseWithSigstopStopsProgressAndResumes) {
  auto* c = counters.c;
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [c](const NodeInfo&, int) {
    for (;;) c[0].fetch_add(1);
  }, {});
  ASSERT_TRUE(cluster.isOk());
  ActuatorSet set(**cluster, {.pause_mode = PauseMode::kAuto});  // no cgroup: falls back to SIGSTOP
  Controller ctl(onePlan(FaultKind::kPause, "worker-0", {}, 0.4), **cluster, set.map(), {});
  ASSERT_TRUE(ctl.start().isOk());
  ASSERT_TRUE(ctl.waitProcessed(0, 5s));
  // SIGSTOP is asynchronous: wait until the node (our child) has actually stopped. WNOWAIT leaves the state
  // change to whoever else waits for it.
  const auto node = static_cast<id_t>((*cluster)->pid("worker-0"));
  siginfo_t info{};
  int rc;
  while ((rc = ::waitid(P_PID, node, &info, WSTOPPED | WEXITED | WNOWAIT)) < 0 && errno == EINTR) {
  }
  ASSERT_EQ(rc, 0) << std::strerror(errno);
  ASSERT_EQ(info.si_code, CLD_STOPPED);
  const uint64_t p0 = c[0].load();
  waitFor(0.2);
  EXPECT_EQ(c[0].load(), p0) << "a stopped node made progress";
  ASSERT_TRUE(ctl.waitProcessed(0.4, 5s));  // the revert (SIGCONT) at 0.4 s
  waitFor(0.2);
  EXPECT_GT(c[0].load(), p0);
  ASSERT_TRUE(ctl.stop().isOk());
}

TEST_F(ChaosActuators, SlowHoldsTheCpuFractionAndStopRestoresTheQuota) {
  requireCgroups();
  auto* c = counters.c;
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [c](const NodeInfo&, int) {
    for (;;) c[0].fetch_add(1);
  }, {group(), 1.0});
  ASSERT_TRUE(cluster.isOk()) << cluster.status().toString();
  const pid_t pid = (*cluster)->pid("worker-0");
  // Baseline: how much of its 1-core quota the node gets on this (shared) machine right now.
  int64_t c0 = cpuNs(pid), t0 = monoNs();
  waitFor(0.5);
  const double baseline = static_cast<double>(cpuNs(pid) - c0) / static_cast<double>(monoNs() - t0);

  const double f = 0.3;
  FaultParams params;
  params.cpu_fraction = f;
  ActuatorSet set(**cluster, {});
  Controller ctl(onePlan(FaultKind::kSlow, "worker-0", params), **cluster, set.map(), {});
  ASSERT_TRUE(ctl.start().isOk());
  ASSERT_TRUE(ctl.waitProcessed(0, 5s));
  EXPECT_NEAR(*(*cluster)->cgroup("worker-0")->cpuLimit(), f, 1e-6);
  waitFor(0.2);
  c0 = cpuNs(pid);
  t0 = monoNs();
  waitFor(1.5);
  const double measured = static_cast<double>(cpuNs(pid) - c0) / static_cast<double>(monoNs() - t0);
  // The quota caps the node at f (+10%); it reaches f (-10%) unless the machine cannot give it that much.
  EXPECT_LE(measured, f * 1.1) << "baseline " << baseline;
  EXPECT_GE(measured, std::min(f, baseline) * 0.9) << "baseline " << baseline;
  std::printf("slow to %.2f cores: measured %.3f cores (baseline %.3f)\n", f, measured, baseline);
  ASSERT_TRUE(ctl.stop().isOk());
  EXPECT_NEAR(*(*cluster)->cgroup("worker-0")->cpuLimit(), 1.0, 1e-6);
}

TEST_F(ChaosActuators, KillOfAFrozenNodeThawsItSoItDies) {
  requireCgroups();
  auto cluster = LocalCluster::start(makeNodes({{"worker", 1}}), [](const NodeInfo&, int) {
    for (;;) ::pause();
  }, {group(), 0.5});
  ASSERT_TRUE(cluster.isOk());
  NodeCgroup* cg = (*cluster)->cgroup("worker-0");
  ASSERT_TRUE(cg->freeze().isOk());
  SignalActuator act(**cluster);
  Plan p = onePlan(FaultKind::kKill, "worker-0");
  ASSERT_TRUE(act.apply(p.faults[0], "worker-0").isOk());
  Result<int> st = (*cluster)->waitExit("worker-0", 5);
  ASSERT_TRUE(st.isOk()) << st.status().toString();
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL);
}

// ---- link faults between emulated hosts, in the hosts' kernels ----

// Runs fn on a thread inside host `h`'s network namespace.
template <typename Fn>
auto inHost(const EmulatedHosts& hosts, int h, Fn fn) -> decltype(fn()) {
  decltype(fn()) result{};
  std::thread t([&] {
    if (::setns(hosts.hostFd(h), CLONE_NEWNET) != 0) return;
    result = fn();
  });
  t.join();
  return result;
}

std::string inHostOutput(const EmulatedHosts& hosts, int h, const std::vector<std::string>& argv) {
  return inHost(hosts, h, [&] {
    std::string out;
    Status s = runCommand(argv, 10, {}, &out);
    return s.isOk() ? out : "failed: " + s.toString();
  });
}

// Sends `bytes` from host `from` to a listener on host `to`; the rate in MB/s, or -1 when no connection
// was made within a second (a partition).
double transferMBps(const EmulatedHosts& hosts, int from, int to, size_t bytes) {
  net::HostPort bound;
  auto listener = inHost(hosts, to, [&] { return std::optional(net::listenTcp({hosts.address(to), 0}, &bound)); });
  if (!listener || !listener->isOk()) return -2;
  ::fcntl((*listener)->get(), F_SETFL, 0);  // blocking: shut down below to end a wait
  std::thread sink([&] {
    const int c = ::accept4((*listener)->get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    std::vector<char> buf(1 << 16);
    while (::read(c, buf.data(), buf.size()) > 0) {}
    ::close(c);
  });
  const double rate = inHost(hosts, from, [&]() -> double {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(bound.port));
    ::inet_pton(AF_INET, hosts.address(to).c_str(), &addr.sin_addr);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    pollfd p{fd, POLLOUT, 0};
    int err = rc == 0 ? 0 : errno;
    if (rc != 0 && errno == EINPROGRESS && ::poll(&p, 1, 1000) == 1) {
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err != 0) {
      ::close(fd);
      return -1;
    }
    ::fcntl(fd, F_SETFL, 0);
    std::vector<char> chunk(1 << 16, 'x');
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::write(fd, chunk.data(), std::min(chunk.size(), bytes - sent));
      if (n <= 0) break;
      sent += size_t(n);
    }
    ::shutdown(fd, SHUT_WR);
    char c;
    while (::read(fd, &c, 1) > 0) {}  // the sink has read everything when it closes
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::close(fd);
    return double(bytes) / 1e6 / s;
  });
  ::shutdown((*listener)->get(), SHUT_RDWR);
  sink.join();
  return rate;
}

// worker-0 and worker-2 on host 0, worker-1 on host 1, ps-0 on host 2.
class HostsCluster : public Cluster {
 public:
  std::vector<NodeInfo> nodes() const override { return makeNodes({{"worker", 3}, {"ps", 1}}); }
  Result<pid_t> processGroup(const std::string&) override { return Status::notFound("no processes"); }
  NodeCgroup* cgroup(const std::string&) override { return nullptr; }
  double cpuQuota(const std::string&) override { return 0; }
  int host(const std::string& node) override {
    return node == "worker-1" ? 1 : node == "ps-0" ? 2 : 0;
  }
  Status replace(const std::string&) override { return Status::ok(); }
};

// What the shaper would be told.
class RecordingShaper : public Actuator {
 public:
  const char* name() const override { return "recording-shaper"; }
  Status checkAvailable(const Fault&, const std::string&) override { return Status::ok(); }
  Result<std::vector<HealRecord>> prepare(const Fault&, const std::string&) override { return std::vector<HealRecord>{}; }
  Status apply(const Fault& f, const std::string& node) override {
    calls.push_back("apply " + f.name + " " + node);
    return Status::ok();
  }
  Status revert(const Fault& f, const std::string& node) override {
    calls.push_back("revert " + f.name + " " + node);
    return Status::ok();
  }
  std::vector<std::string> calls;
};

Fault linkFault(uint64_t id, std::string name, std::vector<std::string> a, std::vector<std::string> b) {
  Fault f;
  f.id = id;
  f.name = std::move(name);
  f.kind = FaultKind::kLink;
  f.targets = std::move(a);
  f.peers = std::move(b);
  return f;
}

class HostLink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "emulated hosts and tc need root";
    auto h = EmulatedHosts::create(3);
    ASSERT_TRUE(h.isOk()) << h.status().toString();
    hosts_ = std::move(h).value();
  }
  std::unique_ptr<EmulatedHosts> hosts_;
  HostsCluster cluster_;
  RecordingShaper shaper_;
};

TEST_F(HostLink, ABandwidthCapShapesTrafficToThePeerHostOnlyAndOverlappingCapsTakeTheSmallest) {
  HostLinkActuator act(cluster_, *hosts_, shaper_);
  Fault slow = linkFault(1, "slow", {"worker-0"}, {"worker-1"});
  slow.params.bandwidth_mbps = 40;
  Fault slower = linkFault(2, "slower", {"worker-0"}, {"worker-1"});
  slower.params.bandwidth_mbps = 16;
  ASSERT_TRUE(act.checkAvailable(slow, "worker-0").isOk());
  EXPECT_STREQ(act.via(slow), "kernel");
  const double before = transferMBps(*hosts_, 0, 1, 8 << 20);
  // 12 MB/s: more than twice the largest cap below (40 Mbit/s = 5 MB/s); unshaped, it is hundreds of times that.
  ASSERT_GT(before, 12.0) << "unshaped host-to-host TCP is far faster than the caps below";

  ASSERT_TRUE(act.apply(slow, "worker-0").isOk());
  ASSERT_TRUE(act.apply(slow, "worker-0").isOk());  // idempotent
  EXPECT_NE(inHostOutput(*hosts_, 0, {"tc", "class", "show", "dev", "eth0"}).find("rate 40Mbit"), std::string::npos);
  ASSERT_TRUE(act.apply(slower, "worker-0").isOk());
  const std::string classes = inHostOutput(*hosts_, 0, {"tc", "class", "show", "dev", "eth0"});
  EXPECT_NE(classes.find("rate 16Mbit"), std::string::npos) << classes;
  // 16 Mbit/s is 2 MB/s: 3 MB take 1.5 s (a burst aside). Allow twice the rate: a cap only slows.
  const double capped = transferMBps(*hosts_, 0, 1, 3 << 20);
  EXPECT_GT(capped, 0);
  EXPECT_LT(capped, 4.0) << "host 0 -> host 1 is capped at 16 Mbit/s";
  std::cout << "host 0 -> host 1: " << before << " MB/s unshaped, " << capped << " MB/s under a 16 Mbit/s cap\n";
  // Other peers of host 0, and the other direction (the fault was applied on worker-0's side only), are not.
  EXPECT_GT(transferMBps(*hosts_, 0, 2, 8 << 20), 12.0);
  EXPECT_GT(transferMBps(*hosts_, 1, 0, 8 << 20), 12.0);
  EXPECT_TRUE(shaper_.calls.empty());

  ASSERT_TRUE(act.revert(slower, "worker-0").isOk());
  EXPECT_NE(inHostOutput(*hosts_, 0, {"tc", "class", "show", "dev", "eth0"}).find("rate 40Mbit"), std::string::npos);
  ASSERT_TRUE(act.revert(slow, "worker-0").isOk());
  ASSERT_TRUE(act.revert(slow, "worker-0").isOk());  // idempotent
  EXPECT_EQ(inHostOutput(*hosts_, 0, {"tc", "class", "show", "dev", "eth0"}), "");
  EXPECT_EQ(inHostOutput(*hosts_, 0, {"tc", "filter", "show", "dev", "eth0"}), "");
  EXPECT_GT(transferMBps(*hosts_, 0, 1, 8 << 20), 12.0);
}

TEST_F(HostLink, APartitionCutsBothDirectionsBetweenTheHostsOnlyAndItsRevertHealsThem) {
  HostLinkActuator act(cluster_, *hosts_, shaper_);
  Fault cut = linkFault(1, "cut", {"worker-0"}, {"worker-1"});
  cut.params.partition = true;
  ASSERT_TRUE(act.checkAvailable(cut, "worker-0").isOk());
  ASSERT_TRUE(act.apply(cut, "worker-0").isOk());
  ASSERT_TRUE(act.apply(cut, "worker-1").isOk());
  EXPECT_EQ(transferMBps(*hosts_, 0, 1, 1 << 16), -1);
  EXPECT_EQ(transferMBps(*hosts_, 1, 0, 1 << 16), -1);
  EXPECT_GT(transferMBps(*hosts_, 0, 2, 1 << 16), 0);  // host 2 is not part of it
  EXPECT_GT(transferMBps(*hosts_, 2, 1, 1 << 16), 0);
  ASSERT_TRUE(act.revert(cut, "worker-0").isOk());
  EXPECT_EQ(inHostOutput(*hosts_, 0, {"ip", "route", "show"}).find("blackhole"), std::string::npos);
  EXPECT_EQ(transferMBps(*hosts_, 0, 1, 1 << 16), -1);  // worker-1's side still drops the answers
  ASSERT_TRUE(act.revert(cut, "worker-1").isOk());
  EXPECT_GT(transferMBps(*hosts_, 0, 1, 1 << 16), 0);
  EXPECT_GT(transferMBps(*hosts_, 1, 0, 1 << 16), 0);
  EXPECT_EQ(inHostOutput(*hosts_, 1, {"ip", "route", "show"}).find("blackhole"), std::string::npos);
}

TEST_F(HostLink, WhatTheKernelCannotDoGoesToTheShaperOrIsRefusedWhenTheKernelIsAskedFor) {
  HostLinkActuator act(cluster_, *hosts_, shaper_);
  Fault latency = linkFault(1, "latency", {"worker-0"}, {"worker-1"});
  latency.params.latency_ms = 5;
  Fault same_host = linkFault(2, "same-host", {"worker-0"}, {"worker-1", "worker-2"});
  same_host.params.bandwidth_mbps = 10;
  Fault asked_shaper = linkFault(3, "asked-shaper", {"worker-0"}, {"worker-1"});
  asked_shaper.params.bandwidth_mbps = 10;
  asked_shaper.params.via = FaultParams::Via::kShaper;
  for (const Fault* f : {&latency, &same_host, &asked_shaper}) {
    EXPECT_STREQ(act.via(*f), "shaper") << f->name;
    ASSERT_TRUE(act.checkAvailable(*f, "worker-0").isOk()) << f->name;
    ASSERT_TRUE(act.apply(*f, "worker-0").isOk());
    ASSERT_TRUE(act.revert(*f, "worker-0").isOk());
  }
  EXPECT_EQ(shaper_.calls, (std::vector<std::string>{"apply latency worker-0", "revert latency worker-0",
                                                      "apply same-host worker-0", "revert same-host worker-0",
                                                      "apply asked-shaper worker-0", "revert asked-shaper worker-0"}));
  EXPECT_EQ(inHostOutput(*hosts_, 0, {"tc", "class", "show", "dev", "eth0"}), "");
  Fault kernel = same_host;
  kernel.params.via = FaultParams::Via::kKernel;
  Status s = act.checkAvailable(kernel, "worker-0");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("worker-0 and worker-2 share host 0"), std::string::npos) << s.toString();
}

}  // namespace
}  // namespace chaosbed::chaos
