// Host agents (chaos/agent): real `chaosbed agent` processes that own real node processes, ordered through a
// real authenticated store. Two "hosts" share this machine's network namespace here; the emulated-host runs
// (tests/resilience/emulated_hosts_test.cc) put each agent in a namespace of its own.

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <mutex>
#include <set>
#include <thread>

#include "chaos/agent/host_agents.h"
#include "chaos/agent/protocol.h"
#include "tests/testing/command.h"
#include "transports/bootstrap/store.h"

namespace chaosbed::chaos {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// Field 3 (state) and field 4 (parent) of /proc/<pid>/stat; state 0 when the process is gone.
struct ProcStat {
  char state = 0;
  pid_t parent = 0;
};
ProcStat procStat(pid_t pid) {
  const std::string text = testing::readFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return {};
  ProcStat s;
  std::istringstream rest(text.substr(close + 2));
  rest >> s.state >> s.parent;
  return s;
}

// Waits until the process's state satisfies `want` (a state is observed, not slept on).
bool awaitState(pid_t pid, const std::function<bool(char)>& want, Deadline deadline) {
  while (SteadyClock::now() < deadline) {
    if (want(procStat(pid).state)) return true;
    std::this_thread::sleep_for(5ms);
  }
  return want(procStat(pid).state);
}

NodeSpec sleeper(const std::string& name, int index) {
  NodeSpec spec;
  spec.name = name;
  spec.role = "worker";
  spec.index = index;
  spec.binary = "sleep";
  spec.args = {"600"};
  return spec;
}

Fault fault(uint64_t id, FaultKind kind) {
  Fault f;
  f.id = id;
  f.name = std::string(faultKindName(kind)) + "-" + std::to_string(id);
  f.kind = kind;
  return f;
}

// A run's store and secret, and the agents.json for it.
struct AgentRun {
  std::string dir = testing::makeTempDir("host-agent");
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<Store> store;
  AgentConfig config;
  std::string config_path = dir + "/agents.json";

  explicit AgentRun(int hosts, double lease_s = 10.0) {
    auto secret = Secret::generate();
    EXPECT_TRUE(secret.isOk());
    EXPECT_TRUE(secret->writeFile(dir + "/secret").isOk());
    auto s = startStoreServer("127.0.0.1:0", *secret);
    EXPECT_TRUE(s.isOk()) << s.status().toString();
    server = std::move(*s);
    auto c = connectStore(server->address(), *secret, deadlineIn(10s));
    EXPECT_TRUE(c.isOk()) << c.status().toString();
    store = std::move(*c);
    config.store = server->address();
    config.secret_file = dir + "/secret";
    config.run = "test-" + std::to_string(::getpid());
    config.hosts = hosts;
    config.lease_s = lease_s;
    config.extra_binaries = {"sleep"};  // the tests' stand-in node
    write();
  }
  void write() {
    std::ofstream(config_path, std::ios::trunc) << config.toJson().dump();
    ::chmod(config_path.c_str(), 0600);
  }
  HostAgents::Options options() const {
    HostAgents::Options o;
    o.store = store.get();
    o.config = config;
    o.config_path = config_path;
    o.binary = testing::chaosbedBinary();
    o.log_dir = dir + "/logs";
    return o;
  }
};

// What on_exit delivered, awaitable.
struct Exits {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ExitInfo> seen;
  void add(const ExitInfo& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e);
    cv.notify_all();
  }
  std::optional<ExitInfo> await(const std::string& node, int incarnation, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu);
    std::optional<ExitInfo> found;
    cv.wait_for(lock, timeout, [&] {
      for (const ExitInfo& e : seen)
        if (e.name == node && e.incarnation == incarnation) found = e;
      return found.has_value();
    });
    return found;
  }
};

// Two agents started here (both in this network namespace), and a session whose worker-0 is on host 0.
struct TwoHosts {
  std::unique_ptr<HostAgents> agents;
  std::unique_ptr<AgentNodes> nodes;
};
TwoHosts startTwoHosts(AgentRun& run, Exits& exits, PauseMode pause_mode = PauseMode::kSignal) {
  TwoHosts t;
  HostAgents::Options o = run.options();
  o.netns_fds = {-1, -1};
  auto agents = HostAgents::start(std::move(o));
  EXPECT_TRUE(agents.isOk()) << agents.status().toString();
  if (!agents.isOk()) return t;
  t.agents = std::move(*agents);
  HostAgents::SessionOptions so;
  so.log_dir = run.dir + "/logs";
  so.cgroup_group = "host-agent-test-" + std::to_string(::getpid());
  so.pause_mode = pause_mode;
  so.host_of = [](const std::string& node) { return node == "worker-0" ? 0 : 1; };
  so.on_exit = [&exits](const ExitInfo& e) { exits.add(e); };
  auto nodes = t.agents->session(std::move(so));
  EXPECT_TRUE(nodes.isOk()) << nodes.status().toString();
  if (nodes.isOk()) t.nodes = std::move(*nodes);
  return t;
}

TEST(HostAgents, EachAgentStartsFaultsAndStopsTheNodesOfItsHost) {
  AgentRun run(2);
  Exits exits;
  auto [hosts, agents] = startTwoHosts(run, exits);
  ASSERT_NE(agents, nullptr);
  const pid_t agent0 = hosts->host(0).pid, agent1 = hosts->host(1).pid;
  EXPECT_EQ(hosts->host(0).address, "127.0.0.1") << "the address it reaches the store from";
  EXPECT_EQ(hosts->host(0).device, "lo");
  ASSERT_GT(agent0, 0);
  ASSERT_GT(agent1, 0);
  ASSERT_NE(agent0, agent1);

  auto a = agents->start(sleeper("worker-0", 0));
  auto b = agents->start(sleeper("worker-1", 1));
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_EQ(procStat(*a).parent, agent0) << "worker-0 is not a child of host 0's agent";
  EXPECT_EQ(procStat(*b).parent, agent1) << "worker-1 is not a child of host 1's agent";
  EXPECT_TRUE(agents->running("worker-0"));
  EXPECT_EQ(agents->incarnation("worker-0"), 1);
  EXPECT_TRUE(agents->start(sleeper("worker-0", 0)).status().code() == StatusCode::kInvalidArgument)
      << "a second node of the same name";

  // A pause is carried out by host 0's agent: the heal record it prepared is its node's group.
  Actuator& faults = *agents->actuator();
  const Fault pause = fault(1, FaultKind::kPause);
  ASSERT_TRUE(faults.checkAvailable(pause, "worker-0").isOk());
  auto heal = faults.prepare(pause, "worker-0");
  ASSERT_TRUE(heal.isOk()) << heal.status().toString();
  ASSERT_EQ(heal->size(), 1u);
  EXPECT_EQ((*heal)[0].op, HealRecord::Op::kSigcont);
  EXPECT_EQ((*heal)[0].pgid, *a);
  ASSERT_TRUE(faults.apply(pause, "worker-0").isOk());
  EXPECT_TRUE(awaitState(*a, [](char s) { return s == 'T'; }, deadlineIn(5s))) << "worker-0 was not stopped";
  EXPECT_EQ(procStat(*b).state == 'T', false) << "the pause reached the other host's node";
  ASSERT_TRUE(faults.revert(pause, "worker-0").isOk());
  EXPECT_TRUE(awaitState(*a, [](char s) { return s != 'T'; }, deadlineIn(5s))) << "worker-0 was not continued";

  // A kill by host 1's agent: the exit notice comes back as the Launcher's would.
  ASSERT_TRUE(faults.apply(fault(2, FaultKind::kKill), "worker-1").isOk());
  auto killed = exits.await("worker-1", 1, 10s);
  ASSERT_TRUE(killed.has_value()) << "no exit notice for worker-1";
  EXPECT_TRUE(killed->signaled);
  EXPECT_EQ(killed->signal, SIGKILL);
  EXPECT_FALSE(killed->requested);
  EXPECT_EQ(killed->pid, *b);
  EXPECT_FALSE(agents->running("worker-1"));
  EXPECT_EQ(faults.apply(fault(3, FaultKind::kPause), "worker-1").code(), StatusCode::kNotFound)
      << "a fault on a node that is not running is NotFound (skipped), by the Cluster contract";

  // Its replacement is the next incarnation, on the same host.
  auto b2 = agents->restart("worker-1", deadlineIn(5s));
  ASSERT_TRUE(b2.isOk()) << b2.status().toString();
  EXPECT_EQ(agents->incarnation("worker-1"), 2);
  EXPECT_TRUE(agents->running("worker-1"));
  EXPECT_EQ(procStat(*b2).parent, agent1);

  // A signal from the supervisor, and a wait for its exit.
  ASSERT_TRUE(agents->signal("worker-0", SIGTERM).isOk());
  auto term = agents->waitExit("worker-0", deadlineIn(10s));
  ASSERT_TRUE(term.isOk()) << term.status().toString();
  EXPECT_EQ(term->signal, SIGTERM);
  EXPECT_EQ(agents->pid("worker-0").status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE(agents->stopAll(2000ms).isOk());
  EXPECT_FALSE(agents->running("worker-1"));
  auto stopped = exits.await("worker-1", 2, 1s);
  ASSERT_TRUE(stopped.has_value());
  EXPECT_TRUE(stopped->requested) << "a node stopped on purpose is not a failure";

  agents.reset();
  hosts.reset();
  EXPECT_EQ(::kill(agent0, 0), -1) << "host 0's agent outlived its controller's runner";
  EXPECT_EQ(::kill(agent1, 0), -1) << "host 1's agent outlived its controller's runner";
  EXPECT_TRUE(testing::processesMentioning(run.config_path).empty());
}

TEST(HostAgents, AHostWhoseAgentDiesReportsItsNodesKilledAndRefusesOrders) {
  AgentRun run(2);
  Exits exits;
  auto [hosts, agents] = startTwoHosts(run, exits);
  ASSERT_NE(agents, nullptr);
  auto a = agents->start(sleeper("worker-0", 0));
  auto b = agents->start(sleeper("worker-1", 1));
  ASSERT_TRUE(a.isOk() && b.isOk());
  ASSERT_EQ(::kill(hosts->host(0).pid, SIGKILL), 0);
  auto lost = exits.await("worker-0", 1, 10s);
  ASSERT_TRUE(lost.has_value()) << "the node of a dead agent was never reported";
  EXPECT_EQ(lost->signal, SIGKILL);
  EXPECT_FALSE(lost->requested);
  EXPECT_FALSE(agents->running("worker-0"));
  EXPECT_TRUE(awaitState(*a, [](char s) { return s == 0 || s == 'Z'; }, deadlineIn(5s)))
      << "the node outlived its agent";
  EXPECT_EQ(agents->signal("worker-0", SIGTERM).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(agents->running("worker-1")) << "host 1 is unaffected";
  agents.reset();
  hosts.reset();
  EXPECT_TRUE(awaitState(*b, [](char s) { return s == 0 || s == 'Z'; }, deadlineIn(5s)))
      << "host 1's node outlived the run";
}

// Agents that join (as srun or mpirun starts them): each takes the next free host, one too many is refused,
// and one that falls silent (stopped) is declared lost after the lease; once it runs again it finds its
// lease lapsed and stops the node that was counted as killed.
TEST(HostAgents, JoiningAgentsTakeTheFreeHostsAndASilentOneIsDeclaredLost) {
  AgentRun run(2, /*lease_s=*/1.0);
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "agent", "--agent_config=" + run.config_path};
  testing::Command first(argv), second(argv);
  HostAgents::Options o = run.options();
  o.join_timeout = 20000ms;
  auto joined = HostAgents::start(std::move(o));
  ASSERT_TRUE(joined.isOk()) << joined.status().toString() << "\n" << first.output() << second.output();
  std::unique_ptr<HostAgents> hosts = std::move(*joined);
  const std::set<pid_t> pids = {hosts->host(0).pid, hosts->host(1).pid};
  EXPECT_EQ(pids, (std::set<pid_t>{first.pid(), second.pid()})) << "each agent has a host of its own";

  testing::Command third(argv);
  auto refused = third.wait(deadlineIn(20s));
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(*refused, 0);
  EXPECT_NE(third.output().find("all of them have joined"), std::string::npos) << third.output();

  Exits exits;
  HostAgents::SessionOptions so;
  so.log_dir = run.dir + "/logs";
  so.cgroup_group = "host-agent-join-" + std::to_string(::getpid());
  so.pause_mode = PauseMode::kSignal;
  so.host_of = [](const std::string& node) { return node == "worker-0" ? 0 : 1; };
  so.on_exit = [&exits](const ExitInfo& e) { exits.add(e); };
  auto session = hosts->session(std::move(so));
  ASSERT_TRUE(session.isOk()) << session.status().toString();
  std::unique_ptr<AgentNodes> nodes = std::move(*session);
  auto a = nodes->start(sleeper("worker-0", 0));
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  const pid_t agent0 = hosts->host(0).pid;
  EXPECT_EQ(procStat(*a).parent, agent0);

  ASSERT_EQ(::kill(agent0, SIGSTOP), 0);
  const auto stopped = SteadyClock::now();
  auto lost = exits.await("worker-0", 1, 10s);
  ASSERT_TRUE(lost.has_value()) << "a silent host was never declared lost";
  EXPECT_GE(SteadyClock::now() - stopped, 1s) << "declared lost before its lease ran out";
  EXPECT_EQ(lost->signal, SIGKILL);
  EXPECT_EQ(procStat(*a).state, 'S') << "still there while its agent is stopped";
  ASSERT_EQ(::kill(agent0, SIGCONT), 0);
  testing::Command& agent = first.pid() == agent0 ? first : second;
  auto code = agent.wait(deadlineIn(15s));
  ASSERT_TRUE(code.has_value()) << "the agent of the lost host did not stop";
  EXPECT_EQ(*code, 4) << agent.output();
  EXPECT_NE(agent.output().find("lease"), std::string::npos) << agent.output();
  EXPECT_TRUE(awaitState(*a, [](char s) { return s == 0; }, deadlineIn(5s))) << "the node counted as killed lives on";
  nodes.reset();
  hosts.reset();
  testing::Command& other = first.pid() == agent0 ? second : first;
  auto other_code = other.wait(deadlineIn(15s));
  ASSERT_TRUE(other_code.has_value());
  EXPECT_EQ(*other_code, 0) << "the other agent was told to quit:\n" << other.output();
}

// The agent's lease: with no controller renewing it, an agent reverts what it applied, stops its nodes and
// exits. The test is the controller here, speaking the wire protocol itself.
class AgentLease : public ::testing::Test {
 protected:
  AgentRun run{/*hosts=*/1, /*lease_s=*/1.0};
  int64_t orders = 0;

  json order(const json& o) {
    EXPECT_TRUE(run.store->set(agent_wire::order(run.config.run, 0, orders), o.dump()).isOk());
    auto reply = run.store->get(agent_wire::reply(run.config.run, 0, orders++), deadlineIn(10s));
    EXPECT_TRUE(reply.isOk()) << reply.status().toString();
    return reply.isOk() ? json::parse(*reply) : json{};
  }
  // Starts host 0's agent and waits for its hello.
  std::unique_ptr<testing::Command> startAgent() {
    auto agent = std::make_unique<testing::Command>(
        std::vector<std::string>{testing::chaosbedBinary(), "agent", "--agent_config=" + run.config_path, "--index=0"});
    EXPECT_TRUE(run.store->get(agent_wire::hello(run.config.run, 0), deadlineIn(10s)).isOk()) << agent->output();
    return agent;
  }
  // Renews the agent's lease as a controller would, until stopRenewing().
  void renewLease() {
    lease_ = std::thread([this] {
      while (renew_) {
        (void)run.store->add(agent_wire::lease(run.config.run, 0), 1);
        std::this_thread::sleep_for(100ms);  // the renewal period itself
      }
    });
  }
  void stopRenewing() {
    renew_ = false;
    if (lease_.joinable()) lease_.join();
  }
  void TearDown() override { stopRenewing(); }
  json begin() {
    return order({{"op", "begin"}, {"session", 1}, {"log_dir", run.dir + "/logs"}, {"cgroup_group", "lease-test"},
                  {"pause_mode", "signal"}});
  }
  // A session with worker-0 (sleep) in it: its pid, or 0.
  pid_t startSleeper() {
    json begun = begin();
    EXPECT_EQ(begun.value("code", -1), 0) << begun.dump();
    json started = order({{"op", "start"}, {"spec", agent_wire::toJson(sleeper("worker-0", 0))}});
    EXPECT_EQ(started.value("code", -1), 0) << started.dump();
    return started.value("pid", pid_t(0));
  }

 private:
  std::atomic<bool> renew_{true};
  std::thread lease_;
};

TEST_F(AgentLease, AnAgentWhoseLeaseLapsesStopsItsPausedNodeAndExits) {
  auto agent_process = startAgent();
  testing::Command& agent = *agent_process;
  renewLease();
  const pid_t node = startSleeper();
  ASSERT_GT(node, 0);
  json paused = order({{"op", "fault"}, {"action", "apply"}, {"fault", agent_wire::toJson(fault(7, FaultKind::kPause))},
                       {"node", "worker-0"}});
  ASSERT_EQ(paused.value("code", -1), 0) << paused.dump();
  ASSERT_TRUE(awaitState(node, [](char s) { return s == 'T'; }, deadlineIn(5s)));
  // The agent outlives a lease that is renewed (three lease periods here).
  EXPECT_FALSE(agent.wait(deadlineIn(3s)).has_value()) << agent.output();

  const auto lapsed = SteadyClock::now();
  stopRenewing();
  auto code = agent.wait(deadlineIn(15s));
  ASSERT_TRUE(code.has_value()) << "the agent outlived its lease:\n" << agent.output();
  EXPECT_EQ(*code, 4) << agent.output();
  EXPECT_GE(SteadyClock::now() - lapsed, 1s) << "it left before the lease lapsed";
  EXPECT_NE(agent.output().find("lease"), std::string::npos) << agent.output();
  EXPECT_TRUE(awaitState(node, [](char s) { return s == 0; }, deadlineIn(5s))) << "its node outlived it";
  // It reported the node's exit as a stop it made, before it left.
  auto notice = run.store->get(agent_wire::exitNotice(run.config.run, 0, 0), deadlineIn(1s));
  ASSERT_TRUE(notice.isOk());
  EXPECT_TRUE(json::parse(*notice).at("requested").get<bool>()) << *notice;
}

// An agent stopped for longer than its lease while the controller kept renewing it (the controller counted
// the host lost meanwhile) gives its nodes up as soon as it runs again, instead of reading the lease's
// movement during its sleep as a renewal.
TEST_F(AgentLease, AnAgentStoppedLongerThanItsLeaseGivesItsNodesUpOnWaking) {
  auto agent_process = startAgent();
  testing::Command& agent = *agent_process;
  renewLease();
  const pid_t node = startSleeper();
  ASSERT_GT(node, 0);
  ASSERT_EQ(::kill(agent.pid(), SIGSTOP), 0);
  ASSERT_TRUE(awaitState(agent.pid(), [](char s) { return s == 'T'; }, deadlineIn(5s)));
  std::this_thread::sleep_for(2500ms);  // the fault itself: 2.5 lease periods asleep, the lease renewed all along
  const auto woken = SteadyClock::now();
  ASSERT_EQ(::kill(agent.pid(), SIGCONT), 0);
  auto code = agent.wait(deadlineIn(10s));
  ASSERT_TRUE(code.has_value()) << "the woken agent served on:\n" << agent.output();
  EXPECT_EQ(*code, 4) << agent.output();
  EXPECT_LT(SteadyClock::now() - woken, 5s) << "it did not give up at once";
  EXPECT_NE(agent.output().find("longer than the lease"), std::string::npos) << agent.output();
  EXPECT_TRUE(awaitState(node, [](char s) { return s == 0; }, deadlineIn(5s))) << "its node outlived it";
}

TEST_F(AgentLease, AnAgentWhoseStoreIsGoneStopsItsNodesAtOnce) {
  auto agent_process = startAgent();
  testing::Command& agent = *agent_process;
  renewLease();
  const pid_t node = startSleeper();
  ASSERT_GT(node, 0);
  stopRenewing();
  run.store.reset();
  run.server.reset();  // the controller's process is gone: its connections close
  auto code = agent.wait(deadlineIn(10s));
  ASSERT_TRUE(code.has_value()) << agent.output();
  EXPECT_EQ(*code, 4) << agent.output();
  EXPECT_NE(agent.output().find("store is gone"), std::string::npos) << agent.output();
  EXPECT_TRUE(awaitState(node, [](char s) { return s == 0; }, deadlineIn(5s))) << "its node outlived it";
}

// Agents that never come: the controller gives up at its join timeout, says how to start them, and has no
// one to tell to quit.
TEST(HostAgents, AgentsThatNeverJoinEndTheWaitWithTheCommandThatStartsThem) {
  AgentRun run(2);
  HostAgents::Options o = run.options();
  o.join_timeout = 1000ms;
  const auto started = SteadyClock::now();
  auto agents = HostAgents::start(std::move(o));
  ASSERT_FALSE(agents.isOk());
  EXPECT_EQ(agents.status().code(), StatusCode::kTimeout);
  EXPECT_NE(agents.status().message().find("0 of 2 host agents came up in time; start each with: chaosbed agent "
                                           "--agent_config " + run.config_path),
            std::string::npos)
      << agents.status().toString();
  EXPECT_LT(SteadyClock::now() - started, 4s) << "it waited on agents that never came";
}

// Named hosts: an agent takes the first free host named as its machine, whatever the order of joining.
TEST(HostAgents, AnAgentJoinsAsTheHostNamedAsItsMachine) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof(name) - 1), 0);
  const std::string machine = std::string(name).substr(0, std::string(name).find('.'));
  AgentRun run(2);
  run.config.host_names = {"elsewhere", machine};
  run.write();
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "agent", "--agent_config=" + run.config_path};
  testing::Command first(argv);
  auto hello = run.store->get(agent_wire::hello(run.config.run, 1), deadlineIn(20s));
  ASSERT_TRUE(hello.isOk()) << "no agent took host 1, the one named " << machine << ":\n" << first.output();
  EXPECT_EQ(json::parse(*hello).at("pid").get<pid_t>(), first.pid());
  EXPECT_FALSE(run.store->contains(agent_wire::hello(run.config.run, 0)).value()) << "host 0 is another machine's";

  testing::Command second(argv);
  auto refused = second.wait(deadlineIn(20s));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, 2) << second.output();
  EXPECT_NE(second.output().find("every host named " + machine + " has joined already"), std::string::npos)
      << second.output();

  AgentRun other(1);
  other.config.host_names = {"elsewhere"};
  other.write();
  testing::Command stranger({testing::chaosbedBinary(), "agent", "--agent_config=" + other.config_path});
  auto code = stranger.wait(deadlineIn(20s));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(stranger.output().find("is not one of the run's hosts (elsewhere)"), std::string::npos) << stranger.output();
  first.signal(SIGTERM);
  EXPECT_TRUE(first.wait(deadlineIn(10s)).has_value());
}

TEST(AgentConfig, AMalformedConfigIsRefusedNamingTheFileAndTheField) {
  const std::string dir = testing::makeTempDir("agent-config");
  std::ofstream(dir + "/bad.json") << R"({"store": "127.0.0.1:1", "secret_file": "s", "run": "r", "hosts": 0, "lease_s": 1})";
  auto bad = AgentConfig::read(dir + "/bad.json");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find(dir + "/bad.json"), std::string::npos) << bad.status().toString();
  EXPECT_NE(bad.status().message().find("hosts"), std::string::npos) << bad.status().toString();
  std::ofstream(dir + "/missing.json") << R"({"store": "127.0.0.1:1"})";
  auto missing = AgentConfig::read(dir + "/missing.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("secret_file"), std::string::npos) << missing.status().toString();
}

// What an agent reads from the store is parsed as untrusted input: every malformed order is refused with a
// reason, and the agent serves on.
TEST_F(AgentLease, ASecondAgentForAClaimedHostIsRefusedAndTheFirstServesOn) {
  auto first = startAgent();
  renewLease();
  testing::Command second({testing::chaosbedBinary(), "agent", "--agent_config=" + run.config_path, "--index=0"});
  auto code = second.wait(deadlineIn(20s));
  ASSERT_TRUE(code.has_value()) << "the second agent of host 0 is still running: " << second.output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(second.output().find("host 0 has an agent already"), std::string::npos) << second.output();
  // The first one still obeys, and it alone answers.
  ASSERT_EQ(begin().value("code", -1), 0);
  EXPECT_EQ(order({{"op", "quit"}, {"grace_ms", 1000}}).value("code", -1), 0);
  auto first_code = first->wait(deadlineIn(10s));
  ASSERT_TRUE(first_code.has_value());
  EXPECT_EQ(*first_code, 0) << first->output();
}

TEST_F(AgentLease, MalformedOrdersAreRefusedAndTheAgentServesOn) {
  auto agent_process = startAgent();
  testing::Command& agent = *agent_process;
  renewLease();
  const auto refused = [&](const json& reply, const std::string& why) {
    EXPECT_NE(reply.value("code", 0), 0) << reply.dump();
    EXPECT_NE(reply.value("message", "").find(why), std::string::npos) << reply.dump();
  };
  // Not JSON at all.
  ASSERT_TRUE(run.store->set(agent_wire::order(run.config.run, 0, orders), "{not json").isOk());
  auto text = run.store->get(agent_wire::reply(run.config.run, 0, orders++), deadlineIn(10s));
  ASSERT_TRUE(text.isOk());
  refused(json::parse(*text), "not a JSON object");
  refused(order({{"op", "start"}, {"spec", agent_wire::toJson(sleeper("worker-0", 0))}}), "outside a session");
  refused(order({{"op", "launch"}}), "outside a session");
  refused(order({{"op", "begin"}, {"session", 1}}), "malformed order");
  refused(order({{"op", "begin"}, {"session", 1}, {"log_dir", run.dir + "/logs"}, {"cgroup_group", "g"},
                 {"pause_mode", "sometimes"}}),
          "pause_mode");
  ASSERT_EQ(order({{"op", "begin"}, {"session", 1}, {"log_dir", run.dir + "/logs"}, {"cgroup_group", "g"},
                   {"pause_mode", "signal"}}).value("code", -1), 0);
  refused(order({{"op", "launch"}}), "unknown order");
  refused(order({{"op", "start"}, {"spec", {{"name", "worker-0"}}}}), "node spec");
  refused(order({{"op", "fault"}, {"action", "apply"}, {"node", "worker-0"}, {"fault", {{"id", 1}}}}), "fault");
  // A holder of the secret may start a node, never a program of its choice (as root), nor hand it an
  // environment that would run one (LD_PRELOAD); the run is allowed its own roles only.
  NodeSpec shell = sleeper("worker-0", 0);
  shell.binary = "/bin/sh";
  shell.args = {"-c", "id > " + run.dir + "/owned"};
  refused(order({{"op", "start"}, {"spec", agent_wire::toJson(shell)}}), "may not name a program");
  NodeSpec preload;
  preload.name = "worker-0";
  preload.role = "worker";
  preload.args = {"worker", "--node_config=" + run.dir + "/node-config.json"};
  preload.env = {{"LD_PRELOAD", run.dir + "/evil.so"}};
  refused(order({{"op", "start"}, {"spec", agent_wire::toJson(preload)}}), "LD_PRELOAD");
  NodeSpec other_command = preload;
  other_command.env.clear();
  other_command.args = {"agent", "--agent_config=" + run.config_path};
  refused(order({{"op", "start"}, {"spec", agent_wire::toJson(other_command)}}), "arguments must be exactly");
  other_command.role = "agent";
  refused(order({{"op", "start"}, {"spec", agent_wire::toJson(other_command)}}), "not a node role");
  EXPECT_FALSE(std::filesystem::exists(run.dir + "/owned")) << "the shell ran";
  json link = agent_wire::toJson(fault(2, FaultKind::kPause));
  link["kind"] = "link";
  refused(order({{"op", "fault"}, {"action", "apply"}, {"node", "worker-0"}, {"fault", link}}), "does not carry out link");
  EXPECT_EQ(order({{"op", "fault"}, {"action", "apply"}, {"node", "worker-9"},
                   {"fault", agent_wire::toJson(fault(3, FaultKind::kKill))}}).value("code", -1),
            int(StatusCode::kNotFound));
  // And it still serves.
  json started = order({{"op", "start"}, {"spec", agent_wire::toJson(sleeper("worker-0", 0))}});
  EXPECT_EQ(started.value("code", -1), 0) << started.dump();
  EXPECT_EQ(order({{"op", "quit"}, {"grace_ms", 1000}}).value("code", -1), 0);
  auto code = agent.wait(deadlineIn(10s));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << agent.output();
  EXPECT_TRUE(awaitState(started.value("pid", 0), [](char s) { return s == 0; }, deadlineIn(5s)));
}

}  // namespace
}  // namespace chaosbed::chaos
