#include "chaos/agent/host_agents.h"

#include <glog/logging.h>
#include <signal.h>

#include <algorithm>

#include "chaos/agent/protocol.h"
#include "core/isolation/cgroup.h"

namespace chaosbed::chaos {

using nlohmann::json;
using namespace std::chrono_literals;

struct HostAgents::HostState {
  int index = 0;
  Host info;
  std::mutex order_mu;      // one order in flight per host: the agent answers them in order
  int64_t next_order = 0;   // guarded by order_mu
  std::atomic<bool> alive{true};
  std::unique_ptr<Store> session;  // the watcher's own client: its gets are interrupted at shutdown
  std::thread watcher;
};

HostAgents::HostAgents(Options options) : options_(std::move(options)) {}

Result<std::unique_ptr<HostAgents>> HostAgents::start(Options options) {
  if (options.store == nullptr || options.config.hosts < 1)
    return Status::invalidArgument("HostAgents: a store and at least one host are required");
  if (!options.netns_fds.empty() && int(options.netns_fds.size()) != options.config.hosts)
    return Status::invalidArgument("HostAgents: one network namespace per host");
  std::unique_ptr<HostAgents> a(new HostAgents(std::move(options)));
  const Options& o = a->options_;
  for (int i = 0; i < o.config.hosts; ++i) {
    auto host = std::make_unique<HostState>();
    host->index = i;
    host->session = o.store->session();
    a->hosts_.push_back(std::move(host));
  }
  if (!o.netns_fds.empty()) {
    LauncherOptions lo;
    lo.log_dir = o.log_dir;
    lo.on_exit = [agents = a.get()](const ExitInfo& e) { agents->agentExited(e); };
    lo.stop_grace = 10000ms;  // an agent stops its own nodes first
    CHAOSBED_ASSIGN_OR_RETURN(a->started_, Launcher::create(lo));
    for (int i = 0; i < o.config.hosts; ++i) {
      NodeSpec spec;
      spec.name = "agent-" + std::to_string(i);
      spec.role = "agent";
      spec.index = i;
      spec.binary = o.binary;
      spec.args = {"agent", "--agent_config=" + o.config_path, "--index=" + std::to_string(i)};
      spec.net_namespace_fd = o.netns_fds[size_t(i)];
      CHAOSBED_RETURN_IF_ERROR(a->started_->start(spec).status().withContext("starting the agent of host " + std::to_string(i)));
    }
    CHAOSBED_RETURN_IF_ERROR(a->awaitHellos([&a](int i) {
      const std::string agent = "agent-" + std::to_string(i);
      if (!a->started_->running(agent))
        return Status::unavailable("the agent of host " + std::to_string(i) + " exited during start-up; see " +
                                   a->started_->logPath(agent));
      return Status::ok();
    }));
  } else {
    LOG(INFO) << "waiting for " << o.config.hosts << " host agent(s): chaosbed agent --agent_config " << o.config_path;
    CHAOSBED_RETURN_IF_ERROR(a->awaitHellos([&o](int) {
      return o.interrupted && o.interrupted->load() ? Status::cancelled("interrupted") : Status::ok();
    }));
  }
  for (int i = 0; i < o.config.hosts; ++i)
    a->hosts_[size_t(i)]->watcher = std::thread([agents = a.get(), i] { agents->watch(i); });
  return a;
}

Status HostAgents::awaitHellos(const std::function<Status(int)>& still_coming) {
  const Deadline deadline = deadlineIn(options_.netns_fds.empty() ? options_.join_timeout : 30000ms);
  for (auto& host : hosts_) {
    for (;;) {
      auto hello = options_.store->get(agent_wire::hello(options_.config.run, host->index), deadlineIn(200ms));
      if (hello.isOk()) {
        auto j = agent_wire::parseEntry(*hello, "the hello of host " + std::to_string(host->index));
        if (!j.isOk()) return j.status();
        host->info.pid = j->value("pid", pid_t(0));
        host->info.hostname = j->value("hostname", "");
        host->info.address = j->value("address", "");
        host->info.device = j->value("device", "");
        host->info.launched_by = j->value("launched_by", "");
        break;
      }
      CHAOSBED_RETURN_IF_ERROR(still_coming(host->index));
      if (SteadyClock::now() > deadline)
        return Status::timeout(std::to_string(host->index) + " of " + std::to_string(hosts_.size()) +
                               " host agents came up in time; start each with: chaosbed agent --agent_config " +
                               options_.config_path);
    }
  }
  return Status::ok();
}

HostAgents::~HostAgents() {
  {
    std::lock_guard<std::mutex> lock(session_mu_);
    if (session_ != nullptr) LOG(ERROR) << "HostAgents destroyed before its session";
  }
  quitting_ = true;
  for (auto& host : hosts_) {
    if (!host->alive.load() || host->info.pid == 0) continue;  // lost, or never came up (no one to tell)
    if (auto r = order(host->index, {{"op", "quit"}, {"grace_ms", 1000}}, 5000ms); !r.isOk())
      LOG(WARNING) << "telling the agent of host " << host->index << " to quit: " << r.status().toString();
    // One that does not quit in time is killed with the launcher's nodes.
    if (started_) (void)started_->waitExit("agent-" + std::to_string(host->index), deadlineIn(10s));
  }
  stopping_ = true;
  for (auto& host : hosts_) {
    // A get that starts just after the interrupt still ends within one lease renewal; then it sees stopping_.
    host->session->interruptGets();
    if (host->watcher.joinable()) host->watcher.join();
  }
  started_.reset();  // stops any agent still running
}

const HostAgents::Host& HostAgents::host(int index) const { return hosts_.at(size_t(index))->info; }

bool HostAgents::alive(int index) const {
  return index >= 0 && index < int(hosts_.size()) && hosts_[size_t(index)]->alive.load();
}

Result<json> HostAgents::order(int host_index, json o, std::chrono::milliseconds timeout) {
  if (host_index < 0 || host_index >= int(hosts_.size()))
    return Status::invalidArgument("no host " + std::to_string(host_index) + " (the run has " +
                                   std::to_string(hosts_.size()) + ")");
  HostState& host = *hosts_[size_t(host_index)];
  std::lock_guard<std::mutex> lock(host.order_mu);
  const std::string who = "the agent of host " + std::to_string(host_index);
  if (!host.alive.load()) return Status::unavailable(who + " is gone");
  const int64_t n = host.next_order++;
  CHAOSBED_RETURN_IF_ERROR(options_.store->set(agent_wire::order(options_.config.run, host_index, n), o.dump()));
  const Deadline deadline = deadlineIn(timeout);
  for (;;) {
    auto reply = options_.store->get(agent_wire::reply(options_.config.run, host_index, n), deadlineIn(200ms));
    if (reply.isOk()) return agent_wire::parseEntry(*reply, who + "'s reply");
    if (reply.status().code() != StatusCode::kTimeout) return reply.status().withContext(who);
    if (!host.alive.load()) return Status::unavailable(who + " was lost before it answered " + o.value("op", ""));
    if (SteadyClock::now() > deadline)
      return Status::timeout(who + " did not answer " + o.value("op", "") + " within " + std::to_string(timeout.count()) + " ms");
  }
}

void HostAgents::watch(int host_index) {
  HostState& host = *hosts_[size_t(host_index)];
  const std::string& run = options_.config.run;
  const auto silence = std::chrono::duration<double>(options_.config.lease_s);
  auto renewed = SteadyClock::time_point{};
  auto heard = SteadyClock::now();
  std::optional<std::string> alive;
  for (int64_t next = 0; !stopping_.load();) {
    if (SteadyClock::now() - renewed >= options_.lease_renewal) {
      // A lost host's lease lapses: if its agent is only stalled or cut off, it stops the nodes that were
      // counted as killed once it sees that.
      // A renewal that fails is tried again next period; a lapse makes the agent stop its nodes: the safe side.
      if (host.alive.load()) (void)host.session->add(agent_wire::lease(run, host_index), 1);
      renewed = SteadyClock::now();
      if (auto a = host.session->peek({agent_wire::alive(run, host_index)}); a.isOk() && !a->empty()) {
        if ((*a)[0] != alive) {
          alive = (*a)[0];
          heard = SteadyClock::now();
        } else if (SteadyClock::now() - heard > silence && host.alive.load() && !quitting_.load()) {
          lose(host_index, "has not been heard from for " + std::to_string(options_.config.lease_s) + " s");
        }
      }
    }
    auto notice = host.session->get(agent_wire::exitNotice(run, host_index, next), deadlineIn(options_.lease_renewal));
    if (notice.isOk()) {
      ++next;
      auto j = agent_wire::parseEntry(*notice, "an exit notice of host " + std::to_string(host_index));
      auto exit = j.isOk() ? agent_wire::exitFromJson(*j) : Result<ExitInfo>(j.status());
      if (!exit.isOk()) {
        LOG(ERROR) << "host " << host_index << ": " << exit.status().toString();
        continue;
      }
      const int64_t session = j->value("session", int64_t(-1));
      std::lock_guard<std::mutex> lock(session_mu_);
      if (session_ != nullptr && session_->id_ == session) session_->deliver(*exit);
    } else if (notice.status().code() != StatusCode::kTimeout && notice.status().code() != StatusCode::kCancelled) {
      if (!stopping_.load()) LOG(ERROR) << "host " << host_index << ": reading exit notices: " << notice.status().toString();
      return;
    }
  }
}

void HostAgents::lose(int host_index, const std::string& why) {
  if (!hosts_[size_t(host_index)]->alive.exchange(false)) return;
  if (!quitting_.load())
    LOG(ERROR) << "host " << host_index << " is lost: its agent " << why << "; its nodes count as killed";
  std::lock_guard<std::mutex> lock(session_mu_);
  if (session_ != nullptr) session_->hostLost(host_index);
}

void HostAgents::agentExited(const ExitInfo& agent) {
  for (const auto& host : hosts_)
    if (agent.name == "agent-" + std::to_string(host->index)) lose(host->index, agent.describe());
}

Result<std::unique_ptr<AgentNodes>> HostAgents::session(SessionOptions options) {
  int64_t id;
  {
    std::lock_guard<std::mutex> lock(session_mu_);
    if (session_ != nullptr) return Status::internal("HostAgents: a session is open already");
    id = ++sessions_;
  }
  const json begin = {{"op", "begin"},
                      {"session", id},
                      {"log_dir", options.log_dir},
                      {"cgroup_group", options.cgroup_group},
                      {"pause_mode", options.pause_mode == PauseMode::kFreezer  ? "freezer"
                                     : options.pause_mode == PauseMode::kSignal ? "signal"
                                                                                : "auto"}};
  for (const auto& host : hosts_) {
    auto reply = order(host->index, begin, options_.order_timeout);
    Status s = reply.isOk() ? agent_wire::statusFromJson(*reply) : reply.status();
    if (!s.isOk()) return s.withContext("host " + std::to_string(host->index));
  }
  std::unique_ptr<AgentNodes> nodes(new AgentNodes(*this, id, std::move(options)));
  std::lock_guard<std::mutex> lock(session_mu_);
  session_ = nodes.get();
  return nodes;
}

// ---- AgentNodes

class AgentNodes::RemoteActuator final : public Actuator {
 public:
  explicit RemoteActuator(AgentNodes& nodes) : nodes_(nodes) {}
  const char* name() const override { return "host-agent"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override {
    return nodes_.faultOrder("check", fault, node, nullptr);
  }
  // The agent keeps its own records and heals them when the controller is gone. The controller's guardian
  // gets them too where the agents share its machine (emulated hosts): a record names a process group or a
  // cgroup there, and means nothing, or someone else, on another machine.
  Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) override {
    std::vector<HealRecord> heal;
    CHAOSBED_RETURN_IF_ERROR(nodes_.faultOrder("prepare", fault, node, &heal));
    if (!nodes_.agents_.started_) heal.clear();
    return heal;
  }
  Status apply(const Fault& fault, const std::string& node) override { return nodes_.faultOrder("apply", fault, node, nullptr); }
  Status escalate(const Fault& fault, const std::string& node) override {
    return nodes_.faultOrder("escalate", fault, node, nullptr);
  }
  Status revert(const Fault& fault, const std::string& node) override { return nodes_.faultOrder("revert", fault, node, nullptr); }

 private:
  AgentNodes& nodes_;
};

AgentNodes::AgentNodes(HostAgents& agents, int64_t id, HostAgents::SessionOptions options)
    : agents_(agents), id_(id), options_(std::move(options)), actuator_(std::make_unique<RemoteActuator>(*this)) {}

AgentNodes::~AgentNodes() {
  if (Status s = stopAll(3000ms); !s.isOk()) LOG(WARNING) << "stopping the agents' nodes: " << s.toString();
  for (const auto& host : agents_.hosts_) {
    if (host->alive.load()) {
      if (auto r = agents_.order(host->index, {{"op", "end"}, {"grace_ms", 1000}}, 10000ms); !r.isOk())
        LOG(WARNING) << "ending the session on host " << host->index << ": " << r.status().toString();
      continue;
    }
    // A lost agent never removed its nodes' cgroup group. Where its host shares this machine (emulated
    // hosts) the group is here: remove it (thawing and killing what is left in it); elsewhere there is none.
    const std::string group = options_.cgroup_group + "-h" + std::to_string(host->index);
    if (auto groups = listGroups(); groups.isOk() && std::find(groups->begin(), groups->end(), group) != groups->end())
      if (Status s = removeGroup(group); !s.isOk())
        LOG(WARNING) << "removing cgroup group " << group << " of lost host " << host->index << ": " << s.toString();
  }
  std::lock_guard<std::mutex> lock(agents_.session_mu_);
  agents_.session_ = nullptr;
}

Actuator* AgentNodes::actuator() { return actuator_.get(); }

Result<pid_t> AgentNodes::started(const std::string& name, const Result<json>& reply) {
  if (!reply.isOk()) return reply.status();
  Status s = agent_wire::statusFromJson(*reply);
  if (!s.isOk()) return s;
  const pid_t pid = reply->value("pid", pid_t(0));
  const int incarnation = reply->value("incarnation", 0);
  std::lock_guard<std::mutex> lock(mu_);
  Node& n = nodes_[name];
  n.host = options_.host_of(name);
  if (incarnation > n.incarnation) {
    n.incarnation = incarnation;
    n.pid = pid;
  }
  n.running = n.exited < n.incarnation;  // it may have died already, its notice taken up first
  return pid;
}

Result<pid_t> AgentNodes::start(const NodeSpec& spec) {
  return started(spec.name, agents_.order(options_.host_of(spec.name), {{"op", "start"}, {"spec", agent_wire::toJson(spec)}},
                                          agents_.options_.order_timeout));
}

Result<pid_t> AgentNodes::restart(const std::string& name, Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
  const auto timeout = std::max(left, 0ms);
  return started(name, agents_.order(options_.host_of(name), {{"op", "restart"}, {"node", name}, {"timeout_ms", timeout.count()}},
                                     timeout + agents_.options_.order_timeout));
}

Result<pid_t> AgentNodes::pid(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::notFound("no node named " + name);
  if (!it->second.running) return Status::unavailable("node " + name + " is not running");
  return it->second.pid;
}

bool AgentNodes::hostLost(const std::string& name) const { return !agents_.alive(options_.host_of(name)); }

bool AgentNodes::running(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it != nodes_.end() && it->second.running;
}

int AgentNodes::incarnation(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? 0 : it->second.incarnation;
}

Status AgentNodes::signal(const std::string& name, int sig) {
  auto reply = agents_.order(options_.host_of(name), {{"op", "signal"}, {"node", name}, {"sig", sig}},
                             agents_.options_.order_timeout);
  return reply.isOk() ? agent_wire::statusFromJson(*reply) : reply.status();
}

Result<ExitInfo> AgentNodes::waitExit(const std::string& name, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::notFound("no node named " + name);
  if (!exited_cv_.wait_until(lock, deadline, [&] { return !it->second.running; }))
    return Status::timeout("node " + name + " (pid " + std::to_string(it->second.pid) + ") still running");
  if (!it->second.last_exit) return Status::unavailable("node " + name + " never ran");
  return *it->second.last_exit;
}

Status AgentNodes::stopAll(std::chrono::milliseconds grace) {
  Status first;
  for (const auto& host : agents_.hosts_) {
    if (!host->alive.load()) continue;
    auto reply = agents_.order(host->index, {{"op", "stop_all"}, {"grace_ms", grace.count()}}, grace + agents_.options_.order_timeout);
    Status s = reply.isOk() ? agent_wire::statusFromJson(*reply) : reply.status();
    if (!s.isOk() && first.isOk()) first = s.withContext("host " + std::to_string(host->index));
  }
  // The agents have reaped their nodes; their notices may still be on the way.
  std::unique_lock<std::mutex> lock(mu_);
  const bool all_down = exited_cv_.wait_for(lock, 5s, [&] {
    return std::none_of(nodes_.begin(), nodes_.end(), [](const auto& n) { return n.second.running; });
  });
  if (!all_down && first.isOk()) first = Status::timeout("stopAll: exit notices of stopped nodes did not arrive");
  return first;
}

std::string AgentNodes::logPath(const std::string& name) const { return options_.log_dir + "/" + name + ".log"; }

Status AgentNodes::faultOrder(const char* action, const Fault& fault, const std::string& node, std::vector<HealRecord>* heal) {
  auto reply = agents_.order(options_.host_of(node),
                             {{"op", "fault"}, {"action", action}, {"fault", agent_wire::toJson(fault)}, {"node", node}},
                             agents_.options_.order_timeout);
  if (!reply.isOk()) return reply.status();
  CHAOSBED_RETURN_IF_ERROR(agent_wire::statusFromJson(*reply));
  if (heal != nullptr) {
    auto records = reply->find("heal");
    if (records == reply->end() || !records->is_array())
      return Status::invalidArgument(node + ": a prepare reply without heal records");
    for (const json& r : *records) {
      CHAOSBED_ASSIGN_OR_RETURN(HealRecord record, healFromJson(r));
      heal->push_back(std::move(record));
    }
  }
  return Status::ok();
}

void AgentNodes::deliver(const ExitInfo& exit) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(exit.name);
    if (it == nodes_.end()) return;  // not a node this session started
    Node& n = it->second;
    if (exit.incarnation <= n.exited) return;  // reported already (its host was lost, then its notice came)
    n.exited = exit.incarnation;
    n.last_exit = exit;
    n.running = n.exited < n.incarnation;
    exited_cv_.notify_all();
  }
  if (options_.on_exit) options_.on_exit(exit);
}

void AgentNodes::hostLost(int host) {
  std::vector<ExitInfo> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, n] : nodes_) {
      if (n.host != host || !n.running) continue;
      ExitInfo e;
      e.name = name;
      e.pid = n.pid;
      e.incarnation = n.incarnation;
      e.signaled = true;
      e.signal = SIGKILL;
      e.requested = agents_.quitting_.load();
      e.at = SteadyClock::now();
      lost.push_back(e);
    }
  }
  for (const ExitInfo& e : lost) deliver(e);
}

}  // namespace chaosbed::chaos
