#include "core/runtime/node.h"

#include <cblas.h>
#include <glog/logging.h>
#include <signal.h>

#include <atomic>
#include <fstream>

#include "core/runtime/control.h"
#include "core/strategies/evaluator.h"
#include "core/strategies/mirrored.h"
#include "core/strategies/parameter_server.h"
#include "core/strategies/strategy.h"
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
  std::string prefix;
  int workers = 1;
  int servers = 0;
  TrainingConfig training;
  StrategyOptions strategy;
  std::string checkpoint_dir;
  double connect_timeout_s = 60;
};

Result<NodeConfig> readNodeConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::notFound("node config " + path + ": cannot open");
  try {
    auto j = nlohmann::json::parse(in);
    NodeConfig c;
    c.store = j.at("store").get<std::string>();
    c.prefix = j.at("prefix").get<std::string>();
    c.workers = j.at("workers").get<int>();
    c.servers = j.value("servers", 0);
    c.training = TrainingConfig::fromJson(j.at("training"));
    c.strategy = StrategyOptions::fromJson(j.at("strategy"));
    c.checkpoint_dir = j.at("checkpoint_dir").get<std::string>();
    c.connect_timeout_s = j.value("connect_timeout_s", 60.0);
    if (c.workers < 1 || c.servers < 0) return Status::invalidArgument("node config " + path + ": bad cluster shape");
    return c;
  } catch (const std::exception& e) {
    return Status::invalidArgument("node config " + path + ": " + e.what());
  }
}

Result<int> rankOf(const NodeLaunch& launch, const NodeConfig& c) {
  if (launch.role == "worker" && launch.index >= 0 && launch.index < c.workers) return launch.index;
  if (launch.role == "ps" && launch.index >= 0 && launch.index < c.servers) return c.workers + launch.index;
  if (launch.role == "evaluator" && launch.index == 0) return c.workers + c.servers;
  return Status::invalidArgument("no " + launch.role + " " + std::to_string(launch.index) + " in a cluster of " +
                                 std::to_string(c.workers) + " workers and " + std::to_string(c.servers) +
                                 " servers");
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
  auto store = connectStore(c.store, connect_deadline);
  if (!store.isOk()) {
    LOG(ERROR) << node << ": " << store.status().toString();
    return kExitInfrastructure;
  }

  std::optional<data::DatasetSplits> data;
  if (launch.role != "ps") {
    auto loaded = loadTrainingData(c.training);
    if (!loaded.isOk()) {
      LOG(ERROR) << node << ": " << loaded.status().toString();
      return kExitInfrastructure;
    }
    data = std::move(*loaded);
  }

  UcxOptions ucx;
  ucx.rank = *rank;
  ucx.size = c.workers + c.servers + 1;
  ucx.prefix = c.prefix;
  ucx.connect_timeout = std::chrono::milliseconds(int64_t(c.connect_timeout_s * 1000));
  auto transport = createUcxTransport(**store, ucx);
  if (!transport.isOk()) {
    LOG(ERROR) << node << ": " << transport.status().toString();
    return kExitInfrastructure;
  }

  ControlChannel control(**store, c.prefix, node, launch.incarnation);
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

  NodeContext ctx{**transport, control, accounting, c.training, c.strategy};
  ctx.rank = *rank;
  ctx.workers = c.workers;
  ctx.servers = c.servers;
  ctx.checkpoint_dir = c.checkpoint_dir;
  ctx.preempt_notice = &g_preempt_notice;
  ctx.data = data ? &*data : nullptr;

  Status result;
  if (launch.role == "evaluator") {
    result = runEvaluator(ctx);
  } else if (c.strategy.kind == StrategyKind::kMirrored) {
    result = launch.role == "worker" ? runMirroredWorker(ctx)
                                     : Status::invalidArgument("mirrored has no parameter servers");
  } else {
    result = launch.role == "worker" ? runPsWorker(ctx) : runPsServer(ctx);
  }
  control.stopBackground();
  if (!result.isOk()) {
    LOG(ERROR) << node << ": " << result.toString();
    (void)control.event("error", {{"message", result.toString()}});
    return kExitInfrastructure;
  }
  return kExitOk;
}

}  // namespace chaosbed
