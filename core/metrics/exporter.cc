// MetricsExporter on prometheus-cpp: one Collectable holds the latest cumulative snapshot the controller
// reported and renders it exactly at scrape time (counters as absolute values, histograms from the nodes'
// cumulative bucket counts). prometheus-cpp's own Counter/Histogram types only accumulate increments, which
// would lose the "summed over incarnations, never decreasing" values the controller already computed.
// prometheus-cpp's TextSerializer writes the exposition; HttpMetricsServer serves it (see its header for
// why not prometheus::Exposer); push() PUTs it to a Pushgateway with this project's own HTTP client.

#include "core/metrics/exporter.h"

#include "core/metrics/prometheus_http_server.h"
#include "core/metrics/prometheus_scrape.h"
#include "transports/base/thread_annotations.h"

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace chaosbed {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

using StrategyKey = std::pair<std::string, std::string>;                         // experiment, strategy
using NodeKey = std::tuple<std::string, std::string, std::string, std::string>;  // + role, node

// Everything the controller reported about one strategy of one experiment.
struct StrategyState {
  std::optional<double> accuracy;
  std::optional<double> loss;
  std::optional<double> time_to_accuracy_s;
  std::map<std::string, int> nodes_alive;           // by role
  std::map<std::string, int64_t> faults_injected;   // by fault kind
  std::map<std::string, int> faults_active;         // by fault kind
  int64_t fault_leaks = 0;
  Histogram recovery_seconds = recoverySecondsHistogram();
  bool running = false;
  double elapsed_s = 0;
};

ClientMetric::Histogram toClient(const Histogram& h) {
  ClientMetric::Histogram out;
  out.sample_count = h.count;
  out.sample_sum = h.sum;
  for (size_t i = 0; i < h.bounds.size(); ++i) out.bucket.push_back({h.counts[i], h.bounds[i]});
  out.bucket.push_back({h.count, std::numeric_limits<double>::infinity()});
  return out;
}

// Builds families in a fixed order; a family without samples is dropped (prometheus-cpp would print a
// HELP/TYPE header for it, which is valid, but an empty family says nothing).
class FamilyBuilder {
 public:
  MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
    auto it = index_.find(name);
    if (it != index_.end()) return families_[it->second];
    index_[name] = families_.size();
    families_.push_back({name, help, type, {}});
    return families_.back();
  }
  std::vector<MetricFamily> take() {
    std::vector<MetricFamily> out;
    for (auto& f : families_)
      if (!f.metric.empty()) out.push_back(std::move(f));
    return out;
  }

 private:
  std::deque<MetricFamily> families_;  // a deque: references handed out stay valid as families are added
  std::map<std::string, size_t> index_;
};

std::vector<ClientMetric::Label> strategyLabels(const StrategyKey& k) {
  return {{"experiment", k.first}, {"strategy", k.second}};
}

std::vector<ClientMetric::Label> nodeLabels(const NodeKey& k) {
  return {{"experiment", std::get<0>(k)}, {"strategy", std::get<1>(k)}, {"role", std::get<2>(k)}, {"node", std::get<3>(k)}};
}

ClientMetric sample(std::vector<ClientMetric::Label> labels, MetricType type, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) m.counter.value = value;
  else m.gauge.value = value;
  return m;
}

class Snapshot final : public prometheus::Collectable {
 public:
  std::vector<MetricFamily> Collect() const override {
    MutexLock lock(mu_);
    FamilyBuilder b;
    const auto C = MetricType::Counter;
    const auto G = MetricType::Gauge;
    const auto H = MetricType::Histogram;
    // Declared up front so that the exposition order is stable and grouped by subject.
    auto& tta = b.family("chaosbed_time_to_accuracy_seconds",
                         "Wall seconds from the start of training to the first snapshot reaching the target accuracy.", G);
    auto& acc = b.family("chaosbed_test_accuracy", "Test-set accuracy of the latest evaluated snapshot (0..1).", G);
    auto& loss = b.family("chaosbed_test_loss", "Test-set loss of the latest evaluated snapshot.", G);
    auto& running = b.family("chaosbed_run_running", "1 while the strategy's training is running, else 0.", G);
    auto& elapsed = b.family("chaosbed_run_elapsed_seconds", "Wall seconds since the strategy's training started.", G);
    auto& alive = b.family("chaosbed_nodes_alive", "Node processes alive now, by role.", G);
    auto& injected = b.family("chaosbed_chaos_faults_injected_total", "Chaos faults injected, by fault kind.", C);
    auto& active = b.family("chaosbed_fault_active", "Chaos faults in effect now, by fault kind.", G);
    auto& leaks = b.family("chaosbed_chaos_fault_leaks", "Chaos faults whose revert failed (left behind).", G);
    auto& recovery = b.family("chaosbed_recovery_duration_seconds",
                              "From a fault's effect to the first completed step after it.", H);
    auto& steps = b.family("chaosbed_steps_total", "Training steps completed by a node, over all its incarnations.", C);
    auto& samples = b.family("chaosbed_samples_total", "Samples processed by a node.", C);
    auto& lost = b.family("chaosbed_samples_lost_total", "Samples rolled back (not in the final model).", C);
    auto& compute = b.family("chaosbed_compute_seconds_total", "Seconds spent computing (forward, backward, update).", C);
    auto& transfer = b.family("chaosbed_transfer_seconds_total", "Seconds spent moving data.", C);
    auto& checkpoint = b.family("chaosbed_checkpoint_seconds_total", "Seconds spent saving checkpoints.", C);
    auto& idle = b.family("chaosbed_idle_seconds_total",
                          "Seconds a live node waited on others, by reason (peer, server, recovery).", C);
    auto& ckpt = b.family("chaosbed_checkpoint_writes_total", "Checkpoints written.", C);
    auto& ckpt_fail = b.family("chaosbed_checkpoint_failures_total", "Checkpoint writes that failed.", C);
    auto& recoveries = b.family("chaosbed_node_recoveries_total", "Recoveries a node went through.", C);
    auto& step_s = b.family("chaosbed_step_duration_seconds", "Duration of one training step.", H);
    auto& stale = b.family("chaosbed_staleness_updates",
                           "Server updates between a worker's pull and its push (asynchronous strategies).", H);
    auto& node_rec = b.family("chaosbed_node_recovery_duration_seconds",
                              "Time a node spent in one recovery (detection, rendezvous, restore).", H);

    for (const auto& [name, labels] : infos_) {
      auto& f = b.family("chaosbed_" + name + "_info", "chaosbed " + name + " identity: always 1, the labels carry it.", G);
      std::vector<ClientMetric::Label> l;
      for (const auto& [k, v] : labels) l.push_back({k, v});
      f.metric.push_back(sample(std::move(l), G, 1));
    }

    for (const auto& [k, s] : strategies_) {
      const auto l = strategyLabels(k);
      if (s.time_to_accuracy_s) tta.metric.push_back(sample(l, G, *s.time_to_accuracy_s));
      if (s.accuracy) acc.metric.push_back(sample(l, G, *s.accuracy));
      if (s.loss) loss.metric.push_back(sample(l, G, *s.loss));
      running.metric.push_back(sample(l, G, s.running ? 1 : 0));
      elapsed.metric.push_back(sample(l, G, s.elapsed_s));
      for (const auto& [role, n] : s.nodes_alive) {
        auto lr = l;
        lr.push_back({"role", role});
        alive.metric.push_back(sample(lr, G, n));
      }
      for (const auto& [fault, n] : s.faults_injected) {
        auto lf = l;
        lf.push_back({"fault", fault});
        injected.metric.push_back(sample(lf, C, double(n)));
      }
      for (const auto& [fault, n] : s.faults_active) {
        auto lf = l;
        lf.push_back({"fault", fault});
        active.metric.push_back(sample(lf, G, n));
      }
      leaks.metric.push_back(sample(l, G, double(s.fault_leaks)));
      ClientMetric r;
      r.label = l;
      r.histogram = toClient(s.recovery_seconds);
      recovery.metric.push_back(std::move(r));
    }

    for (const auto& [k, n] : nodes_) {
      const auto l = nodeLabels(k);
      steps.metric.push_back(sample(l, C, double(n.steps)));
      samples.metric.push_back(sample(l, C, double(n.samples)));
      lost.metric.push_back(sample(l, C, double(n.samples_lost)));
      compute.metric.push_back(sample(l, C, n.seconds[int(TimeCategory::kCompute)]));
      transfer.metric.push_back(sample(l, C, n.seconds[int(TimeCategory::kTransfer)]));
      checkpoint.metric.push_back(sample(l, C, n.seconds[int(TimeCategory::kCheckpoint)]));
      for (TimeCategory c : {TimeCategory::kIdlePeer, TimeCategory::kIdleServer, TimeCategory::kIdleRecovery}) {
        auto lr = l;
        lr.push_back({"reason", timeCategoryName(c)});
        idle.metric.push_back(sample(lr, C, n.seconds[int(c)]));
      }
      ckpt.metric.push_back(sample(l, C, double(n.checkpoints_written)));
      ckpt_fail.metric.push_back(sample(l, C, double(n.checkpoint_failures)));
      recoveries.metric.push_back(sample(l, C, double(n.recoveries)));
      for (auto [fam, h] : {std::pair{&step_s, &n.step_seconds}, std::pair{&stale, &n.staleness},
                            std::pair{&node_rec, &n.recovery_seconds}}) {
        ClientMetric m;
        m.label = l;
        m.histogram = toClient(*h);
        fam->metric.push_back(std::move(m));
      }
    }
    return b.take();
  }

  // Runs f on the state of (experiment, strategy) under the lock, creating it on first use.
  template <class F>
  void withStrategy(const std::string& experiment, const std::string& strategy, F&& f) {
    MutexLock lock(mu_);
    f(strategies_[{experiment, strategy}]);
  }

  void setInfo(const std::string& name, const std::map<std::string, std::string>& labels) {
    MutexLock lock(mu_);
    infos_[name] = labels;
  }

  void updateNode(const NodeLabels& l, const NodeStats& stats) {
    MutexLock lock(mu_);
    strategies_.try_emplace({l.experiment, l.strategy});
    nodes_.insert_or_assign(NodeKey{l.experiment, l.strategy, l.role, l.node}, stats);
  }

 private:
  mutable Mutex mu_;
  std::map<StrategyKey, StrategyState> strategies_ CHAOSBED_GUARDED_BY(mu_);
  std::map<NodeKey, NodeStats> nodes_ CHAOSBED_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, std::string>> infos_ CHAOSBED_GUARDED_BY(mu_);
};

// RFC 4648 base64url without padding (Pushgateway's "@base64" label values).
std::string base64Url(const std::string& in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (unsigned char c : in) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += kAlphabet[(bits >> count) & 63];
    }
  }
  if (count > 0) out += kAlphabet[(bits << (6 - count)) & 63];
  return out.empty() ? "=" : out;  // an empty value is "=" in Pushgateway's encoding
}

class PrometheusExporter final : public MetricsExporter {
 public:
  PrometheusExporter() = default;

  // Starts serving; separate from the constructor so that errors are values.
  Status listen(const std::string& listen, bool allow_remote) {
    HttpServerOptions options;
    options.allow_remote = allow_remote;
    auto server = HttpMetricsServer::start(
        listen, "/metrics",
        [snapshot = snapshot_] { return prometheus::TextSerializer().Serialize(snapshot->Collect()); }, options);
    if (!server.isOk()) return Status(server.status()).withContext("metrics");
    server_ = std::move(*server);
    return Status::ok();
  }

  std::string address() const override { return server_->address(); }
  bool awaitScrape(std::chrono::steady_clock::time_point deadline) override { return server_->awaitServed(deadline); }
  std::optional<double> scrapeInterval() const override { return server_->servedInterval(); }

  void updateNode(const NodeLabels& labels, const NodeStats& stats) override { snapshot_->updateNode(labels, stats); }

  void setAccuracy(const std::string& e, const std::string& s, double accuracy, double loss) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) {
      st.accuracy = accuracy;
      st.loss = loss;
    });
  }
  void setTimeToAccuracy(const std::string& e, const std::string& s, double seconds) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) { st.time_to_accuracy_s = seconds; });
  }
  void setNodesAlive(const std::string& e, const std::string& s, const std::string& role, int alive) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) { st.nodes_alive[role] = alive; });
  }
  void faultInjected(const std::string& e, const std::string& s, const std::string& fault) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) { ++st.faults_injected[fault]; });
  }
  void setFaultsActive(const std::string& e, const std::string& s, const std::string& fault, int active) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) {
      st.faults_active[fault] = active;
      st.faults_injected.try_emplace(fault, 0);  // a counter exists (at 0) for every kind the chaos layer knows
    });
  }
  void setFaultLeaks(const std::string& e, const std::string& s, int64_t leaks) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) { st.fault_leaks = leaks; });
  }
  void recovery(const std::string& e, const std::string& s, double seconds) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) { st.recovery_seconds.observe(seconds); });
  }
  void setRunning(const std::string& e, const std::string& s, bool running, double elapsed_s) override {
    snapshot_->withStrategy(e, s, [&](StrategyState& st) {
      st.running = running;
      st.elapsed_s = elapsed_s;
    });
  }

  void setInfo(const std::string& name, const std::map<std::string, std::string>& labels) override {
    snapshot_->setInfo(name, labels);
  }

  Status push(const std::string& gateway, const std::string& experiment, Deadline deadline) override {
    std::string rest = gateway;
    if (rest.starts_with("http://")) rest = rest.substr(7);
    const size_t slash = rest.find('/');
    const std::string hostport = rest.substr(0, slash);
    std::string prefix = slash == std::string::npos ? "" : rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string host;
    int port = 0;
    if (gateway.starts_with("https://") || !parseHostPort(hostport, &host, &port).isOk() || port == 0)
      return Status::invalidArgument("metrics push_gateway '" + gateway + "': expected [http://]host:port[/path]");
    // Pushgateway's API: PUT replaces the group job="chaosbed", experiment=<name>; the name travels base64url
    // encoded, so any character is safe in the path.
    const std::string path = prefix + "/metrics/job/chaosbed/experiment@base64/" + base64Url(experiment);
    auto r = httpPut(hostport, path, "text/plain; version=0.0.4",
                     prometheus::TextSerializer().Serialize(snapshot_->Collect()), deadline);
    if (!r.isOk()) return Status(r.status()).withContext("metrics push to " + gateway);
    return Status::ok();
  }

 private:
  std::shared_ptr<Snapshot> snapshot_ = std::make_shared<Snapshot>();
  std::unique_ptr<HttpMetricsServer> server_;  // last: stops serving before the snapshot goes
};

}  // namespace

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::create(const std::string& listen, bool allow_remote) {
  auto exporter = std::make_unique<PrometheusExporter>();
  CHAOSBED_RETURN_IF_ERROR(exporter->listen(listen, allow_remote));
  return std::unique_ptr<MetricsExporter>(std::move(exporter));
}

}  // namespace chaosbed
