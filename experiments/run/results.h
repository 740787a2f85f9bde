#pragma once
// The results directory of a run:
//   spec.yaml        the resolved spec (every default filled in)
//   events.jsonl     every chaos and training event (chaos/event_log.h)
//   timeseries.csv   time_s,strategy,accuracy,loss,samples,alive_nodes — one row per evaluated snapshot, every
//                    column as it was at the snapshot's time_s (samples interpolated between the controller's
//                    readings 500 ms apart, alive_nodes from the last reading before it: observationAt)
//   node_timeseries.csv  time_s,strategy,node,wall_s,compute_s,transfer_s,checkpoint_s,idle_peer_s,
//                    idle_server_s,idle_recovery_s,paused_s — each node's cumulative time about once a second
//                    (NodeSample)
//   summary.json     {"experiment", "seed", "complete", "strategies": {label: StrategyResult::toJson()}}
//   <label>/         per strategy: node logs, node config, checkpoints, chaos state
// Files are written atomically (temp file + rename), and rewritten after every strategy, so an
// interrupted run keeps what it had measured.

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "experiments/run/provenance.h"
#include "experiments/run/strategy_run.h"
#include "experiments/spec/spec.h"
#include "transports/base/files.h"

namespace chaosbed::run {

// results/<experiment>/<UTC time>-<id>/ under base, with base/<experiment>/latest pointing at it.
Result<std::string> makeResultsDir(const std::string& base, const std::string& experiment, std::string* run_id);

// summary.json: the experiment, its rate-driven faults' rates, every strategy's result, and the run's
// provenance.
struct RunRecord {
  const Provenance* provenance = nullptr;
  const std::vector<chaos::FaultRate>* fault_rates = nullptr;
  nlohmann::json hosts;  // hosts: {netns | agents: N}: each host's agent (hostname, address, who started it)
};
Status writeSummary(const std::string& dir, const spec::ExperimentSpec& spec,
                    const std::vector<StrategyResult>& results, bool complete, const RunRecord& record);
// timeseries.csv and node_timeseries.csv.
Status writeTimeseries(const std::string& dir, const std::vector<StrategyResult>& results);
// A node_timeseries.csv column: "compute_s", "idle_peer_s", ...
std::string nodeTimeColumn(TimeCategory c);
// The comparison table printed at the end of a run.
std::string comparisonTable(const std::vector<StrategyResult>& results, double target_accuracy);
// summary.json's "emulation": what workload.emulate emulates and how (the derivation's figures), with the
// note that accuracy is the small real model's; null without emulation.
nlohmann::json emulationJson(const spec::ExperimentSpec& spec);
// One line for the terminal and the report ("" without emulation).
std::string emulationNote(const spec::ExperimentSpec& spec);
// How far a strategy's measured comm/compute ratio may be from its emulated target (measured / target - 1)
// and still be the regime the spec names (docs/design.md §2.7).
inline constexpr double kEmulationRatioTolerance = 0.20;
// One warning line per strategy whose ratio missed its target by more than the tolerance, saying which way
// and the likely cause ("" when every one is on target, or without emulation). summary.json has the same
// verdict per strategy: comm_compute_ratio.{off_by, on_target}.
std::string emulationWarnings(const std::vector<StrategyResult>& results);
// The node a strategy's workers spent more than half their wall waiting for, from each node's final stats
// (by node name): under the parameter server, the shard the workers waited for (`server` idle), the busiest
// one; under mirrored, the worker the others waited for at collectives (`peer` idle), the one that waited
// least. nullopt when the workers waited less than half their time, or when that node itself waited for
// its peers half its time or more (then no one node holds the others back).
std::optional<StrategyResult::Bottleneck> diagnoseBottleneck(const std::string& kind,
                                                             const std::map<std::string, NodeStats>& by_node);
// One warning line per strategy with a bottleneck ("" when none has one); summary.json has "bottleneck".
std::string bottleneckWarnings(const std::vector<StrategyResult>& results);
// How late a TTA can be, as a share of it, past which a run says so: a 1 s evaluation interval against a
// 10 s TTA decides ratios by the tick.
inline constexpr double kTtaResolutionLimit = 0.02;
// One warning line per strategy whose sustained TTA is known only to more than kTtaResolutionLimit of itself
// (tta_resolution_s / tta_sustained_seconds); summary.json has it as tta_resolution_fraction.
std::string resolutionWarnings(const std::vector<StrategyResult>& results);
// What every report of a cluster.simulate run says: nothing was trained.
// summary.json's `summary_version`: raised when a field is removed or changes meaning (an added field keeps
// it), so that a reader of old results can tell which it holds.
inline constexpr int kSummaryVersion = 1;
inline constexpr const char* kSimulatedNote =
    "simulated nodes (cluster.simulate): the nodes exercised the control plane only and trained nothing; "
    "read control_plane, not accuracy or goodput";

}  // namespace chaosbed::run
