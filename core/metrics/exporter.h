#pragma once
// MetricsExporter: the controller's one Prometheus endpoint (pull; loopback by default). It exports what
// the nodes report over the control channel, aggregated in the controller, so the counters of a killed node
// survive it. Names follow Prometheus conventions: prefix chaosbed_, base units, _total counters, _seconds
// histograms. Labels only experiment, strategy, role, node, reason, fault (bounded cardinality).
//
// Thread safety: every method may be called from any thread; a scrape sees a consistent snapshot per family.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/metrics/accounting.h"
#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

struct NodeLabels {
  std::string experiment;
  std::string strategy;
  std::string role;  // worker | ps | evaluator
  std::string node;  // worker-0, ps-1, ...
};

class MetricsExporter {
 public:
  virtual ~MetricsExporter() = default;

  // Binds listen ("127.0.0.1:9464"; port 0 picks a free port) and serves /metrics (HttpMetricsServer:
  // concurrent, with per-connection timeouts). A listen address beyond loopback is InvalidArgument unless
  // allow_remote: the endpoint is unauthenticated.
  static Result<std::unique_ptr<MetricsExporter>> create(const std::string& listen, bool allow_remote = false);
  // "host:port" actually bound.
  virtual std::string address() const = 0;

  // The cumulative stats of one node, summed over its incarnations (never decreasing).
  virtual void updateNode(const NodeLabels& labels, const NodeStats& stats) = 0;
  // The latest evaluated snapshot of a strategy.
  virtual void setAccuracy(const std::string& experiment, const std::string& strategy, double accuracy, double loss) = 0;
  // Time to accuracy once reached.
  virtual void setTimeToAccuracy(const std::string& experiment, const std::string& strategy, double seconds) = 0;
  virtual void setNodesAlive(const std::string& experiment, const std::string& strategy, const std::string& role, int alive) = 0;
  // Chaos: one fault injected (kill, preempt, pause, slow, link); faults active now by kind; leaked faults.
  virtual void faultInjected(const std::string& experiment, const std::string& strategy, const std::string& fault) = 0;
  virtual void setFaultsActive(const std::string& experiment, const std::string& strategy, const std::string& fault, int active) = 0;
  virtual void setFaultLeaks(const std::string& experiment, const std::string& strategy, int64_t leaks) = 0;
  // A failure's recovery time (docs/design.md: from the fault's effect to the first completed step after it).
  virtual void recovery(const std::string& experiment, const std::string& strategy, double seconds) = 0;
  // Run progress for "stuck" alerts: wall seconds since the strategy's training started; 1 while running.
  virtual void setRunning(const std::string& experiment, const std::string& strategy, bool running, double elapsed_s) = 0;
  // An info metric, chaosbed_<name>_info{labels} 1 (the Prometheus convention for identity that PromQL joins
  // on): "build" {version, revision}, "run" {experiment, run_id, seed, spec_sha256}. Set again to replace.
  virtual void setInfo(const std::string& name, const std::map<std::string, std::string>& labels) = 0;

  // Waits until a scrape that began after this call has been answered in full, or the deadline; true if
  // one was (the HTTP server's awaitServed).
  virtual bool awaitScrape(std::chrono::steady_clock::time_point deadline) = 0;
  // The scraper's interval in seconds, once it has scraped twice.
  virtual std::optional<double> scrapeInterval() const = 0;

  // Pushes everything to a Pushgateway ("[http://]host:port[/path]") under job "chaosbed" (batch CI); a
  // gateway that does not answer by the deadline is a Timeout, never a hang.
  virtual Status push(const std::string& gateway, const std::string& experiment, Deadline deadline) = 0;
};

}  // namespace chaosbed
