#pragma once
// report.html: one self-contained page (inline SVG and CSS, no script, no network) built from a results
// directory (experiments/run/results.h):
//   - accuracy vs time per strategy (timeseries.csv), one <polyline class="series" data-strategy=LABEL> per
//     strategy, with the target as a dashed line; fault intervals from events.jsonl shaded
//     (<rect class="fault" data-kind=...>: chaos.applied .. chaos.reverted of the same fault and node),
//     kills and preemptions as marks (<line class="mark">), node exits as dots (<circle class="exit">);
//   - idle wait by reason per strategy as stacked bars (summary.json: compute, transfer, idle peer/server/
//     recovery seconds), <rect class="bar" data-strategy=LABEL data-part=...>;
//   - per strategy, each node's time over time (node_timeseries.csv): a lane per node, a cell per sample
//     interval (nodeCells) split by the share of it each category took, <rect class="nodetime" data-strategy
//     data-node data-part> (data-part "none": nothing booked: dead, not started, or in a call still open);
//   - a table of TTA, goodput, idle fraction, failures, recoveries, samples lost and stop reason;
//   - the resolved spec (spec.yaml), HTML-escaped.
// Missing optional inputs (no events, empty time series) give empty plots, not errors; a missing or
// malformed summary.json is an error naming the file.

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/base/status.h"

namespace chaosbed::report {

// One row of timeseries.csv.
struct SeriesPoint {
  double time_s = 0;
  std::string strategy;
  double accuracy = 0;
};

// A shaded interval (or, with end_s == start_s, a mark) on one strategy's time axis.
struct FaultBand {
  std::string strategy;
  std::string kind;   // "pause", "slow", "link", "kill", "preempt", "node.exited", ...
  std::string node;
  double start_s = 0;
  double end_s = 0;   // == start_s for instantaneous events
};

// One row of node_timeseries.csv: a node's cumulative time by category (TimeCategory order).
struct NodeSeriesPoint {
  double time_s = 0;
  std::string strategy;
  std::string node;
  double wall_s = 0;
  std::array<double, 9> seconds{};  // by TimeCategory (core/metrics/accounting.h)
};

// What a node did in [start_s, end_s], in seconds per category (TimeCategory order).
struct NodeCell {
  double start_s = 0;
  double end_s = 0;
  std::array<double, 9> seconds{};  // by TimeCategory (core/metrics/accounting.h)
};

// Everything the page shows, read from a results directory.
struct ReportInput {
  nlohmann::json summary;           // summary.json
  std::vector<SeriesPoint> series;  // timeseries.csv
  std::vector<NodeSeriesPoint> node_series;  // node_timeseries.csv
  std::vector<FaultBand> faults;    // from events.jsonl
  std::string spec_yaml;            // spec.yaml
  std::vector<std::string> run_order;  // strategies in the order they ran (run.start events)
};

// Escapes & < > " ' for HTML text and attribute values.
std::string htmlEscape(std::string_view text);

// Parses timeseries.csv text; `file` names it in errors ("file:line: ...").
Result<std::vector<SeriesPoint>> parseTimeseries(const std::string& text, const std::string& file);
// One node's samples (in time order) as cells, from 0 to its last sample. A node books a blocking call (a
// collective, a stretch it was frozen) when the call ends, so a cell that booked more than it lasted gives the
// surplus to the latest earlier cells that booked less, which the call filled; what stays unfilled is time
// the node booked nothing: dead, not started yet, or in a call still open at its last sample.
std::vector<NodeCell> nodeCells(const std::vector<const NodeSeriesPoint*>& samples);
// Parses node_timeseries.csv text (the columns results.h names, in that order).
Result<std::vector<NodeSeriesPoint>> parseNodeTimeseries(const std::string& text, const std::string& file);
// Turns events.jsonl text into fault bands, per strategy (chaos events between a strategy's run.start and
// run.stop belong to it; times relative to its run.start). Lines that are not JSON objects are skipped.
std::vector<FaultBand> faultBandsFromEvents(const std::string& text);

Result<ReportInput> loadReportInput(const std::string& dir);
std::string renderReport(const ReportInput& input);
// Reads `dir` and writes dir/report.html atomically.
Status writeReport(const std::string& dir);

}  // namespace chaosbed::report
