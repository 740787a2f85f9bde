// The chaos actuators on real child processes: kill, preempt with grace, pause (freezer and SIGSTOP),
// slow (cgroup CPU quota, measured), revert on stop, and tbf on a real veth in a network namespace.

#include <fcntl.h>
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

#include "chaos/actuators/heal.h"
#include "chaos/actuators/link.h"
#include "chaos/controller.h"
#include "chaos/local_cluster.h"

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

// A veth pair with one end in a fresh network namespace; removed in the destructor.
struct VethNetns {
  std::string ns, host_dev, ns_dev;
  bool ok = false;
  std::string why;
  VethNetns() {
    const std::string id = std::to_string(::getpid() % 100000);
    ns = "chaosbed-t" + id;
    host_dev = "cbh" + id;
    ns_dev = "cbn" + id;
    Status s = runCommand({"ip", "netns", "add", ns}, 10);
    if (!s.isOk()) {
      why = s.toString();
      return;
    }
    s = runCommand({"ip", "link", "add", host_dev, "type", "veth", "peer", "name", ns_dev}, 10);
    if (s.isOk()) s = runCommand({"ip", "link", "set", ns_dev, "netns", ns}, 10);
    if (s.isOk()) s = runCommand({"ip", "link", "set", host_dev, "up"}, 10);
    if (s.isOk()) s = runCommand({"ip", "netns", "exec", ns, "ip", "link", "set", ns_dev, "up"}, 10);
    ok = s.isOk();
    why = s.toString();
  }
  ~VethNetns() {
    (void)runCommand({"ip", "link", "del", host_dev}, 10, {"Cannot find device"});
    (void)runCommand({"ip", "netns", "del", ns}, 10, {"No such file"});
  }
};

std::string qdiscs(const std::string& ns, const std::string& dev) {
  int fds[2];
  if (::pipe(fds) != 0) return "";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    if (ns.empty()) ::execlp("tc", "tc", "qdisc", "show", "dev", dev.c_str(), nullptr);
    else ::execlp("ip", "ip", "netns", "exec", ns.c_str(), "tc", "qdisc", "show", "dev", dev.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return out;
}

class VethCluster : public Cluster {
 public:
  VethCluster(std::string dev, std::string ns) : dev_(std::move(dev)), ns_(std::move(ns)) {}
  std::vector<NodeInfo> nodes() const override { return makeNodes({{"worker", 1}, {"ps", 1}}); }
  Result<pid_t> processGroup(const std::string&) override { return Status::notFound("no processes"); }
  NodeCgroup* cgroup(const std::string&) override { return nullptr; }
  double cpuQuota(const std::string&) override { return 0; }
  std::string netDevice(const std::string& node) override { return node == "worker-0" ? dev_ : ""; }
  std::string netNamespace(const std::string& node) override { return node == "worker-0" ? ns_ : ""; }
  Status replace(const std::string&) override { return Status::ok(); }

 private:
  std::string dev_, ns_;
};

TEST_F(ChaosActuators, TbfCapsAVethAndRevertRemovesIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "tc qdisc needs root";
  VethNetns net;
  if (!net.ok) GTEST_SKIP() << "cannot create a veth pair in a network namespace: " << net.why;
  for (const bool inside : {false, true}) {
    const std::string ns = inside ? net.ns : "", dev = inside ? net.ns_dev : net.host_dev;
    VethCluster cluster(dev, ns);
    TbfLinkActuator act(cluster);
    Fault f;
    f.name = "cap";
    f.kind = FaultKind::kLink;
    f.targets = {"worker-0"};
    f.peers = {"ps-0"};
    f.params.bandwidth_mbps = 10;
    ASSERT_TRUE(act.checkAvailable(f, "worker-0").isOk());
    Fault lat = f;
    lat.params.latency_ms = 5;
    EXPECT_EQ(act.checkAvailable(lat, "worker-0").code(), StatusCode::kUnavailable);  // no netem here
    Result<std::vector<HealRecord>> rec = act.prepare(f, "worker-0");
    ASSERT_TRUE(rec.isOk());
    ASSERT_TRUE(act.apply(f, "worker-0").isOk());
    ASSERT_TRUE(act.apply(f, "worker-0").isOk());  // idempotent
    std::string q = qdiscs(ns, dev);
    EXPECT_NE(q.find("tbf"), std::string::npos) << q;
    EXPECT_NE(q.find("rate 10Mbit"), std::string::npos) << q;
    ASSERT_TRUE(act.revert(f, "worker-0").isOk());
    ASSERT_TRUE(act.revert(f, "worker-0").isOk());  // idempotent
    EXPECT_EQ(qdiscs(ns, dev).find("tbf"), std::string::npos);
    // The heal record undoes an apply without the actuator (what the agent does after a crash).
    ASSERT_TRUE(act.apply(f, "worker-0").isOk());
    ASSERT_TRUE(heal((*rec)[0]).isOk());
    EXPECT_EQ(qdiscs(ns, dev).find("tbf"), std::string::npos);
    ASSERT_TRUE(heal((*rec)[0]).isOk());  // nothing left: still OK
  }
}

}  // namespace
}  // namespace chaosbed::chaos
