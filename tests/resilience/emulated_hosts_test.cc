// Emulated hosts (cluster.hosts: {netns: N}, core/isolation/emulated_hosts.h): nodes really run in network
// namespaces of their own and talk across the bridge, both strategies reach the target through a kill, a
// pause and a link fault between two hosts, and a controller SIGKILLed mid-run leaves no namespace, no
// device and no process behind (the kernel frees the namespaces with their last reference).

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "chaos/host_state.h"
#include "core/isolation/cgroup.h"
#include "core/data/dataset.h"
#include "core/isolation/emulated_hosts.h"
#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Why emulated hosts cannot be made here, or "" when they can.
std::string whyNoNamespaces() {
  if (::geteuid() != 0) return "needs root (network namespaces)";
  auto probe = EmulatedHosts::create(1);
  return probe.isOk() ? "" : probe.status().toString();
}

// The network namespace (its inode) of a process, or 0 when it is gone.
ino_t netnsOf(pid_t pid) {
  struct stat st {};
  return ::stat(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), &st) == 0 ? st.st_ino : 0;
}

// Every network namespace some process is in or holds a descriptor of.
std::set<ino_t> namespacesInUse() {
  std::set<ino_t> out;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const std::string name = p.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    struct stat st {};
    if (::stat((p.path() / "ns/net").c_str(), &st) == 0) out.insert(st.st_ino);
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(p.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      const std::string target = fs::read_symlink(fd.path(), link_ec).string();
      if (target.starts_with("net:[")) out.insert(ino_t(std::stoull(target.substr(5))));
    }
  }
  return out;
}

std::string rootLinks() {
  testing::Command ip({"ip", "-o", "link", "show"});
  (void)ip.wait(deadlineIn(10s));
  std::string names;
  std::istringstream lines(ip.output());
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (colon != std::string::npos) names += line.substr(colon + 2, line.find(':', colon + 2) - colon - 2) + "\n";
  }
  return names;
}

TEST(EmulatedHostsSetup, EachHostHasItsAddressOnItsOwnDevice) {
  if (const std::string why = whyNoNamespaces(); !why.empty()) GTEST_SKIP() << why;
  auto hosts = EmulatedHosts::create(3);
  ASSERT_TRUE(hosts.isOk()) << hosts.status().toString();
  std::set<std::string> addresses;
  for (int i = 0; i < 3; ++i) addresses.insert((*hosts)->address(i));
  EXPECT_EQ(addresses.size(), 3u) << "hosts share an address";
  EXPECT_EQ(addresses.count((*hosts)->fabricAddress()), 0u);
  // From host 2, the bridge and host 0 answer (a TCP connect to a port nobody listens on is refused, which
  // needs the packet to get there and back; an unreachable address times out instead).
  const std::string probe = "exec 3<>/dev/tcp/" + (*hosts)->address(0) + "/9 || true";
  EXPECT_TRUE((*hosts)->runInHost(2, {"bash", "-c", "timeout 3 bash -c '" + probe + "' 2>&1 | grep -q refused"}).isOk())
      << "host 2 cannot reach host 0 across the bridge";
  // A host's own namespace holds its address and nothing of the others'.
  EXPECT_TRUE((*hosts)->runInHost(1, {"bash", "-c", "ip -o addr show dev eth0 | grep -q ' " + (*hosts)->address(1) + "/24'"}).isOk());
  EXPECT_FALSE((*hosts)->runInHost(1, {"bash", "-c", "ip -o addr | grep -q ' " + (*hosts)->address(0) + "/'"}).isOk());
}

// Fashion-MNIST to 0.8 takes a few seconds, so every fault lands before the target: a kill (replaced after
// 1 s), a pause, and link faults between hosts: added latency between worker-0's host and worker-3's (the
// nodes' shapers: no netem here), a bandwidth cap between worker-1's and worker-2's and a short partition
// between worker-2's and worker-3's (both in the hosts' kernels).
const char* const kReachSpec = R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: netns}
seed: 11
cluster: {workers: 4, servers: 1, cpu_per_node: 0.4, hosts: {netns: 4, placement: {ps-0: 2}}}
model: {kind: mlp, layers: [784, 64, 10]}
data: {dataset: fashion-mnist}
training: {batch_per_worker: 64, learning_rate: 0.05, momentum: 0.9, target_accuracy: 0.8, time_limit_s: 60,
           eval_interval_s: 0.5, checkpoint_interval_s: 2}
strategies: [{name: mirrored}, {name: parameter_server}]
chaos:
  faults:
    - {name: kill, action: kill, target: {role: worker, index: 1}, at_s: 0.5, restart_after: {fixed_s: 1}}
    - {name: pause, action: pause, target: {role: worker, index: 2}, at_s: 1, duration_s: 1}
    - {name: link, action: link, target: {between: [{role: worker, index: 0}, {role: worker, index: 3}]},
       at_s: 1.5, duration_s: 3, params: {bandwidth_mbps: 100, latency_ms: 2}}
    - {name: cap, action: link, target: {between: [{role: worker, index: 1}, {role: worker, index: 2}]},
       at_s: 0.6, duration_s: 2, params: {bandwidth_mbps: 50}}
    - {name: cut, action: link, target: {between: [{role: worker, index: 2}, {role: worker, index: 3}]},
       at_s: 0.8, duration_s: 0.4, params: {partition: true, via: kernel}}
)";

// Never reaches its target (the learning rate is tiny): it is killed mid-run, a node paused.
const char* const kKillSpec = R"(apiVersion: chaosbed/v1alpha1
kind: Experiment
metadata: {name: netns-kill}
seed: 11
cluster: {workers: 4, servers: 1, cpu_per_node: 0.3, hosts: {netns: 4}}
model: {kind: mlp, layers: [32, 32, 4]}
data: {dataset: synthetic, samples: 8192, dims: 32, classes: 4}
training: {batch_per_worker: 32, learning_rate: 1.0e-6, target_accuracy: 0.99, time_limit_s: 120,
           eval_interval_s: 0.5}
strategies: [{name: mirrored}]
chaos:
  faults:
    - {name: pause, action: pause, target: {role: worker, index: 2}, at_s: 1, duration_s: 100}
)";

// Waits until the run's nodes are up (at least `count` processes) and returns their namespaces.
std::map<pid_t, ino_t> nodeNamespaces(const std::string& out, size_t count, Deadline deadline) {
  std::map<pid_t, ino_t> ns;
  while (SteadyClock::now() < deadline) {
    ns.clear();
    for (pid_t pid : testing::processesMentioning(out + "/"))
      if (ino_t ino = netnsOf(pid); ino != 0) ns[pid] = ino;
    if (ns.size() >= count) break;
    std::this_thread::sleep_for(50ms);
  }
  return ns;
}

// argv of a process, or empty when it is gone.
std::vector<std::string> argvOf(pid_t pid) {
  std::istringstream in(testing::readFile("/proc/" + std::to_string(pid) + "/cmdline"));
  std::vector<std::string> argv;
  for (std::string arg; std::getline(in, arg, '\0');) argv.push_back(arg);
  return argv;
}

pid_t parentOf(pid_t pid) {
  const std::string text = testing::readFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(text.substr(close + 2));
  char state;
  pid_t parent = 0;
  rest >> state >> parent;
  return parent;
}

TEST(EmulatedHostsRun, BothStrategiesReachTheTargetAcrossFourHosts) {
  if (const std::string why = whyNoNamespaces(); !why.empty()) GTEST_SKIP() << why;
  if (!fs::exists(std::string(data::kFashionMnistDir) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/install-deps.sh installs it)";
  const std::string dir = testing::makeTempDir("netns-run");
  std::ofstream(dir + "/spec.yaml") << kReachSpec;
  const std::string out = dir + "/out";
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  // The first strategy's nodes: on four hosts, none in this test's namespace.
  const auto ns = nodeNamespaces(out, 9, deadlineIn(60s));  // 5 nodes and 4 host agents
  std::set<ino_t> distinct;
  for (const auto& [pid, ino] : ns) distinct.insert(ino);
  EXPECT_EQ(distinct.size(), 4u) << "5 nodes and their agents on 4 emulated hosts";
  EXPECT_EQ(distinct.count(netnsOf(::getpid())), 0u) << "a node runs in the controller's network namespace";
  // Each host's agent owns the nodes of its host: one agent per host, in that host's namespace.
  // (A node between its fork and its exec still shows its agent's command line: agents are the controller's
  // children.)
  std::map<pid_t, ino_t> agents;
  for (const auto& [pid, ino] : ns)
    if (const auto argv = argvOf(pid); argv.size() > 1 && argv[1] == "agent" && parentOf(pid) == run.pid())
      agents[pid] = ino;
  EXPECT_EQ(agents.size(), 4u) << "one agent per emulated host";
  for (const auto& [pid, ino] : ns) {
    const auto argv = argvOf(pid);
    if (argv.size() < 2 || argv[1] == "agent") continue;
    const auto agent = agents.find(parentOf(pid));
    ASSERT_NE(agent, agents.end()) << argv[1] << " (pid " << pid << ") is not a child of a host agent";
    EXPECT_EQ(agent->second, ino) << "a node runs outside its agent's host";
  }
  auto code = run.wait(deadlineIn(240s));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output();

  // The resolved spec in the results parses back (it once said `hosts: netns`, which the parser refuses).
  testing::Command validate({testing::chaosbedBinary(), "validate", out + "/spec.yaml"});
  EXPECT_EQ(validate.wait(deadlineIn(30s)), 0) << validate.output();

  const auto summary = nlohmann::json::parse(testing::readFile(out + "/summary.json"));
  // Each host's agent, started by the controller in its namespace, reaches the store from its own address.
  ASSERT_TRUE(summary["hosts"].is_array()) << summary.dump();
  ASSERT_EQ(summary["hosts"].size(), 4u) << summary["hosts"].dump();
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(summary["hosts"][h]["address"], "10.200.0." + std::to_string(h + 2)) << summary["hosts"].dump();
    EXPECT_EQ(summary["hosts"][h]["device"], "eth0");
    EXPECT_EQ(summary["hosts"][h]["launched_by"], "the controller");
  }
  for (const char* label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const auto& s = summary["strategies"][label];
    EXPECT_TRUE(s["tta_seconds"].is_number()) << "did not reach the target: " << s.dump();
    EXPECT_EQ(s["failures"].get<int>(), 1) << "the kill, and nothing else";
    const auto& hosts = s["host_addresses"];
    ASSERT_TRUE(hosts.is_object()) << s.dump();
    EXPECT_EQ(hosts["worker-0"], "10.200.0.2");
    EXPECT_EQ(hosts["worker-3"], "10.200.0.5");
    // The placement puts ps-0 beside worker-2; round-robin over the rest puts the evaluator beside worker-0.
    EXPECT_EQ(hosts["evaluator-0"], hosts["worker-0"]) << "round-robin: the node after the workers shares the first host";
    if (std::string(label) == "parameter_server") {
    EXPECT_EQ(hosts["ps-0"], "10.200.0.4");
  }
    EXPECT_EQ(s["faults_applied"].get<int>(), 8) << "the kill, the pause and three link faults on both their ends";
  }
  // Who carried out each link fault: the kernel for the cap and the partition, the shapers for the latency.
  std::map<std::string, std::set<std::string>> via;
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));
  std::ifstream events(out + "/events.jsonl");
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("type", "") == "chaos.applied")
      via[e["name"].get<std::string>()].insert(e["params"]["via"].get<std::string>());
  }
  EXPECT_EQ(via["link"], std::set<std::string>{"shaper"});
  EXPECT_EQ(via["cap"], std::set<std::string>{"kernel"});
  EXPECT_EQ(via["cut"], std::set<std::string>{"kernel"});
  // and the hosts' agents for the kill and the pause.
  EXPECT_EQ(via["kill"], std::set<std::string>{"host-agent"});
  EXPECT_EQ(via["pause"], std::set<std::string>{"host-agent"});
  fs::remove_all(dir);
}

TEST(EmulatedHostsRun, AControllerKilledMidRunLeavesNoNamespaceDeviceOrProcess) {
  if (const std::string why = whyNoNamespaces(); !why.empty()) GTEST_SKIP() << why;
  const std::string links_before = rootLinks();
  const std::string dir = testing::makeTempDir("netns-kill");
  std::ofstream(dir + "/spec.yaml") << kKillSpec;
  const std::string out = dir + "/out";
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  const auto owner = chaos::ownerName(run.pid());
  const auto ns = nodeNamespaces(out, 9, deadlineIn(60s));  // 5 nodes and 4 host agents
  ASSERT_GE(ns.size(), 9u) << "the nodes never started:\n" << run.output();
  std::set<ino_t> used;
  for (const auto& [pid, ino] : ns) used.insert(ino);
  ASSERT_EQ(used.size(), 4u) << "the nodes are not on 4 emulated hosts";
  // Mid-run, into the pause (a frozen node must die too).
  std::this_thread::sleep_for(2000ms);
  run.signal(SIGKILL);
  ASSERT_TRUE(run.wait(deadlineIn(10s)).has_value());

  // The nodes die with the controller (PR_SET_PDEATHSIG; a frozen one once its group is removed, below).
  testing::Command heal({testing::chaosbedBinary(), "chaos", "heal"});
  auto rc = heal.wait(deadlineIn(30s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0) << heal.output();
  for (const Deadline d = deadlineIn(10s); !testing::processesMentioning(out + "/").empty() && SteadyClock::now() < d;)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(testing::processesMentioning(out + "/").empty()) << "node processes of the killed run are left";
  if (owner) {
    auto groups = listGroups();
    if (groups.isOk()) {
      for (const std::string& g : *groups) EXPECT_FALSE(g.starts_with(*owner + "-")) << "cgroup group left: " << g;
    }
  }
  const std::set<ino_t> in_use = namespacesInUse();
  for (ino_t ino : used) EXPECT_EQ(in_use.count(ino), 0u) << "network namespace " << ino << " of the run is still held";
  EXPECT_EQ(rootLinks(), links_before) << "devices appeared or went in this namespace";
  fs::remove_all(dir);
}

// A lost host (its agent SIGKILLed while its worker is frozen): the worker cannot be restarted there, so the
// run stops at once with exit 4 and the reason (it used to retry the restart every tick until its time
// limit), keeps what it measured, and leaves nothing frozen or running behind.
TEST(EmulatedHostsRun, ALostHostEndsTheRunWithExit4AndItsReason) {
  if (const std::string why = whyNoNamespaces(); !why.empty()) GTEST_SKIP() << why;
  const std::string dir = testing::makeTempDir("netns-lost-host");
  std::ofstream(dir + "/spec.yaml") << kKillSpec;
  const std::string out = dir + "/out";
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  const auto owner = chaos::ownerName(run.pid());
  ASSERT_GE(nodeNamespaces(out, 9, deadlineIn(60s)).size(), 9u) << "the nodes never started:\n" << run.output();
  // The agent of worker-2's host (placement puts worker i on host i here), once worker-2 is frozen.
  ASSERT_TRUE(run.waitForLine("faults 1 active", deadlineIn(30s))) << run.output();
  pid_t agent = 0;
  for (pid_t pid : testing::processesMentioning(out + "/")) {
    const std::string cmdline = testing::readFile("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find(std::string("agent\0", 6)) != std::string::npos &&
        cmdline.find(std::string("--index=2\0", 10)) != std::string::npos)
      agent = pid;
  }
  ASSERT_GT(agent, 0) << "no agent of host 2";
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  const auto killed = SteadyClock::now();
  auto code = run.wait(deadlineIn(60s));
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 4) << run.output();
  EXPECT_LT(SteadyClock::now() - killed, 20s) << "the run went on long after the host was lost";
  EXPECT_NE(run.output().find("host_lost"), std::string::npos) << run.output();
  const auto summary = nlohmann::json::parse(testing::readFile(out + "/summary.json"));
  EXPECT_TRUE(summary["strategies"]["mirrored"]["stop_reason"].get<std::string>().starts_with("host_lost"))
      << summary.dump(2);
  // The controller heals what the lost agent applied (the hosts share this machine): nothing of the run is
  // left running or frozen, before any `chaos heal`.
  for (const Deadline d = deadlineIn(10s); !testing::processesMentioning(out + "/").empty() && SteadyClock::now() < d;)
    std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(testing::processesMentioning(out + "/").empty()) << "processes of the run are left";
  if (owner) {
    auto groups = listGroups();
    if (groups.isOk())
      for (const std::string& g : *groups) EXPECT_FALSE(g.starts_with(*owner + "-")) << "cgroup group left: " << g;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed
