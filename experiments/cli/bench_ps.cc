// `chaosbed bench ps [--workers 1,2,4,8] [--shards S] [--model M] [--layers L] [--batch B] [--json]`: the
// parameter server's throughput, measured on the strategy's own code (runPsWorker, runPsServer) with N workers
// and S shards, each its own process over UCX on loopback (TCP, as training nodes run), no CPU quota.
//
// Per N: the ranks are forked (bench_ranks.h); a coordinator in the evaluator's rank starts training, lets it
// warm up, then reads every worker's stats twice, --bench_ps_s apart. A worker's rate is the growth of its
// pushes over the growth of its own wall clock, both from one report each, so the reports' period does not
// blur it. Each push is one push-pull exchange with every shard (it returns the fresh parameters), so the
// pull rate is the push rate: the protocol has no separate pull on the hot path.
//
// The limit beside the figures: min(N x the one-worker rate, the server-bound rate, the cpu-bound rate). The
// server-bound rate is the server's request handling timed alone in this process: a shard's SGD apply plus
// copying its request in and its reply out, for the largest shard (each push needs every shard). The
// cpu-bound rate is cores / the CPU seconds one push costs every node process together with one worker
// (compute, apply, and the transport's copies and system calls through TCP, the polling of its waits
// included): on 2 cores, where one worker and its server already use 1.4 cores, 4 workers cannot make 4x one
// worker's pushes. --json gives each row's own CPU seconds per push and the workers' booked compute per push.

#include <cblas.h>
#include <gflags/gflags.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics/accounting.h"
#include "core/model/mlp.h"
#include "core/model/model.h"
#include "core/optim/sgd.h"
#include "core/runtime/control.h"
#include "core/strategies/parameter_server.h"
#include "core/strategies/snapshot_receiver.h"
#include "core/strategies/tags.h"
#include "experiments/cli/bench_ranks.h"
#include "experiments/cli/cli.h"
#include "transports/bootstrap/store.h"
#include "transports/ucx/transport.h"

DEFINE_string(workers, "1,2,4,8", "bench ps: the worker counts to measure, comma-separated (each 1..64)");
DEFINE_int32(shards, 1, "bench ps: parameter-server shards (1..16)");
DEFINE_double(bench_ps_s, 3.0, "bench ps: seconds measured per worker count (after a 1 s warm-up)");
DECLARE_string(model);
DECLARE_string(layers);
DECLARE_int32(batch);
DECLARE_bool(json);

namespace chaosbed::cli {
namespace {

using std::chrono::seconds;
using std::chrono::duration;
constexpr double kWarmupS = 1.0;
constexpr const char* kPrefix = "bench-ps";
// The workers and the servers get control planes of their own, so that the servers stop only once every
// worker has: a worker's last push is answered, and no endpoint closes under a peer still using it (UCX logs
// a flush timeout on stdout there).
std::string controlPrefix(bool worker) { return std::string(kPrefix) + (worker ? "/workers" : "/servers"); }

struct Setup {
  int workers = 1;
  int shards = 1;
  TrainingConfig config;
  StrategyOptions strategy;
  std::string checkpoint_dir;
};

std::string nodeName(const Setup& s, int rank) {
  return rank < s.workers ? "worker-" + std::to_string(rank) : "ps-" + std::to_string(rank - s.workers);
}

Result<std::vector<int>> parseCounts(const std::string& text) {
  std::vector<int> counts;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    char* rest = nullptr;
    const long v = std::strtol(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || v < 1 || v > 64)
      return Status::invalidArgument("\"" + item + "\" is not a worker count in 1..64");
    counts.push_back(int(v));
    begin = end + 1;
  }
  return counts;
}

// The coordinator holds the evaluator's rank: the servers connect to it and send it the initial model's
// shards. It takes them as the evaluator would (a rendezvous send needs its receiver) until `until`.
void actAsEvaluator(Transport& transport, SnapshotReceiver& shards, Deadline until) {
  while (SteadyClock::now() < until) {
    transport.progress(until);
    shards.poll([](std::span<const std::byte>, const Request&) {});
  }
}

// A worker or a server: what `chaosbed worker|ps` does for a node, without the launcher and the faults.
int runNode(const Setup& s, int rank, Store& store, const Secret& secret) {
  const std::string node = nodeName(s, rank);
  auto fail = [&node](const Status& st) {
    std::fprintf(stderr, "chaosbed bench ps: %s: %s\n", node.c_str(), st.message().c_str());
    return kExitInfrastructure;
  };
  // One BLAS thread, as a training node runs (runNodeProcess): OpenBLAS's idle threads spin on sched_yield,
  // so N workers with a thread per core would burn the cores the others compute on.
  openblas_set_num_threads(1);
  const bool worker = rank < s.workers;
  std::optional<data::DatasetSplits> data;
  if (worker) {
    auto loaded = loadTrainingData(s.config, Splits::kTrain);
    if (!loaded.isOk()) return fail(loaded.status());
    data = std::move(*loaded);
  }
  UcxOptions ucx;
  ucx.rank = rank;
  ucx.size = s.workers + s.shards + 1;
  ucx.secret = secret;
  ucx.prefix = kPrefix;
  ucx.shared_memory = false;  // as training nodes run
  if (worker)
    for (int shard = 0; shard < s.shards; ++shard) ucx.peers.push_back(s.workers + shard);
  auto transport = createUcxTransport(store, ucx);
  if (!transport.isOk()) return fail(transport.status());
  ControlChannel control(store, controlPrefix(worker), node, 0, s.workers);
  Accounting accounting;
  const control::ControlKeys keys(kPrefix);
  if (Status st = store.set(keys.at("pid/" + node), std::to_string(::getpid())); !st.isOk()) return fail(st);
  if (Status st = control.announceReady(); !st.isOk()) return fail(st);
  if (auto start = control.waitStart(deadlineIn(seconds(60))); !start.isOk()) return fail(start.status());
  control.startBackground([&accounting] { return accounting.snapshot(); }, std::chrono::milliseconds(50));
  NodeContext ctx{.transport = **transport,
                  .control = control,
                  .accounting = accounting,
                  .config = s.config,
                  .strategy = s.strategy,
                  .rank = rank,
                  .workers = s.workers,
                  .servers = s.shards,
                  .checkpoint_dir = s.checkpoint_dir,
                  .data = data ? &*data : nullptr};
  accounting.start();
  Status result = worker ? runPsWorker(ctx) : runPsServer(ctx);
  accounting.finish();
  control.stopBackground();
  if (!result.isOk()) return fail(result);
  Status said = store.set(control::ControlKeys(kPrefix).at("finished/" + std::to_string(rank)), "1");
  return said.isOk() ? kExitPass : fail(said);
}

struct Reading {
  int64_t steps = 0;
  double wall = 0;
  double compute = 0;  // booked compute seconds
};

// The CPU seconds (user + system) that the node processes have used so far, from /proc/<pid>/stat.
Result<double> nodesCpuSeconds(const Setup& s, Store& store, const control::ControlKeys& keys) {
  double total = 0;
  for (int r = 0; r < s.workers + s.shards; ++r) {
    CHAOSBED_ASSIGN_OR_RETURN(std::string pid, store.get(keys.at("pid/" + nodeName(s, r)), deadlineIn(seconds(10))));
    std::ifstream in("/proc/" + pid + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Fields after the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) return Status::unavailable("/proc/" + pid + "/stat: unreadable");
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    double utime = -1, stime = -1;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stod(field);
      if (i == 15) stime = std::stod(field);
    }
    if (utime < 0 || stime < 0) return Status::unavailable("/proc/" + pid + "/stat: no CPU times");
    total += (utime + stime) / double(::sysconf(_SC_CLK_TCK));
  }
  return total;
}

Result<std::vector<Reading>> readWorkers(const Setup& s, Store& store, const control::ControlKeys& keys) {
  std::vector<Reading> out;
  for (int w = 0; w < s.workers; ++w) {
    CHAOSBED_ASSIGN_OR_RETURN(std::string text, store.get(keys.stats(nodeName(s, w), 0), deadlineIn(seconds(10))));
    CHAOSBED_ASSIGN_OR_RETURN(NodeStats stats, NodeStats::decode(text));
    out.push_back({stats.steps, stats.wall_seconds, stats.seconds[size_t(TimeCategory::kCompute)]});
  }
  return out;
}

// The evaluator's rank: the servers connect to every rank, so it holds a transport; it runs the measurement
// and writes each worker's pushes/s, as JSON, to `row_file` for the parent.
int runCoordinator(const Setup& s, int rank, Store& store, const Secret& secret, const std::string& row_file) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "chaosbed bench ps: coordinator: %s\n", st.message().c_str());
    return kExitInfrastructure;
  };
  UcxOptions ucx;
  ucx.rank = rank;
  ucx.size = s.workers + s.shards + 1;
  ucx.secret = secret;
  ucx.prefix = kPrefix;
  ucx.shared_memory = false;
  auto transport = createUcxTransport(store, ucx);
  if (!transport.isOk()) return fail(transport.status());
  auto model = makeModel(s.config, 1);
  if (!model.isOk()) return fail(model.status());
  SnapshotReceiver shards(**transport, kShardSnapshotTag,
                          sizeof(ShardSnapshotHeader) + (*model)->numParameters() * sizeof(float));
  const control::ControlKeys keys(kPrefix), workers(controlPrefix(true)), servers(controlPrefix(false));
  for (int r = 0; r < s.workers + s.shards; ++r)
    if (auto ready = store.get((r < s.workers ? workers : servers).ready(nodeName(s, r), 0), deadlineIn(seconds(60)));
        !ready.isOk())
      return fail(ready.status());
  const std::string start = std::to_string(realtimeNs());
  for (const auto* plane : {&workers, &servers})
    if (Status st = store.set(plane->start(), start); !st.isOk()) return fail(st);
  actAsEvaluator(**transport, shards, deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(duration<double>(kWarmupS))));
  auto cpu_before = nodesCpuSeconds(s, store, keys);
  auto first = readWorkers(s, store, workers);
  if (!first.isOk()) return fail(first.status());
  actAsEvaluator(**transport, shards, deadlineIn(std::chrono::duration_cast<std::chrono::nanoseconds>(duration<double>(FLAGS_bench_ps_s))));
  auto second = readWorkers(s, store, workers);
  auto cpu_after = nodesCpuSeconds(s, store, keys);
  (void)store.set(workers.stop(), "bench done");  // nodes that miss it are stopped with the launcher
  if (!second.isOk()) return fail(second.status());
  if (!cpu_before.isOk() || !cpu_after.isOk()) return fail(cpu_before.isOk() ? cpu_after.status() : cpu_before.status());
  std::vector<double> per_worker;
  double compute = 0;
  int64_t all_pushes = 0;
  for (int w = 0; w < s.workers; ++w) {
    compute += (*second)[size_t(w)].compute - (*first)[size_t(w)].compute;
    all_pushes += (*second)[size_t(w)].steps - (*first)[size_t(w)].steps;
    const double dt = (*second)[size_t(w)].wall - (*first)[size_t(w)].wall;
    const int64_t pushes = (*second)[size_t(w)].steps - (*first)[size_t(w)].steps;
    if (dt <= 0 || pushes <= 0) return fail(Status::internal(nodeName(s, w) + " made no push in the measured window"));
    per_worker.push_back(double(pushes) / dt);
  }
  FILE* f = std::fopen(row_file.c_str(), "wx");  // a fresh name in the bench's own directory
  if (f == nullptr) return fail(Status::fromErrno(row_file));
  const std::string text =
      nlohmann::json{{"per_worker", per_worker}, {"cpu_seconds", *cpu_after - *cpu_before},
                     {"seconds", FLAGS_bench_ps_s}, {"compute_seconds_per_push", compute / double(all_pushes)}}.dump();
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !written) return fail(Status::ioError(row_file + ": write failed"));
  // The servers stop once every worker has; this rank leaves last, so no endpoint to it closes unanswered.
  for (int r = 0; r < s.workers + s.shards; ++r) {
    if (r == s.workers)
      if (Status st = store.set(servers.stop(), "bench done"); !st.isOk()) return fail(st);
    Deadline until = deadlineIn(seconds(60));
    for (;;) {
      auto finished = store.contains(keys.at("finished/" + std::to_string(r)));
      if (!finished.isOk()) return fail(finished.status());
      if (*finished) break;
      if (SteadyClock::now() >= until) return fail(Status::timeout(nodeName(s, r) + " did not finish"));
      actAsEvaluator(**transport, shards, deadlineIn(std::chrono::milliseconds(10)));
    }
  }
  return kExitPass;
}

// The server's handling of one push, timed alone: copy the request's gradient in, apply SGD with momentum,
// copy the fresh shard out into the reply. Pushes per second the servers could serve if nothing else ran.
Result<double> serverBoundRate(const Setup& s) {
  CHAOSBED_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, makeModel(s.config, 1));
  size_t largest = 0;
  for (const ShardRange& r : shardRanges(model->numParameters(), s.shards)) largest = std::max(largest, r.count);
  optim::SgdOptions o;
  o.lr = float(s.config.learning_rate);
  o.momentum = float(s.config.momentum);
  CHAOSBED_ASSIGN_OR_RETURN(optim::Sgd sgd, optim::Sgd::create(o, largest));
  std::vector<float> params(largest, 0.5f), request(largest, 1e-6f), grad(largest), reply(largest);
  int64_t n = 0;
  const auto start = SteadyClock::now();
  const auto until = start + std::chrono::milliseconds(500);
  for (; SteadyClock::now() < until || n < 100; ++n) {
    std::memcpy(grad.data(), request.data(), largest * sizeof(float));
    CHAOSBED_RETURN_IF_ERROR(sgd.apply(params, grad, 1.0f / float(s.workers)));
    std::memcpy(reply.data(), params.data(), largest * sizeof(float));
  }
  return double(n) / std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace

int runBenchPs(int argc, char** argv) {
  const char* who = "chaosbed bench ps";
  if (argc != 1) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", who, argv[1]);
    return kExitUsage;
  }
  auto counts = parseCounts(FLAGS_workers);
  if (!counts.isOk()) {
    std::fprintf(stderr, "%s: --workers: %s\n", who, counts.status().message().c_str());
    return kExitUsage;
  }
  if (FLAGS_shards < 1 || FLAGS_shards > 16 || !(FLAGS_bench_ps_s > 0) || FLAGS_batch < 1) {
    std::fprintf(stderr, "%s: --shards must be in 1..16, --bench_ps_s and --batch positive\n", who);
    return kExitUsage;
  }
  Setup s;
  s.shards = FLAGS_shards;
  s.config.model = FLAGS_model;
  auto kind = model::parseKind(FLAGS_model);
  if (!kind.isOk()) {
    std::fprintf(stderr, "%s: --model: %s\n", who, kind.status().message().c_str());
    return kExitUsage;
  }
  auto layers = model::parseLayers(*kind == model::Kind::kMlp ? FLAGS_layers : "784,10");
  if (!layers.isOk()) {
    std::fprintf(stderr, "%s: --layers: %s\n", who, layers.status().message().c_str());
    return kExitUsage;
  }
  s.config.layers.assign(layers->begin(), layers->end());
  s.config.dataset = "synthetic";
  s.config.batch_per_worker = FLAGS_batch;
  s.config.learning_rate = 0.01;
  s.config.momentum = 0.9;
  s.config.time_limit_s = 3600;        // the coordinator stops it
  s.config.eval_interval_s = 1e9;      // no snapshots: nothing to evaluate
  s.config.checkpoint_interval_s = 1e9;
  s.strategy.kind = StrategyKind::kParameterServer;
  s.strategy.label = "parameter_server";
  s.strategy.shards = s.shards;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec) / ("chaosbed-bench-ps-" + std::to_string(::getpid()));
  if (ec || !std::filesystem::create_directory(dir, ec)) {
    std::fprintf(stderr, "%s: cannot create %s: %s\n", who, dir.c_str(), ec.message().c_str());
    return kExitInfrastructure;
  }
  s.checkpoint_dir = dir.string();

  if (!FLAGS_json) {
    std::printf("# parameter server, %s model, batch %d, UCX over TCP loopback, %u cores, %.1f s per row\n",
                FLAGS_model.c_str(), FLAGS_batch, std::thread::hardware_concurrency(), FLAGS_bench_ps_s);
    std::printf("%7s %6s %12s %12s %12s %12s %12s %8s\n", "workers", "shards", "pushes/s", "per worker",
                "server-bound", "cpu-bound", "limit", "of limit");
  }
  std::fflush(stdout);
  double cpu_bound = 0;  // pushes/s the machine's cores allow at one push's CPU cost (from N = 1)
  double single = 0;  // the one-worker rate: measured first, whether or not --workers lists 1
  int code = kExitPass;
  std::vector<int> order = *counts;
  const bool listed_one = std::find(order.begin(), order.end(), 1) != order.end();
  if (!listed_one) order.insert(order.begin(), 1);
  for (size_t i = 0; i < order.size() && code == kExitPass; ++i) {
    const int n = order[i];
    s.workers = n;
    auto server = serverBoundRate(s);
    if (!server.isOk()) {
      std::fprintf(stderr, "%s: %s\n", who, server.status().message().c_str());
      code = kExitInfrastructure;
      break;
    }
    const std::string row_file = (dir / ("row-" + std::to_string(i) + ".json")).string();
    std::fflush(stdout);  // the children inherit stdio's buffer
    code = runRanks(who, n + s.shards + 1, [&](int rank, const std::string& address, const Secret& secret) {
      // UCX logs on stdout (a flush to a worker that has left, at a server's exit): the table is the parent's.
      ::dup2(STDERR_FILENO, STDOUT_FILENO);
      auto store = connectStore(address, secret, deadlineIn(seconds(10)));
      if (!store.isOk()) {
        std::fprintf(stderr, "%s: rank %d: %s\n", who, rank, store.status().message().c_str());
        return kExitInfrastructure;
      }
      return rank == n + s.shards ? runCoordinator(s, rank, **store, secret, row_file) : runNode(s, rank, **store, secret);
    });
    if (code != kExitPass) break;
    std::vector<double> per_worker;
    double cpu_seconds = 0, window = 0, compute_per_push = 0;
    try {
      std::ifstream in(row_file);
      const nlohmann::json row = nlohmann::json::parse(in);
      per_worker = row.at("per_worker").get<std::vector<double>>();
      cpu_seconds = row.at("cpu_seconds").get<double>();
      window = row.at("seconds").get<double>();
      compute_per_push = row.at("compute_seconds_per_push").get<double>();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s: %s\n", who, row_file.c_str(), e.what());
      code = kExitInfrastructure;
      break;
    }
    double total = 0;
    for (double r : per_worker) total += r;
    if (n == 1) {
      single = total;
      // What one push costs the machine, measured alone: its worker's compute, its server's handling, and
      // moving 2 x the shard through TCP on both sides (copies and system calls, about as much CPU again as
      // the compute here). The cores carry no more pushes than cores / that, however many workers share them.
      cpu_bound = double(std::thread::hardware_concurrency()) * total * window / cpu_seconds;
    }
    if (n == 1 && !listed_one) continue;  // measured for the limit only
    const double limit = std::min({double(n) * single, *server, cpu_bound});
    if (FLAGS_json) {
      const nlohmann::json j = {{"workers", n},
                                {"shards", s.shards},
                                {"model", s.config.model},
                                {"batch", s.config.batch_per_worker},
                                {"pushes_per_s", total},
                                {"per_worker_pushes_per_s", per_worker},
                                {"one_worker_pushes_per_s", single},
                                {"server_bound_pushes_per_s", *server},
                                {"cpu_bound_pushes_per_s", cpu_bound},
                                {"cpu_seconds_per_push", cpu_seconds / (total * window)},  // every node, spins included
                                {"compute_seconds_per_push", compute_per_push},  // workers' booked compute
                                {"limit_pushes_per_s", limit},
                                {"of_limit", total / limit},
                                {"cores", std::thread::hardware_concurrency()}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%7d %6d %12.0f %12.0f %12.0f %12.0f %12.0f %8.2f\n", n, s.shards, total, total / double(n),
                  *server, cpu_bound, limit, total / limit);
    }
  }
  std::filesystem::remove_all(dir, ec);
  return code;
}

}  // namespace chaosbed::cli
