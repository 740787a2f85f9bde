#include "experiments/spec/spec.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <regex>
#include <set>

#include "chaos/model/cluster.h"
#include "chaos/schedule/schedule.h"
#include "core/control/node_id.h"
#include "core/config/override.h"
#include "transports/bootstrap/net.h"

namespace chaosbed::spec {
namespace {

using config::ConfigNode;
using config::Diagnostics;
using config::Range;

constexpr int kMaxNodes = 1024;
constexpr int kMaxNetnsHosts = 64;  // EmulatedHosts::kMaxHosts (the addresses of one /24)
constexpr int kMaxSweepSeeds = 1000;

bool isValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
           c == '-';
  });
}

void checkName(const ConfigNode& parent, const std::string& key, const std::string& value) {
  if (parent.has(key) && !value.empty() && !isValidName(value))
    parent.errorAt(key, "'" + value + "' may only use letters, digits, '.', '_' and '-' (at most 128)");
}

// "host:port" or "[v6]:port"; returns an error message or an empty string.
std::string checkHostPort(std::string_view s) {
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) return "expected host:port, got '" + std::string(s) + "'";
  std::string_view host = s.substr(0, colon), port = s.substr(colon + 1);
  if (host.empty()) return "missing host in '" + std::string(s) + "'";
  if (host.front() == '[' ? host.back() != ']' : host.find(':') != std::string_view::npos)
    return "an IPv6 host must be in brackets, e.g. [::1]:9464; got '" + std::string(s) + "'";
  int p = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535)
    return "port must be a number in [0, 65535], got '" + std::string(port) + "'";
  return "";
}

template <class Enum, size_t N>
Enum enumFrom(const std::string& s, const std::pair<Enum, const char*> (&table)[N], Enum fallback) {
  for (const auto& [v, n] : table)
    if (s == n) return v;
  return fallback;
}

template <class Enum, size_t N>
const char* enumName(Enum v, const std::pair<Enum, const char*> (&table)[N]) {
  for (const auto& [e, n] : table)
    if (e == v) return n;
  return "?";
}

constexpr std::pair<Transport, const char*> kTransports[] = {{Transport::kUcx, "ucx"}, {Transport::kNccl, "nccl"}};
constexpr std::pair<Hosts, const char*> kHosts[] = {{Hosts::kLocal, "local"}, {Hosts::kNetns, "netns"}, {Hosts::kAgents, "agents"}};
constexpr std::pair<Dataset, const char*> kDatasets[] = {
    {Dataset::kFashionMnist, "fashion-mnist"}, {Dataset::kMnist, "mnist"}, {Dataset::kSynthetic, "synthetic"}};
constexpr std::pair<OnFailure, const char*> kOnFailure[] = {{OnFailure::kRestart, "restart"},
                                                            {OnFailure::kElastic, "elastic"}};
constexpr std::pair<OnServerFailure, const char*> kOnServerFailure[] = {
    {OnServerFailure::kShardRestart, "shard_restart"}, {OnServerFailure::kJobRestart, "job_restart"}};

// ---- sections ----

void parseMetadata(const ConfigNode& root, ExperimentSpec* spec) {
  ConfigNode m = root.requiredChild("metadata");
  m.checkKeys({"name", "description", "labels"});
  spec->metadata.name = m.required<std::string>("name");
  checkName(m, "name", spec->metadata.name);
  spec->metadata.description = m.optional<std::string>("description", "");
  for (const auto& [key, value] : m.child("labels").entries()) {
    if (!isValidName(key)) value.error("label names may only use letters, digits, '.', '_' and '-'");
    spec->metadata.labels[key] = value.as<std::string>();
  }
}

// hosts: local | {netns: N, placement: {node: host}} | {agents: N, listen: ADDRESS, placement: ...}. Nodes not
// placed by name go round-robin in launch order (workers, servers, the evaluator).
void parseHosts(const ConfigNode& cluster, ClusterSpec* c) {
  ConfigNode h = cluster.child("hosts");
  if (h.isNull() || h.isScalar()) {
    if (h.isScalar() && (h.as<std::string>() == "netns" || h.as<std::string>() == "agents")) {
      h.error("give the number of hosts: hosts: {" + h.as<std::string>() + ": N}");
      return;
    }
    c->hosts = enumFrom(cluster.oneOf("hosts", {"local"}, "local"), kHosts, Hosts::kLocal);
    return;
  }
  if (!h.isMap()) {
    h.error("expected local, {netns: N} (N emulated hosts, network namespaces on this machine) or {agents: N} "
            "(N machines, each running chaosbed agent)");
    return;
  }
  h.checkKeys({"netns", "agents", "listen", "names", "list", "placement"});
  if (h.has("list")) {
    h.rejectKey("list", "machines are not listed: start chaosbed agent on each (it joins the run through the "
                        "results directory's agents.json) and say how many with hosts: {agents: N, listen: ADDRESS}");
    return;
  }
  if (h.has("netns") == h.has("agents")) {
    h.error(h.has("netns") ? "netns and agents exclude each other: emulated hosts on this machine, or real ones"
                           : "give netns: N (emulated hosts) or agents: N (machines running chaosbed agent)");
    return;
  }
  if (h.has("agents")) {
    c->hosts = Hosts::kAgents;
    c->agent_hosts = h.required<int>("agents", Range::closed(1, kMaxNodes));
    c->listen = h.optional<std::string>("listen", c->listen);
    // Where the store listens: one interface of this machine, named; a wildcard would offer it to every network.
    auto where = net::parseHostPort(c->listen.find(':') == std::string::npos ? c->listen + ":0" : c->listen);
    in_addr ip{};
    if (!where.isOk() || ::inet_pton(AF_INET, where->host.c_str(), &ip) != 1)
      h.child("listen").error("expected an IPv4 address of this machine, optionally with :port (e.g. 10.0.0.5 or "
                              "10.0.0.5:29500)");
    else if (ip.s_addr == htonl(INADDR_ANY))
      h.child("listen").error("0.0.0.0 would listen on every network: name the address of the interface the "
                              "agents reach this machine on");
    c->host_names = h.optional<std::vector<std::string>>("names", {});
    if (h.has("names") && int(c->host_names.size()) != c->agent_hosts)
      h.child("names").error("names " + std::to_string(c->host_names.size()) + " machine(s), but agents is " +
                             std::to_string(c->agent_hosts) + ": one name per host (a machine named twice runs two)");
    for (const std::string& name : c->host_names)
      if (name.empty() || name.find_first_of(" \t\n/") != std::string::npos)
        h.child("names").error("'" + name + "' is not a host name");
  } else {
    c->hosts = Hosts::kNetns;
    c->netns_hosts = h.required<int>("netns", Range::closed(1, kMaxNetnsHosts));
    if (h.has("listen")) h.rejectKey("listen", "emulated hosts reach the controller on their bridge; listen is for {agents: N}");
    if (h.has("names")) h.rejectKey("names", "emulated hosts are numbered; names are for {agents: N}");
  }
  const int hosts = c->hostCount();
  const int max_hosts = c->hosts == Hosts::kNetns ? kMaxNetnsHosts : kMaxNodes;
  for (const auto& [node, value] : h.child("placement").entries()) {
    const int host = value.as<int>(0, Range::closed(0, max_hosts - 1));
    // Only the spec's own node names, as the launcher writes them ("worker-04" is not worker-4).
    const auto id = control::NodeId::parse(node);
    const int count = !id ? 0 : id->isWorker() ? c->workers : id->isServer() ? c->servers : 1;
    if (!id || id->name() != node || id->index >= count) {
      const auto range = [](const std::string& r, int n) {
        return n == 1 ? r + "-0" : r + "-0.." + r + "-" + std::to_string(n - 1);
      };
      h.child("placement").errorAt(node, "no node is named '" + node + "': nodes are " + range("worker", c->workers) +
                                             (c->servers > 0 ? ", " + range("ps", c->servers) : "") + " and evaluator-0");
      continue;
    }
    if (hosts > 0 && host >= hosts) {
      value.error("host " + std::to_string(host) + " does not exist: hosts are 0.." + std::to_string(hosts - 1));
      continue;
    }
    c->placement[node] = host;
  }
}

void parseCluster(const ConfigNode& root, ClusterSpec* c) {
  ConfigNode n = root.requiredChild("cluster");
  n.checkKeys({"workers", "servers", "cpu_per_node", "transport", "hosts", "simulate", "failure_detection"});
  c->workers = n.required<int>("workers", Range::closed(1, kMaxNodes));
  c->servers = n.optional<int>("servers", c->servers, Range::closed(0, kMaxNodes));
  c->cpu_per_node = n.optional<double>("cpu_per_node", c->cpu_per_node, Range::closed(0, kMaxNodes));
  c->transport = enumFrom(n.oneOf("transport", {"ucx", "nccl"}, "ucx"), kTransports, Transport::kUcx);
  parseHosts(n, c);
  if (c->hosts == Hosts::kNetns && c->transport == Transport::kNccl)
    n.errorAt("hosts", "emulated hosts carry data over UCX's TCP transport; transport: nccl runs on local hosts only");
  c->simulate = n.optional<bool>("simulate", false);
  ConfigNode fd = n.child("failure_detection");
  fd.checkKeys({"heartbeat_s", "timeout_s"});
  FailureDetectionSpec& d = c->failure_detection;
  d.heartbeat_s = fd.optional<double>("heartbeat_s", d.heartbeat_s, Range{0, 3600, true, false});
  d.timeout_s = fd.optional<double>("timeout_s", d.timeout_s, Range::closed(0.1, 86400));
  if (d.timeout_s < d.heartbeat_s)
    fd.errorAt(fd.has("timeout_s") ? "timeout_s" : "heartbeat_s",
               "timeout_s (" + config::formatDouble(d.timeout_s) + ") must be at least heartbeat_s (" +
                   config::formatDouble(d.heartbeat_s) + "): a node cannot be declared lost before it was checked");
}

void parseData(const ConfigNode& root, const std::string& file, DataSpec* d) {
  ConfigNode n = root.child("data");
  n.checkKeys({"dataset", "path", "samples", "dims", "classes"});
  d->dataset = enumFrom(n.oneOf("dataset", {"fashion-mnist", "mnist", "synthetic"}, "fashion-mnist"), kDatasets,
                        Dataset::kFashionMnist);
  if (d->dataset == Dataset::kSynthetic) {
    n.rejectKey("path", "does not apply to dataset synthetic (its samples are generated from the training seed)");
    d->path.clear();
    d->samples = n.optional<int64_t>("samples", 8192, Range::closed(1, 1e8));
    d->dims = n.optional<int>("dims", 32, Range::closed(1, 1 << 20));
    d->classes = n.optional<int>("classes", 4, Range::closed(2, 1 << 16));
    return;
  }
  const std::string dataset = name(d->dataset);
  for (const char* key : {"samples", "dims", "classes"})
    n.rejectKey(key, std::string("applies only to dataset synthetic (") + dataset + " has 784 inputs and 10 classes)");
  d->samples = 0;
  d->dims = 784;
  d->classes = 10;
  d->path = n.optional<std::string>("path", "/usr/share/datasets/" + dataset);
  if (n.has("path") && d->path.empty()) n.errorAt("path", "must not be empty");
  std::filesystem::path p(d->path);
  if (!d->path.empty() && p.is_relative()) {
    std::filesystem::path dir = std::filesystem::path(file).parent_path();
    if (!dir.empty()) d->path = (dir / p).lexically_normal().string();
  }
}

void parseModel(const ConfigNode& root, const DataSpec& data, ModelSpec* m) {
  ConfigNode n = root.child("model");
  n.checkKeys({"kind", "layers"});
  m->kind = n.oneOf("kind", {"mlp", "cnn", "resnet"}, "mlp");
  ConfigNode layers = n.child("layers");
  if (m->kind != "mlp") {
    // A convolutional net's shape is fixed (core/model/cnn.h); it takes the data's images as they are.
    if (!layers.isNull()) n.rejectKey("layers", "applies only to kind mlp (a " + m->kind + " has a fixed shape)");
    const int side = int(std::lround(std::sqrt(double(data.dims))));
    if (side * side != data.dims || side % 4 != 0 || side < 8)
      n.errorAt("kind", m->kind + " takes square one-channel images with a side that is a multiple of 4 and at "
                                 "least 8; data.dims " + std::to_string(data.dims) + " is not (784 = 28 x 28 is)");
    m->layers = {data.dims, data.classes};
    return;
  }
  if (layers.isNull()) {
    m->layers = data.dataset == Dataset::kSynthetic ? std::vector<int>{data.dims, 64, data.classes}
                                                    : std::vector<int>{data.dims, 256, 128, data.classes};
    return;
  }
  m->layers = layers.as<std::vector<int>>({}, Range::closed(1, 1 << 20));
  if (!layers.isSequence() || m->layers.size() != layers.yaml().size()) return;  // already reported
  std::vector<ConfigNode> items = layers.items();
  if (m->layers.size() < 2) {
    layers.error("needs at least two sizes (the data's input dims and its number of classes)");
    return;
  }
  const std::string dataset = name(data.dataset);
  if (m->layers.front() != data.dims)
    items.front().error("the first layer must be the data's input dims (" + std::to_string(data.dims) + " for " +
                        dataset + "), got " + std::to_string(m->layers.front()));
  if (m->layers.back() != data.classes)
    items.back().error("the last layer must be the number of classes (" + std::to_string(data.classes) + " for " +
                       dataset + "), got " + std::to_string(m->layers.back()));
}

void parseWorkload(const ConfigNode& root, WorkloadSpec* w) {
  ConfigNode n = root.child("workload");
  n.checkKeys({"emulate"});
  ConfigNode e = n.child("emulate");
  if (e.isNull()) return;
  e.checkKeys({"model", "accelerator", "network_gbps", "batch_per_worker", "max_gradient_mb"});
  model::EmulationSpec& s = w->emulate;
  // The choices are core/model/emulation.cc's profiles (a test keeps the two lists equal).
  s.model = e.requiredOneOf("model", {"resnet50", "vgg16", "bert-base", "gpt2-small"});
  s.accelerator = e.requiredOneOf("accelerator", {"v100", "a100", "h100"});
  s.network_gbps = e.required<double>("network_gbps", Range::closed(0.001, 10000));
  s.batch_per_worker = e.optional<int>("batch_per_worker", 0, Range::closed(1, 1 << 16));
  s.max_gradient_mb = e.optional<double>("max_gradient_mb", s.max_gradient_mb, Range::closed(1, 4096));
}

void parseTraining(const ConfigNode& root, int64_t seed, TrainingSpec* t) {
  ConfigNode n = root.child("training");
  n.checkKeys({"batch_per_worker", "learning_rate", "momentum", "weight_decay", "seed", "target_accuracy",
               "time_limit_s", "eval_interval_s", "eval_interval_steps", "checkpoint_interval_s", "max_steps",
               "collective_timeout_s", "sustained_evals"});
  t->batch_per_worker = n.optional<int>("batch_per_worker", t->batch_per_worker, Range::closed(1, 1 << 16));
  t->learning_rate = n.optional<double>("learning_rate", t->learning_rate, Range::positive());
  t->momentum = n.optional<double>("momentum", t->momentum, Range{0, 1, false, true});
  t->weight_decay = n.optional<double>("weight_decay", t->weight_decay, Range::nonNegative());
  t->seed = n.optional<int64_t>("seed", seed, Range::nonNegative());
  t->target_accuracy = n.optional<double>("target_accuracy", t->target_accuracy, Range{0, 1, true, false});
  t->time_limit_s = n.optional<double>("time_limit_s", t->time_limit_s, Range::positive());
  t->eval_interval_s = n.optional<double>("eval_interval_s", t->eval_interval_s, Range::positive());
  t->eval_interval_steps = n.optional<int64_t>("eval_interval_steps", 0, Range::closed(1, int64_t(1) << 40));
  t->sustained_evals = n.optional<int>("sustained_evals", t->sustained_evals, Range::closed(1, 100));
  t->checkpoint_interval_s = n.optional<double>("checkpoint_interval_s", t->checkpoint_interval_s, Range::positive());
  t->max_steps = n.nullable<int64_t>("max_steps", std::nullopt, Range::atLeast(1));
  t->collective_timeout_s = n.optional<double>("collective_timeout_s", t->collective_timeout_s, Range::closed(0.1, 86400));
  if (t->eval_interval_s > t->time_limit_s)
    n.errorAt("eval_interval_s", "must not exceed time_limit_s (" + config::formatDouble(t->time_limit_s) +
                                     "): no snapshot would be evaluated before the limit");
}

// strategies[i].training: the recipe fields override the top-level training's; the shared ones are refused.
Recipe parseRecipe(const ConfigNode& item, const TrainingSpec& t) {
  Recipe r{t.batch_per_worker, t.learning_rate, t.momentum, t.weight_decay};
  ConfigNode n = item.child("training");
  if (!n.present() || n.isNull() || !n.expectMap()) return r;
  static const char* const kShared[] = {"seed", "target_accuracy", "time_limit_s", "eval_interval_s",
                                        "eval_interval_steps", "sustained_evals", "checkpoint_interval_s", "max_steps",
                                        "collective_timeout_s"};
  for (const char* key : kShared)
    n.rejectKey(key, "is shared by every strategy, so that their results compare; set it in the top-level training");
  n.checkKeys({"batch_per_worker", "learning_rate", "momentum", "weight_decay", "seed", "target_accuracy",
               "time_limit_s", "eval_interval_s", "eval_interval_steps", "sustained_evals", "checkpoint_interval_s",
               "max_steps", "collective_timeout_s"});
  r.batch_per_worker = n.optional<int>("batch_per_worker", r.batch_per_worker, Range::closed(1, 1 << 16));
  r.learning_rate = n.optional<double>("learning_rate", r.learning_rate, Range::positive());
  r.momentum = n.optional<double>("momentum", r.momentum, Range{0, 1, false, true});
  r.weight_decay = n.optional<double>("weight_decay", r.weight_decay, Range::nonNegative());
  return r;
}

void parseStrategies(const ConfigNode& root, const ClusterSpec& cluster, const TrainingSpec& training,
                     std::vector<StrategySpec>* out) {
  ConfigNode list = root.requiredChild("strategies");
  std::vector<ConfigNode> items = list.items();
  if (list.isSequence() && items.empty()) list.error("needs at least one strategy, e.g. [{name: mirrored}]");
  std::map<std::string, std::string> label_owner;  // label -> path of the strategy that has it
  std::string first_ps;                            // path of the first parameter_server strategy
  for (const ConfigNode& item : items) {
    if (!item.isMap()) {
      item.error("expected a map such as {name: mirrored}, got " + item.describe());
      continue;
    }
    item.checkKeys({"name", "label", "on_failure", "backup_workers", "checkpoint_on_notice", "on_server_failure",
                    "max_staleness", "shards", "training"});
    StrategySpec s;
    s.recipe = parseRecipe(item, training);
    const std::string kind = item.requiredOneOf("name", {"mirrored", "parameter_server"});
    s.label = item.optional<std::string>("label", kind);
    checkName(item, "label", s.label);
    if (!s.label.empty()) {
      auto [it, inserted] = label_owner.emplace(s.label, item.path());
      if (!inserted)
        item.errorAt("label", "duplicate label '" + s.label + "' (" + it->second +
                                  " has it too); give each strategy a distinct label");
    }
    s.checkpoint_on_notice = item.optional<bool>("checkpoint_on_notice", false);
    if (kind == "mirrored") {
      s.kind = StrategyKind::kMirrored;
      for (const char* key : {"on_server_failure", "max_staleness", "shards"})
        item.rejectKey(key, "applies only to parameter_server strategies");
      s.on_failure = enumFrom(item.oneOf("on_failure", {"restart", "elastic"}, "restart"), kOnFailure,
                              OnFailure::kRestart);
      s.backup_workers = item.optional<int>("backup_workers", 0, Range::nonNegative());
      if (cluster.workers > 0 && s.backup_workers >= cluster.workers)
        item.errorAt("backup_workers", "must be less than cluster.workers (" + std::to_string(cluster.workers) +
                                           "), got " + std::to_string(s.backup_workers));
    } else if (kind == "parameter_server") {
      s.kind = StrategyKind::kParameterServer;
      item.rejectKey("on_failure",
                     "applies only to mirrored strategies (parameter_server workers carry on without a failed peer)");
      item.rejectKey("backup_workers", "applies only to mirrored strategies");
      s.on_server_failure = enumFrom(item.oneOf("on_server_failure", {"shard_restart", "job_restart"}, "shard_restart"),
                                     kOnServerFailure, OnServerFailure::kShardRestart);
      s.max_staleness = item.nullable<int>("max_staleness", std::nullopt, Range::nonNegative());
      s.shards = item.optional<int>("shards", std::max(cluster.servers, 1), Range::closed(1, kMaxNodes));
      if (first_ps.empty()) first_ps = item.path();
    }
    out->push_back(std::move(s));
  }
  if (!first_ps.empty() && cluster.servers == 0)
    root.child("cluster").errorAt("servers", "must be >= 1: " + first_ps + " is a parameter_server strategy");
}

void parseMetrics(const ConfigNode& root, MetricsSpec* m) {
  ConfigNode n = root.child("metrics");
  n.checkKeys({"listen", "push_gateway", "allow_remote", "await_scrape", "targets_dir"});
  m->listen = n.optional<std::string>("listen", m->listen);
  m->allow_remote = n.optional<bool>("allow_remote", false);
  m->await_scrape = n.optional<bool>("await_scrape", false);
  if (n.child("listen").isScalar()) {
    if (std::string why = checkHostPort(m->listen); !why.empty()) {
      n.child("listen").error(why);
    } else if (const std::string host = m->listen.substr(0, m->listen.rfind(':'));
               !m->allow_remote && !net::isLoopbackHost(host)) {
      // Decided from the text, not a resolver: a name other than localhost may resolve anywhere.
      n.child("listen").error("'" + host + "' is not a loopback address (127.0.0.1, [::1], localhost); the endpoint is "
                              "unauthenticated, so exposing it needs metrics.allow_remote: true");
    }
  }
  m->targets_dir = n.optional<std::string>("targets_dir", "");
  if (n.child("targets_dir").isScalar() && m->targets_dir != "off" && !m->targets_dir.empty() &&
      m->targets_dir[0] != '/')
    n.child("targets_dir").error("must be an absolute path (the directory Prometheus's file_sd watches) or 'off'");
  m->push_gateway = n.optional<std::string>("push_gateway", "");
  if (n.child("push_gateway").isScalar() && !m->push_gateway.empty())
    if (std::string why = pushGatewayProblem(m->push_gateway); !why.empty()) n.child("push_gateway").error(why);
}

void parseOutput(const ConfigNode& root, OutputSpec* o) {
  ConfigNode n = root.child("output");
  n.checkKeys({"dir"});
  o->dir = n.optional<std::string>("dir", o->dir);
  if (n.child("dir").isScalar() && o->dir.empty()) n.child("dir").error("must not be empty");
  // A spec travels (a colleague's, a suite's): it places results under the directory chaosbed runs in, never
  // elsewhere on a machine where chaosbed runs as root. `--out` (typed by the user) may go anywhere.
  const std::filesystem::path dir(o->dir);
  if (dir.is_absolute())
    n.child("dir").error("'" + o->dir + "' must be relative to the directory chaosbed runs in (for results elsewhere, use --out)");
  else if (std::find(dir.begin(), dir.end(), "..") != dir.end())
    n.child("dir").error("'" + o->dir + "' must not climb out of the directory chaosbed runs in ('..')");
}

std::optional<ExperimentSpec> parseDocument(const YAML::Node& doc, const std::string& file, Diagnostics* d,
                                            bool check_sweep);

// The chaos plan is a function of the spec alone: draw it as `run` and `chaos plan` will, so that validate
// reports what they would reject (targets out of range, unknown roles, full outages, unbounded plans).
// drawPlan's errors read "file:line:col: chaos.faults[i]: message".
void checkChaosPlan(const ExperimentSpec& spec, const std::string& file, Diagnostics* d) {
  if (spec.chaos.parsed.faults.empty()) return;
  const auto nodes = chaos::makeNodes({{"worker", spec.cluster.workers},
                                       {"ps", spec.cluster.servers},
                                       {"evaluator", 1}});
  auto plan = chaos::drawPlan(spec.chaos.parsed, nodes, uint64_t(spec.seed), spec.training.time_limit_s);
  if (plan.isOk()) return;
  std::string text = plan.status().message();
  if (text.starts_with("chaos: ")) text = text.substr(7);
  static const std::regex kLocated(R"(^(.*):(\d+):(\d+): ([^:]+): (.*)$)");
  std::smatch m;
  if (std::regex_match(text, m, kLocated))
    d->add(m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str()), m[4].str(), m[5].str());
  else
    d->add(file, 0, 0, "chaos", text);
}

// Each grid value, applied alone to the spec, must give a valid spec; errors point at the value.
void checkSweepValues(const YAML::Node& doc, const std::string& file, const SweepSpec& sweep,
                      const ConfigNode& grid) {
  for (const SweepAxis& axis : sweep.grid) {
    std::vector<ConfigNode> values = grid.child(axis.path).items();
    for (size_t i = 0; i < axis.values.size() && i < values.size(); ++i) {
      YAML::Node copy = YAML::Clone(doc);
      copy.remove("sweep");
      const std::string with = "with " + axis.path + " = " + axis.values[i];
      if (Status s = config::applyOverride(copy, axis.path, axis.values[i]); !s.isOk()) {
        values[i].error(s.message());
        continue;
      }
      Diagnostics inner;
      if (!parseDocument(copy, file, &inner, /*check_sweep=*/false))
        for (const config::Diagnostic& x : inner.all())
          values[i].error(with + ": " + (x.field.empty() ? "" : x.field + ": ") + x.message);
    }
  }
}

// A value as YAML text that reads back the same; a quoted scalar stays a string ("4" is not 4).
std::string valueText(const YAML::Node& v) {
  if (!v.IsScalar() || v.Tag() != "!") return YAML::Dump(v);
  YAML::Emitter e;
  e << YAML::DoubleQuoted << v.Scalar();
  return e.c_str();
}

std::optional<SweepSpec> parseSweep(const ConfigNode& root, int64_t seed) {
  ConfigNode n = root.child("sweep");
  if (n.isNull()) return std::nullopt;
  n.checkKeys({"grid", "repeats", "seeds"});
  SweepSpec sweep;
  for (const auto& [path, values] : n.child("grid").entries()) {
    if (path == "sweep" || path.starts_with("sweep.") || path.starts_with("sweep[")) {
      values.error("a sweep cannot vary its own settings");
      continue;
    }
    if (!values.isSequence()) {
      values.error("expected a list of values, got " + values.describe());
      continue;
    }
    SweepAxis axis{path, {}};
    for (const ConfigNode& v : values.items()) axis.values.push_back(valueText(v.yaml()));
    if (axis.values.empty()) values.error("needs at least one value");
    if (std::any_of(sweep.grid.begin(), sweep.grid.end(), [&](const SweepAxis& a) { return a.path == axis.path; }))
      values.error("the grid varies this path twice");
    sweep.grid.push_back(std::move(axis));
  }
  std::optional<int> repeats = n.nullable<int>("repeats", std::nullopt, Range::closed(1, kMaxSweepSeeds));
  if (n.has("seeds")) {
    ConfigNode seeds = n.child("seeds");
    sweep.seeds = seeds.as<std::vector<int64_t>>({}, Range::nonNegative());
    if (seeds.isSequence() && seeds.yaml().size() == 0) seeds.error("needs at least one seed");
    std::set<int64_t> unique(sweep.seeds.begin(), sweep.seeds.end());
    if (unique.size() != sweep.seeds.size()) seeds.error("lists a seed more than once");
    if (repeats && !sweep.seeds.empty() && static_cast<size_t>(*repeats) != sweep.seeds.size())
      n.errorAt("repeats", "is " + std::to_string(*repeats) + " but " + std::to_string(sweep.seeds.size()) +
                               " seeds are listed; give one or the other");
  } else {
    for (int i = 0; i < repeats.value_or(1); ++i) sweep.seeds.push_back(seed + i);
  }
  return sweep;
}

std::optional<ExperimentSpec> parseDocument(const YAML::Node& doc, const std::string& file, Diagnostics* d,
                                            bool check_sweep) {
  const size_t errors_before = d->size();
  ConfigNode root(doc, file, d);
  if (root.isNull()) {
    root.error("the spec is empty; it needs at least apiVersion, kind, metadata, cluster and strategies");
    return std::nullopt;
  }
  if (!root.isMap()) {
    root.error("expected a map (apiVersion, kind, metadata, ...), got " + root.describe());
    return std::nullopt;
  }
  root.checkKeys({"apiVersion", "kind", "metadata", "seed", "cluster", "model", "workload", "data", "training",
                  "strategies", "chaos", "metrics", "output", "sweep"});
  ExperimentSpec spec;
  spec.api_version = root.required<std::string>("apiVersion");
  if (root.child("apiVersion").isScalar() && spec.api_version != kApiVersion)
    root.child("apiVersion").error("unsupported version '" + spec.api_version + "'; this chaosbed reads " +
                                   kApiVersion);
  spec.kind = root.required<std::string>("kind");
  if (root.child("kind").isScalar() && spec.kind != kKind)
    root.child("kind").error("unsupported kind '" + spec.kind + "'; expected " + kKind);
  parseMetadata(root, &spec);
  spec.seed = root.optional<int64_t>("seed", spec.seed, Range::nonNegative());
  parseCluster(root, &spec.cluster);
  parseData(root, file, &spec.data);
  parseModel(root, spec.data, &spec.model);
  parseWorkload(root, &spec.workload);
  parseTraining(root, spec.seed, &spec.training);
  parseStrategies(root, spec.cluster, spec.training, &spec.strategies);

  ConfigNode chaos = root.child("chaos");
  if (chaos.expectMap()) {
    spec.chaos.yaml = chaos.isNull() ? YAML::Node() : YAML::Clone(chaos.yaml());
    spec.chaos.parsed = chaos::parseChaosSpec(chaos);
    // A fault that no strategy of the spec can meet is refused, not silently skipped.
    const bool collectives = std::any_of(spec.strategies.begin(), spec.strategies.end(),
                                         [](const StrategySpec& s) { return s.kind == StrategyKind::kMirrored; });
    const std::vector<ConfigNode> items = chaos.child("faults").items();
    for (size_t i = 0; i < items.size() && i < spec.chaos.parsed.faults.size(); ++i) {
      const chaos::FaultSpec& f = spec.chaos.parsed.faults[i];
      if (f.kind == chaos::FaultKind::kTransportError && f.params.error == "abort_collective" && !collectives)
        items[i].child("params").errorAt("error", "abort_collective fails a collective step, and no strategy of this "
                                                  "spec has collectives (only mirrored does)");
      if (f.kind == chaos::FaultKind::kLink && f.params.via == chaos::FaultParams::Via::kKernel &&
          spec.cluster.hosts != Hosts::kNetns)
        items[i].child("params").errorAt("via", "link faults in the kernel are faults between emulated hosts: set "
                                                "cluster.hosts: {netns: N}, or use via: auto");
    }
  }

  parseMetrics(root, &spec.metrics);
  parseOutput(root, &spec.output);
  if (d->size() == errors_before) checkChaosPlan(spec, file, d);
  spec.sweep = parseSweep(root, spec.seed);
  if (check_sweep && spec.sweep && d->size() == errors_before)
    checkSweepValues(doc, file, *spec.sweep, root.child("sweep").child("grid"));
  if (d->size() != errors_before) return std::nullopt;
  return spec;
}

}  // namespace

std::string pushGatewayProblem(std::string_view url) {
  if (url.starts_with("https://"))
    return "https is not supported: the push is plain HTTP (use a Pushgateway on loopback or a private network, or "
           "a local TLS proxy)";
  if (url.starts_with("http://")) url.remove_prefix(7);
  return checkHostPort(url.substr(0, url.find('/')));
}

const char* name(Transport v) { return enumName(v, kTransports); }
const char* name(Hosts v) { return enumName(v, kHosts); }
const char* name(Dataset v) { return enumName(v, kDatasets); }
const char* name(StrategyKind v) { return strategyKindName(v); }
const char* name(OnFailure v) { return enumName(v, kOnFailure); }
const char* name(OnServerFailure v) { return enumName(v, kOnServerFailure); }

bool ChaosSection::operator==(const ChaosSection& other) const {
  auto text = [](const YAML::Node& n) { return n.IsDefined() && !n.IsNull() ? YAML::Dump(n) : std::string(); };
  return text(yaml) == text(other.yaml);
}

bool ExperimentSpec::hasParameterServer() const {
  return std::any_of(strategies.begin(), strategies.end(),
                     [](const StrategySpec& s) { return s.kind == StrategyKind::kParameterServer; });
}

const StrategySpec* ExperimentSpec::strategy(const std::string& label) const {
  for (const StrategySpec& s : strategies)
    if (s.label == label) return &s;
  return nullptr;
}

std::optional<ExperimentSpec> parseExperimentSpec(const YAML::Node& doc, const std::string& file,
                                                  Diagnostics* diagnostics) {
  return parseDocument(doc, file, diagnostics, /*check_sweep=*/true);
}

std::optional<ExperimentSpec> readExperimentSpec(const std::string& path, const std::vector<std::string>& overrides,
                                                 Diagnostics* diagnostics) {
  std::optional<YAML::Node> doc = config::loadYamlFile(path, diagnostics);
  if (!doc) return std::nullopt;
  bool overrides_ok = true;
  for (const std::string& o : overrides) {
    if (Status s = config::applyOverrideAssignment(*doc, o); !s.isOk()) {
      diagnostics->add(path, 0, 0, "", s.message());
      overrides_ok = false;
    }
  }
  if (!overrides_ok) return std::nullopt;
  return parseExperimentSpec(*doc, path, diagnostics);
}

Result<ExperimentSpec> loadExperimentSpec(const std::string& path, const std::vector<std::string>& overrides) {
  Diagnostics diagnostics;
  std::optional<ExperimentSpec> spec = readExperimentSpec(path, overrides, &diagnostics);
  if (!spec) return diagnostics.toStatus();
  return std::move(*spec);
}

void checkDataFiles(const std::string& file, const ExperimentSpec& spec, Diagnostics* diagnostics) {
  if (spec.data.dataset == Dataset::kSynthetic) return;
  std::vector<std::string> missing;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"}) {
    std::error_code ec;
    const std::string base = spec.data.path + "/" + name;
    if (!std::filesystem::is_regular_file(base, ec) && !std::filesystem::is_regular_file(base + ".gz", ec))
      missing.push_back(name);
  }
  if (missing.empty()) return;
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  const std::string dataset = name(spec.data.dataset);
  std::string message = "no " + dataset + " data in " + spec.data.path + " (missing " + list + "[.gz])";
  if (spec.data.dataset == Dataset::kFashionMnist) message += ": install the Debian package dataset-fashion-mnist, or set data.path";
  else message += ": set data.path to a directory with the IDX files";
  // Locate data.path (or, when it is the default, data.dataset, or data) in the file.
  Diagnostics ignored;
  std::optional<YAML::Node> doc = config::loadYamlFile(file, &ignored);
  if (!doc) {
    diagnostics->add(file, 0, 0, "data.path", message);
    return;
  }
  ConfigNode root(*doc, file, diagnostics);
  ConfigNode data = root.child("data");
  if (data.has("path")) data.child("path").error(message);
  else if (data.has("dataset")) data.child("dataset").error(message);
  else root.errorAt("data", message);
}

std::vector<SweepPoint> sweepPoints(const SweepSpec& sweep) {
  std::vector<SweepPoint> points;
  std::vector<size_t> index(sweep.grid.size(), 0);
  for (const SweepAxis& axis : sweep.grid)
    if (axis.values.empty()) return points;
  while (true) {
    std::vector<std::pair<std::string, std::string>> overrides;
    for (size_t a = 0; a < sweep.grid.size(); ++a)
      overrides.emplace_back(sweep.grid[a].path, sweep.grid[a].values[index[a]]);
    for (int64_t seed : sweep.seeds) points.push_back(SweepPoint{overrides, seed});
    // Odometer: the last axis varies fastest.
    size_t a = sweep.grid.size();
    while (a > 0 && ++index[a - 1] == sweep.grid[a - 1].values.size()) index[--a] = 0;
    if (a == 0) break;
  }
  return points;
}

}  // namespace chaosbed::spec
