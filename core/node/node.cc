#include "core/node/node.h"

#include <cblas.h>
#include <glog/logging.h>
#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <map>

#include "core/control/node_id.h"
#include "core/runtime/control.h"
#include "core/strategies/evaluator.h"
#include "core/strategies/mirrored.h"
#include "core/strategies/parameter_server.h"
#include "core/strategies/strategy.h"
#include "transports/faulty/faulty_transport.h"
#include "transports/shaper/link_shaper.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

constexpr int kExitOk = 0;
constexpr int kExitBadConfig = 3;
constexpr int kExitInfrastructure = 4;

std::atomic<bool> g_preempt_notice{false};

void onSigterm(int) { g_preempt_notice.store(true, std::memory_order_relaxed); }

struct NodeConfig {
  std::string store;
  std::string secret_file;  // the run's Secret (a 0600 file of the controller's)
  std::string prefix;
  int workers = 1;
  int servers = 0;
  TrainingConfig training;
  StrategyOptions strategy;
  std::string checkpoint_dir;
  double connect_timeout_s = 60;
  bool simulate = false;  // cluster.simulate: the control plane only, no transport, no training
  // hosts: {netns | agents: N}: each node's address on its host, and the interface that holds it (where not
  // loopback); the node's listeners bind that address and UCX uses that device. Empty: one host, loopback.
  std::map<std::string, std::string> host_addresses;
  std::map<std::string, std::string> net_devices;
};

Result<NodeConfig> readNodeConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::notFound("node config " + path + ": cannot open");
  try {
    auto j = nlohmann::json::parse(in);
    NodeConfig c;
    c.store = j.at("store").get<std::string>();
    c.secret_file = j.at("secret_file").get<std::string>();
    c.prefix = j.at("prefix").get<std::string>();
    c.workers = j.at("workers").get<int>();
    c.servers = j.value("servers", 0);
    c.training = TrainingConfig::fromJson(j.at("training"));
    c.strategy = StrategyOptions::fromJson(j.at("strategy"));
    c.checkpoint_dir = j.at("checkpoint_dir").get<std::string>();
    c.connect_timeout_s = j.value("connect_timeout_s", 60.0);
    c.simulate = j.value("simulate", false);
    c.host_addresses = j.value("host_addresses", std::map<std::string, std::string>{});
    c.net_devices = j.value("net_devices", std::map<std::string, std::string>{});
    if (c.workers < 1 || c.servers < 0) return Status::invalidArgument("node config " + path + ": bad cluster shape");
    return c;
  } catch (const std::exception& e) {
    return Status::invalidArgument("node config " + path + ": " + e.what());
  }
}

// The transport rank of a node name ("worker-2", "ps-0", "evaluator-0"), or -1. Names come from the store
// (link commands): the index must be plain decimal digits, nothing else.
int rankOfNode(const std::string& name, const NodeConfig& c) {
  const auto id = control::NodeId::parse(name);
  if (!id) return -1;
  if (id->role == control::Role::kWorker && id->index < c.workers) return id->index;
  if (id->role == control::Role::kServer && id->index < c.servers) return c.workers + id->index;
  if (id->role == control::Role::kEvaluator && id->index == 0) return c.workers + c.servers;
  return -1;
}

// The node's transport stack under chaos: UCX, the link shaper (link faults) and the fault injector
// (transport_error faults), outermost. Rules are added and removed by the link watcher thread only.
struct FaultableTransport {
  int incarnation = 0;  // this process's (the control plane's count of predecessors)
  LinkShaper* shaper = nullptr;
  std::unique_ptr<FaultyTransport> top;
  std::map<uint64_t, std::vector<int>> rules;  // transport_error fault id -> its rule ids
};

// A transport_error command: the rules of transports/faulty that make this node's transport fail the way
// UCX reports it (fail: an I/O error on the operation; drop: lost on the wire; break_peer: a reset
// connection; abort_collective: the next collective step aborted).
Status applyTransportError(const LinkCommand& cmd, FaultableTransport& t, const NodeConfig& config) {
  if (cmd.op == LinkCommand::Op::kClearErrors) {
    for (int id : t.rules[cmd.fault]) t.top->removeRule(id);
    t.rules.erase(cmd.fault);
    return Status::ok();
  }
  if (cmd.incarnation != t.incarnation) return Status::ok();  // for a predecessor: this process starts sound
  std::vector<int> peers;
  for (const std::string& peer : cmd.peers)
    if (const int rank = rankOfNode(peer, config); rank >= 0 && rank != t.top->rank()) peers.push_back(rank);
  if (cmd.peers.empty()) peers.push_back(kAnyPeer);
  if (peers.empty()) return Status::ok();  // only peers this strategy does not run (a ps under mirrored)
  const Status injected = Status::ioError("injected transport_error " + cmd.error + " (fault " +
                                          std::to_string(cmd.fault) + ")");
  for (int peer : peers) {
    Result<int> id = Status::ok();
    if (cmd.error == "break_peer") {
      if (peer != kAnyPeer) t.top->breakPeer(peer, "ucx: Connection reset by remote peer (injected transport_error)");
      continue;
    }
    if (cmd.error == "abort_collective") {
      id = t.top->failNextCollectiveStep();
    } else {
      FaultRule r;
      r.op = cmd.error == "fail_recv" ? FaultOp::kRecv : FaultOp::kSend;
      r.peer = peer;
      r.skip = uint64_t(cmd.nth - 1);
      r.times = cmd.error == "drop" ? FaultRule::kForever : uint64_t(cmd.count);
      r.action = cmd.error == "drop" ? FaultAction::kDrop : FaultAction::kFail;
      r.status = injected;
      id = t.top->addRule(r);
    }
    if (!id.isOk()) return id.status();
    t.rules[cmd.fault].push_back(*id);
    if (cmd.error == "abort_collective") break;  // one step of this node's collectives, whatever the peer
  }
  return Status::ok();
}

// Applies a checked link command (core/runtime/link_command.h) to this node's shaper. Peers this strategy
// does not run (a ps under mirrored) are skipped; a peer the shaper refuses fails the command after the
// others were applied (the ack then says "rejected").
Status applyLinkCommand(const LinkCommand& cmd, FaultableTransport& t, const NodeConfig& config) {
  if (cmd.op == LinkCommand::Op::kError || cmd.op == LinkCommand::Op::kClearErrors)
    return applyTransportError(cmd, t, config);
  LinkShaper& shaper = *t.shaper;
  LinkParams params;
  if (cmd.op == LinkCommand::Op::kSet) {
    // decodeLinkCommand bounds both, so neither conversion can overflow.
    params.latency = std::chrono::microseconds(int64_t(cmd.latency_ms * 1000));
    params.bandwidth_bytes_per_s = cmd.bandwidth_mbps * 1e6 / 8;
    params.partitioned = cmd.partition;
  }
  Status first;
  for (const std::string& peer : cmd.peers) {
    const int rank = rankOfNode(peer, config);
    if (rank < 0) continue;  // a node this strategy does not run (a ps under mirrored)
    if (Status s = shaper.setLink(rank, params); !s.isOk() && first.isOk()) first = s.withContext("link to " + peer);
  }
  return first;
}

Result<int> rankOf(const NodeLaunch& launch, const NodeConfig& c) {
  if (launch.role == "worker" && launch.index >= 0 && launch.index < c.workers) return launch.index;
  if (launch.role == "ps" && launch.index >= 0 && launch.index < c.servers) return c.workers + launch.index;
  if (launch.role == "evaluator" && launch.index == 0) return c.workers + c.servers;
  return Status::invalidArgument("no " + launch.role + " " + std::to_string(launch.index) + " in a cluster of " +
                                 std::to_string(c.workers) + " workers and " + std::to_string(c.servers) +
                                 " servers");
}

// Runs the node's role.
Status runRole(const std::string& role, const NodeConfig& c, NodeContext& ctx) {
  if (role == "evaluator") return runEvaluator(ctx);
  if (c.strategy.kind == StrategyKind::kMirrored)
    return role == "worker" ? runMirroredWorker(ctx) : Status::invalidArgument("mirrored has no parameter servers");
  return role == "worker" ? runPsWorker(ctx) : runPsServer(ctx);
}

// cluster.simulate: the node does everything a node does on the control plane and nothing else, so that a
// controller can be measured with many nodes on one machine. It announces itself, waits for the start,
// reports stats every 250 ms (its whole time booked as waiting: it works for no one), appends a
// "simulated.report" event every eval_interval_s, and, as a worker, a "membership.seen" event for each
// generation it sees (so publication latency can be read from events.jsonl). Link commands are answered
// as rejected: there is no transport to shape.
Status runSimulatedNode(const std::string& role, const NodeConfig& c, ControlChannel& control, Deadline connect_deadline) {
  if (Status s = control.announceReady(); !s.isOk()) return s;
  if (auto start = control.waitStart(connect_deadline); !start.isOk()) return start.status();
  Accounting accounting;
  control.startBackground([&accounting] { return accounting.snapshot(); }, 250ms);
  control.startLinkWatcher(
      [](const LinkCommand&) { return Status::unavailable("a simulated node has no transport to shape"); });
  accounting.start();
  Status result;
  {
    const auto interval = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(std::max(0.05, c.training.eval_interval_s)));
    Deadline next_report = SteadyClock::now();
    int64_t reports = 0, seen = -1;
    // The first report goes out even when the stop is already published (a replacement that started late):
    // every process that started is heard from once.
    for (bool first = true; result.isOk() && (first || !control.stopRequested()); first = false) {
      if (SteadyClock::now() >= next_report) {
        result = control.append(events::SimulatedReport{.seq = reports++});
        next_report += interval;
        continue;
      }
      if (role != "worker") {
        control.waitStopRequested(next_report);
        continue;
      }
      auto m = control.waitMembershipAfter(seen, next_report);
      if (m.isOk()) {
        seen = m->generation;
        result = control.append(events::MembershipSeen{.generation = seen});
      } else if (m.status().code() != StatusCode::kTimeout) {
        control.waitStopRequested(next_report);  // logged by the channel; try again at the next report
      }
    }
  }
  accounting.finish();
  control.stopBackground();
  return result;
}

}  // namespace

int runNodeProcess(const NodeLaunch& launch) {
  // Each node is one core's worth of work at most: BLAS threads would only fight the other nodes.
  openblas_set_num_threads(1);

  auto config = readNodeConfig(launch.config_path);
  if (!config.isOk()) {
    LOG(ERROR) << config.status().toString();
    return kExitBadConfig;
  }
  const NodeConfig& c = *config;
  auto rank = rankOf(launch, c);
  if (!rank.isOk()) {
    LOG(ERROR) << rank.status().toString();
    return kExitBadConfig;
  }
  const std::string node = launch.role + "-" + std::to_string(launch.index);
  if (c.strategy.checkpoint_on_notice) {
    struct sigaction sa {};
    sa.sa_handler = onSigterm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
  }

  const Deadline connect_deadline = deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(c.connect_timeout_s)));
  auto secret = Secret::readFile(c.secret_file);
  if (!secret.isOk()) {
    LOG(ERROR) << node << ": " << secret.status().toString();
    return kExitBadConfig;
  }
  auto store = connectStore(c.store, *secret, connect_deadline);
  if (!store.isOk()) {
    LOG(ERROR) << node << ": " << store.status().toString();
    return kExitInfrastructure;
  }

  if (c.simulate) {
    // Simulated nodes stand for processes on other machines: on this one they yield every core the
    // controller wants, so that what is measured is the controller, not hundreds of processes on two cores.
    if (::setpriority(PRIO_PROCESS, 0, 19) != 0) PLOG(WARNING) << node << ": setpriority";
    ControlChannel control(**store, c.prefix, node, std::max(0, launch.incarnation - 1), c.workers);
    Status s = runSimulatedNode(launch.role, c, control, connect_deadline);
    if (!s.isOk()) {
      LOG(ERROR) << node << ": " << s.toString();
      return kExitInfrastructure;
    }
    return control.controllerLost() ? kExitInfrastructure : kExitOk;
  }

  std::optional<data::DatasetSplits> data;
  if (launch.role != "ps") {
    auto loaded = loadTrainingData(c.training, launch.role == "evaluator" ? Splits::kTest : Splits::kTrain);
    if (!loaded.isOk()) {
      LOG(ERROR) << node << ": " << loaded.status().toString();
      return kExitInfrastructure;
    }
    data = std::move(*loaded);
  }

  UcxOptions ucx;
  ucx.rank = *rank;
  ucx.size = c.workers + c.servers + 1;
  ucx.secret = *secret;
  ucx.prefix = c.prefix;
  ucx.connect_timeout = std::chrono::milliseconds(int64_t(c.connect_timeout_s * 1000));
  if (auto host = c.host_addresses.find(node); host != c.host_addresses.end()) {
    ucx.control_host = host->second;
    if (auto device = c.net_devices.find(node); device != c.net_devices.end()) ucx.net_devices = device->second;
  }
  // A parameter-server worker talks to the servers only: under churn, connecting to the other workers would
  // only meet dead incarnations' stale records.
  if (c.strategy.kind == StrategyKind::kParameterServer && launch.role == "worker")
    for (int s = 0; s < c.servers; ++s) ucx.peers.push_back(c.workers + s);
  auto ucx_transport = createUcxTransport(**store, ucx);
  if (!ucx_transport.isOk()) {
    LOG(ERROR) << node << ": " << ucx_transport.status().toString();
    return kExitInfrastructure;
  }
  // Link faults act on this node's sends; an idle shaper and fault injector add a branch per message each.
  FaultableTransport transport;
  transport.incarnation = std::max(0, launch.incarnation - 1);
  {
    auto shaper = std::make_unique<LinkShaper>(std::move(*ucx_transport));
    transport.shaper = shaper.get();
    transport.top = std::make_unique<FaultyTransport>(std::move(shaper));
  }

  // The control plane counts predecessors: 0 for a node's first process (the launcher counts from 1).
  ControlChannel control(**store, c.prefix, node, std::max(0, launch.incarnation - 1), c.workers);
  Accounting accounting;
  if (Status s = control.announceReady(); !s.isOk()) {
    LOG(ERROR) << node << ": " << s.toString();
    return kExitInfrastructure;
  }
  auto start = control.waitStart(connect_deadline);
  if (!start.isOk()) {
    LOG(ERROR) << node << ": " << start.status().toString();
    return kExitInfrastructure;
  }
  control.startBackground([&accounting] { return accounting.snapshot(); }, 250ms);
  control.startLinkWatcher([&transport, &c](const LinkCommand& cmd) { return applyLinkCommand(cmd, transport, c); });

  NodeContext ctx{.transport = *transport.top,
                  .control = control,
                  .accounting = accounting,
                  .config = c.training,
                  .strategy = c.strategy,
                  .rank = *rank,
                  .workers = c.workers,
                  .servers = c.servers,
                  .checkpoint_dir = c.checkpoint_dir,
                  .preempt_notice = &g_preempt_notice,
                  .data = data ? &*data : nullptr};

  // The wall clock starts with the role, not with the threads above (their start-up would count against a
  // short-lived replacement's residual). What the role's frames leave unbooked is unattributed (finish()).
  // The evaluator trains nothing: no wall to account for.
  if (launch.role != "evaluator") accounting.start();
  Status result = runRole(launch.role, c, ctx);
  accounting.finish();
  control.stopBackground();  // sends the final report
  if (!result.isOk()) {
    LOG(ERROR) << node << ": " << result.toString();
    control.record(events::Error{.message = result.toString()});
    return kExitInfrastructure;
  }
  if (control.controllerLost()) {
    LOG(ERROR) << node << ": stopped because the controller is gone";
    return kExitInfrastructure;
  }
  return kExitOk;
}

}  // namespace chaosbed
