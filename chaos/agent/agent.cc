#include "chaos/agent/agent.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "chaos/actuators/actuator.h"
#include "chaos/agent/protocol.h"
#include "chaos/controller.h"
#include "core/launcher/identity.h"
#include "core/launcher/launcher.h"
#include "transports/bootstrap/net.h"
#include "transports/bootstrap/store.h"

namespace chaosbed::chaos {

using nlohmann::json;
using namespace std::chrono_literals;

json AgentConfig::toJson() const {
  return {{"store", store},     {"secret_file", secret_file}, {"run", run},
          {"hosts", hosts},     {"host_names", host_names},   {"lease_s", lease_s},
          {"extra_binaries", extra_binaries}};
}

Result<AgentConfig> AgentConfig::read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::notFound("agent config " + path + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::invalidArgument("agent config " + path + ": not a JSON object");
  AgentConfig c;
  try {
    c.store = j.at("store").get<std::string>();
    c.secret_file = j.at("secret_file").get<std::string>();
    c.run = j.at("run").get<std::string>();
    c.hosts = j.at("hosts").get<int>();
    c.lease_s = j.at("lease_s").get<double>();
    c.host_names = j.value("host_names", std::vector<std::string>{});
    c.extra_binaries = j.value("extra_binaries", std::vector<std::string>{});
  } catch (const json::exception& e) {
    return Status::invalidArgument("agent config " + path + ": " + e.what());
  }
  if (!(c.lease_s > 0)) return Status::invalidArgument("agent config " + path + ": lease_s must be > 0");
  if (c.hosts < 1) return Status::invalidArgument("agent config " + path + ": hosts must be >= 1");
  if (!c.host_names.empty() && int(c.host_names.size()) != c.hosts)
    return Status::invalidArgument("agent config " + path + ": host_names must name every host");
  return c;
}

namespace {

// The agent's nodes as the actuators see them: the same actuators the controller runs on one machine.
class AgentCluster final : public Cluster {
 public:
  explicit AgentCluster(Launcher& launcher) : launcher_(launcher) {}
  void setQuota(const std::string& node, double cpus) { quotas_[node] = cpus; }

  std::vector<NodeInfo> nodes() const override { return {}; }  // the controller's plan names them
  Result<pid_t> processGroup(const std::string& node) override {
    Result<pid_t> pid = launcher_.pid(node);
    if (!pid.isOk() && pid.status().code() == StatusCode::kUnavailable) return Status::notFound(node + " is not running");
    return pid;
  }
  NodeCgroup* cgroup(const std::string& node) override { return launcher_.cgroup(node); }
  double cpuQuota(const std::string& node) override {
    auto it = quotas_.find(node);
    return it == quotas_.end() ? 0.0 : it->second;
  }
  Status replace(const std::string& node) override {
    return Status::internal(node + ": the controller replaces nodes with restart orders, not through an actuator");
  }

 private:
  Launcher& launcher_;
  std::map<std::string, double> quotas_;
};

// The address this host reaches `store` from, and the interface that holds it: what its nodes bind to.
// A connected UDP socket asks the kernel's routing table without sending anything.
std::pair<std::string, std::string> localRoute(const std::string& store) {
  auto to = net::parseHostPort(store);
  if (!to.isOk()) return {};
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(to->port);
  if (::inet_pton(AF_INET, to->host.c_str(), &peer.sin_addr) != 1) return {};
  net::FileDescriptor fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (fd.get() < 0 || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&peer), sizeof(peer)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return {};
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  std::string device;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) == 0) {
    for (ifaddrs* i = all; i != nullptr; i = i->ifa_next)
      if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
          reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == local.sin_addr.s_addr) {
        device = i->ifa_name;
        break;
      }
    ::freeifaddrs(all);
  }
  return {text, device};
}

// Who started this agent, for the record: the engine's own names for it.
std::string launchedBy() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!env("SLURM_JOB_ID").empty())
    return "slurm job " + env("SLURM_JOB_ID") + " step " + env("SLURM_STEP_ID") + " task " + env("SLURM_PROCID");
  if (!env("OMPI_COMM_WORLD_RANK").empty())
    return "mpirun rank " + env("OMPI_COMM_WORLD_RANK") + " of " + env("OMPI_COMM_WORLD_SIZE");
  if (!env("TORCHELASTIC_RUN_ID").empty()) return "torchrun rank " + env("RANK") + " of " + env("WORLD_SIZE");
  if (!env("KUBERNETES_SERVICE_HOST").empty()) return "kubernetes pod " + env("HOSTNAME");
  if (env("CHAOSBED_ROLE") == "agent") return "the controller";
  return "by hand";
}

std::string hostName() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? name : "";
}

// One strategy run's nodes on this host: their launcher and the actuators that fault them.
struct Session {
  int64_t id = 0;
  std::unique_ptr<Launcher> launcher;
  std::unique_ptr<AgentCluster> cluster;
  std::unique_ptr<ActuatorSet> actuators;
  std::map<FaultKind, Actuator*> actuator_map;
  std::map<std::pair<uint64_t, std::string>, Fault> applied;  // (fault id, node) -> fault
};

class Agent {
 public:
  Agent(const AgentConfig& config, int host) : config_(config), host_(host) {}
  ~Agent() { endSession(3000ms); }

  Status run(const std::atomic<bool>* interrupted) {
    auto secret = Secret::readFile(config_.secret_file);
    if (!secret.isOk()) return secret.status().withContext("agent: the run's secret");
    CHAOSBED_ASSIGN_OR_RETURN(store_, connectStore(config_.store, *secret, deadlineIn(30s), 10000ms));
    if (host_ < 0) {
      CHAOSBED_ASSIGN_OR_RETURN(host_, join());
    } else {
      CHAOSBED_RETURN_IF_ERROR(claimGiven());
    }
    const auto [address, device] = localRoute(config_.store);
    CHAOSBED_RETURN_IF_ERROR(store_->set(agent_wire::hello(config_.run, host_),
                                         json{{"pid", ::getpid()}, {"host", host_}, {"hostname", hostName()},
                                              {"address", address}, {"device", device}, {"launched_by", launchedBy()}}
                                             .dump()));
    LOG(INFO) << "agent of host " << host_ << " (" << address << ", " << device << ") serves run " << config_.run;
    Status ended = serve(interrupted);
    if (!ended.isOk()) LOG(WARNING) << "agent of host " << host_ << ": " << ended.toString() << "; healing and stopping";
    endSession(quit_grace_);
    return ended;
  }

 private:
  // Which host this agent is: the first free one named as this machine (hosts: {names}); else the rank its
  // launcher gave it (srun's task, mpirun's or torchrun's rank, an Indexed Job's index); else the next
  // free one in the order of joining. A host is taken by the first agent whose claim on it counts 1.
  Result<int> join() {
    const auto claim = [this](int host) -> Result<bool> {
      CHAOSBED_ASSIGN_OR_RETURN(int64_t claims, store_->add(agent_wire::claim(config_.run, host), 1));
      return claims == 1;
    };
    if (config_.host_names.empty()) {
      auto launched = launcherRankFromEnvironment();
      if (launched.isOk()) {
        if (launched->rank >= config_.hosts)
          return Status::invalidArgument(launched->rank_var + "=" + std::to_string(launched->rank) + ", but the run has " +
                                         std::to_string(config_.hosts) + " hosts");
        CHAOSBED_ASSIGN_OR_RETURN(bool mine, claim(launched->rank));
        if (!mine)
          return Status::invalidArgument("host " + std::to_string(launched->rank) + " (" + launched->rank_var + "=" +
                                         std::to_string(launched->rank) + ") has joined already");
        return launched->rank;
      }
      if (launched.status().code() != StatusCode::kNotFound) return launched.status();
      for (;;) {
        CHAOSBED_ASSIGN_OR_RETURN(int64_t joined, store_->add(agent_wire::joined(config_.run), 1));
        if (joined > config_.hosts)
          return Status::invalidArgument("the run has " + std::to_string(config_.hosts) + " hosts and all of them have joined");
        CHAOSBED_ASSIGN_OR_RETURN(bool mine, claim(int(joined - 1)));
        if (mine) return int(joined - 1);
      }
    }
    const std::string name = hostName();
    const std::string short_name = name.substr(0, name.find('.'));
    bool named = false;
    for (size_t i = 0; i < config_.host_names.size(); ++i) {
      const std::string& want = config_.host_names[i];
      if (want != name && want != short_name) continue;
      named = true;
      CHAOSBED_ASSIGN_OR_RETURN(bool mine, claim(int(i)));
      if (mine) return int(i);
    }
    std::string all;
    for (const std::string& n : config_.host_names) all += (all.empty() ? "" : ", ") + n;
    if (!named) return Status::invalidArgument("this machine, " + name + ", is not one of the run's hosts (" + all + ")");
    return Status::invalidArgument("every host named " + short_name + " has joined already (the run's hosts: " + all + ")");
  }

  // --index I: host I, if no agent has claimed it (a second one would replay its orders and start every
  // node of the host a second time).
  Status claimGiven() {
    if (host_ >= config_.hosts)
      return Status::invalidArgument("--index " + std::to_string(host_) + ", but the run has " + std::to_string(config_.hosts) + " hosts");
    CHAOSBED_ASSIGN_OR_RETURN(int64_t claims, store_->add(agent_wire::claim(config_.run, host_), 1));
    if (claims != 1) return Status::invalidArgument("host " + std::to_string(host_) + " has an agent already");
    return Status::ok();
  }

  Status serve(const std::atomic<bool>* interrupted) {
    const auto lease_timeout = std::chrono::duration<double>(config_.lease_s);
    auto lease_seen = SteadyClock::now();
    std::optional<std::string> lease_value;
    auto last_turn = SteadyClock::now();
    for (int64_t next = 0;;) {
      if (interrupted && interrupted->load()) return Status::cancelled("interrupted");
      // A turn takes at most about a second. One that took longer than the lease means this agent did not run
      // (stopped, or starved): the controller, which reads our own counter on the same timeout, has counted
      // this host lost meanwhile, and the lease's movement during that time is no renewal of ours. Give the
      // nodes up at once rather than act on a run that has moved on.
      if (const auto now = SteadyClock::now(); now - last_turn > lease_timeout)
        return Status::unavailable("this agent did not run for " +
                                   std::to_string(std::chrono::duration<double>(now - last_turn).count()) +
                                   " s (stopped or starved), longer than the lease: its host counts as lost");
      else
        last_turn = now;
      Result<std::string> order = store_->get(agent_wire::order(config_.run, host_, next), deadlineIn(250ms));
      if (order.isOk()) {
        bool quit = false;
        json reply = handle(*order, &quit);
        CHAOSBED_RETURN_IF_ERROR(store_->set(agent_wire::reply(config_.run, host_, next), reply.dump()));
        ++next;
        if (quit) return Status::ok();
      } else if (order.status().code() != StatusCode::kTimeout) {
        return Status::unavailable("the controller's store is gone (" + order.status().toString() + ")");
      }
      // Both leases: ours renewed, the controller's read.
      if (auto a = store_->add(agent_wire::alive(config_.run, host_), 1); !a.isOk())
        return Status::unavailable("the controller's store is gone (" + a.status().toString() + ")");
      auto lease = store_->peek({agent_wire::lease(config_.run, host_)});
      if (!lease.isOk()) return Status::unavailable("the controller's store is gone (" + lease.status().toString() + ")");
      if (!lease->empty() && (*lease)[0] != lease_value) {
        lease_value = (*lease)[0];
        lease_seen = SteadyClock::now();
      } else if (SteadyClock::now() - lease_seen > lease_timeout) {
        return Status::unavailable("the controller's lease has not been renewed for " + std::to_string(config_.lease_s) + " s");
      }
    }
  }

  json handle(const std::string& text, bool* quit) {
    auto order = agent_wire::parseEntry(text, "order");
    if (!order.isOk()) return agent_wire::toJson(order.status());
    const json& o = *order;
    try {
      const std::string op = o.at("op").get<std::string>();
      if (op == "begin") return agent_wire::toJson(beginSession(o));
      if (op == "end") {
        endSession(std::chrono::milliseconds(o.at("grace_ms").get<int64_t>()));
        return agent_wire::toJson(Status::ok());
      }
      if (op == "quit") {
        *quit = true;
        quit_grace_ = std::chrono::milliseconds(o.at("grace_ms").get<int64_t>());
        return agent_wire::toJson(Status::ok());
      }
      if (!session_) return agent_wire::toJson(Status::invalidArgument("agent: '" + op + "' outside a session (no begin)"));
      Launcher& launcher = *session_->launcher;
      if (op == "start") {
        auto spec = agent_wire::nodeSpecFromJson(o.at("spec"));
        if (!spec.isOk()) return agent_wire::toJson(spec.status());
        if (Status s = agent_wire::admissible(*spec, config_.extra_binaries); !s.isOk()) return agent_wire::toJson(s);
        session_->cluster->setQuota(spec->name, spec->cpus.value_or(0));
        return started(spec->name, launcher.start(*spec));
      }
      const std::string node = o.value("node", "");
      if (op == "restart")
        return started(node, launcher.restart(node, deadlineIn(std::chrono::milliseconds(o.at("timeout_ms").get<int64_t>()))));
      if (op == "signal") return agent_wire::toJson(launcher.signal(node, o.at("sig").get<int>()));
      if (op == "stop_all")
        return agent_wire::toJson(launcher.stopAll(std::chrono::milliseconds(o.at("grace_ms").get<int64_t>())));
      if (op == "fault") return fault(o.at("action").get<std::string>(), o.at("fault"), node);
      return agent_wire::toJson(Status::invalidArgument("agent: unknown order '" + op + "'"));
    } catch (const json::exception& e) {
      return agent_wire::toJson(Status::invalidArgument(std::string("agent: malformed order: ") + e.what()));
    }
  }

  Status beginSession(const json& o) {
    endSession(3000ms);
    const std::string pm = o.at("pause_mode").get<std::string>();
    if (pm != "auto" && pm != "freezer" && pm != "signal")
      return Status::invalidArgument("agent: pause_mode '" + pm + "' is not auto|freezer|signal");
    auto session = std::make_unique<Session>();
    session->id = o.at("session").get<int64_t>();
    LauncherOptions lo;
    lo.log_dir = o.at("log_dir").get<std::string>();
    lo.cgroup_group = o.at("cgroup_group").get<std::string>() + "-h" + std::to_string(host_);
    lo.on_exit = [this, id = session->id](const ExitInfo& e) { reportExit(id, e); };
    lo.stop_grace = 3000ms;
    CHAOSBED_ASSIGN_OR_RETURN(session->launcher, Launcher::create(lo));
    session->cluster = std::make_unique<AgentCluster>(*session->launcher);
    ActuatorSet::Options ao;
    ao.pause_mode = pm == "freezer" ? PauseMode::kFreezer : pm == "signal" ? PauseMode::kSignal : PauseMode::kAuto;
    session->actuators = std::make_unique<ActuatorSet>(*session->cluster, ao);
    session->actuator_map = session->actuators->map();
    session_ = std::move(session);
    return Status::ok();
  }

  // Reverts what the session applied (newest first), then stops its nodes; the launcher's destructor
  // removes their cgroups after the last exit notice went out.
  void endSession(std::chrono::milliseconds grace) {
    if (!session_) return;
    for (auto it = session_->applied.rbegin(); it != session_->applied.rend(); ++it) {
      const auto& [key, fault] = *it;
      if (Status s = session_->actuator_map.at(fault.kind)->revert(fault, key.second); !s.isOk())
        LOG(ERROR) << "agent of host " << host_ << ": reverting " << fault.name << " on " << key.second << ": " << s.toString();
    }
    if (Status s = session_->launcher->stopAll(grace); !s.isOk()) LOG(ERROR) << "agent of host " << host_ << ": " << s.toString();
    session_.reset();
  }

  json started(const std::string& node, const Result<pid_t>& pid) {
    json reply = agent_wire::toJson(pid.status());
    if (pid.isOk()) {
      reply["pid"] = *pid;
      reply["incarnation"] = session_->launcher->incarnation(node);
    }
    return reply;
  }

  json fault(const std::string& action, const json& fault_json, const std::string& node) {
    auto fault = agent_wire::faultFromJson(fault_json);
    if (!fault.isOk()) return agent_wire::toJson(fault.status());
    auto it = session_->actuator_map.find(fault->kind);
    // Link shaping and transport errors travel to the nodes themselves, not through a host's agent.
    const ActuatorKind via = traitsOf(fault->kind).actuator;
    if (it == session_->actuator_map.end() || via == ActuatorKind::kLink || via == ActuatorKind::kTransportErrors)
      return agent_wire::toJson(Status::invalidArgument(std::string("agent: a host agent does not carry out ") +
                                                        faultKindName(fault->kind) + " faults"));
    Actuator& a = *it->second;
    const std::pair<uint64_t, std::string> key{fault->id, node};
    if (action == "check") return agent_wire::toJson(a.checkAvailable(*fault, node));
    if (action == "prepare") {
      auto records = a.prepare(*fault, node);
      json reply = agent_wire::toJson(records.status());
      if (records.isOk()) {
        reply["heal"] = json::array();
        for (const HealRecord& r : *records) reply["heal"].push_back(healToJson(r));
      }
      return reply;
    }
    if (action == "apply") {
      session_->applied[key] = *fault;  // before: a half-done apply is reverted too
      return agent_wire::toJson(a.apply(*fault, node));
    }
    if (action == "escalate") return agent_wire::toJson(a.escalate(*fault, node));
    if (action == "revert") {
      session_->applied.erase(key);
      return agent_wire::toJson(a.revert(*fault, node));
    }
    return agent_wire::toJson(Status::invalidArgument("agent: unknown fault action '" + action + "'"));
  }

  // On a launcher's thread.
  void reportExit(int64_t session, const ExitInfo& e) {
    int64_t n;
    {
      std::lock_guard<std::mutex> lock(exits_mu_);
      n = exits_++;
    }
    json notice = agent_wire::toJson(e);
    notice["session"] = session;
    if (Status s = store_->set(agent_wire::exitNotice(config_.run, host_, n), notice.dump()); !s.isOk())
      LOG(WARNING) << "agent of host " << host_ << ": reporting the exit of " << e.name << ": " << s.toString();
  }

  const AgentConfig config_;
  int host_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Session> session_;  // after store_: its launcher reports exits through the store
  std::chrono::milliseconds quit_grace_{3000};
  std::mutex exits_mu_;
  int64_t exits_ = 0;  // guarded by exits_mu_: notices are numbered in the order their exits were reaped
};

}  // namespace

Status runHostAgent(const AgentConfig& config, int host, const std::atomic<bool>* interrupted) {
  Agent agent(config, host);
  return agent.run(interrupted);
}

}  // namespace chaosbed::chaos
