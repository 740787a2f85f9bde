#pragma once
// `chaosbed suite`: resilience expectations as pass/fail, for a nightly CI.
//
// A suite file:
//   apiVersion: chaosbed/v1alpha1
//   kind: Suite
//   metadata: {name: nightly}
//   scenarios:
//     - spec: ../scenarios/tiny-synthetic.yaml     # relative to the suite file (or absolute)
//       name: tiny                                 # default: the spec's metadata.name
//       overrides: [training.time_limit_s=20]      # optional, as `path=value` (core/config/override.h)
//       assert:
//         - reached_target                         # every strategy of the scenario
//         - tta_seconds < 60
//         - idle_fraction[parameter_server] < 0.3  # one strategy, by label
//         - recoveries >= 1
//         - no_checkpoint_lost
//         - tta_seconds[parameter_server] / tta_seconds[mirrored] < 1.5
//
// Assertion grammar: `PREDICATE[label]?` with PREDICATE reached_target | no_checkpoint_lost, or
// `METRIC[label]? OP NUMBER`, or `METRIC[label] / METRIC[label] OP NUMBER` (a ratio names both labels),
// OP one of < <= > >= == !=. METRIC is a number of summary.json's strategy entry: tta_seconds,
// final_accuracy, final_loss, steps, samples, samples_lost, wall_seconds, goodput_samples_per_s,
// compute_seconds, transfer_seconds, idle_seconds (peer + server + recovery), idle_peer_seconds,
// idle_server_seconds, idle_recovery_seconds, idle_fraction, failures, recoveries, faults_applied,
// chaos_leaks, checkpoints_written, checkpoint_failures.
// no_checkpoint_lost holds when samples_lost == 0 and checkpoint_failures == 0: no step that a checkpoint
// had made durable was rolled back past, and every checkpoint write succeeded. A tta_seconds of a run that
// did not reach the target makes any comparison on it fail ("measured: target not reached").
// Without a label an assertion expands to one test case per strategy of the scenario.
//
// Every problem in a suite file is reported as file:line:col: field: message (columns point into the
// assertion text), including labels that the scenario's spec does not define and invalid scenario specs.

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "experiments/spec/spec.h"
#include "transports/base/status.h"

namespace chaosbed::suite {

enum class Op : uint8_t { kLt, kLe, kGt, kGe, kEq, kNe };
const char* opName(Op op);

struct MetricRef {
  std::string metric;
  std::string label;  // empty: every strategy
};

struct Assertion {
  enum class Kind : uint8_t { kPredicate, kCompare, kRatio };
  Kind kind = Kind::kCompare;
  std::string text;   // as written
  MetricRef lhs;      // predicate name for kPredicate
  MetricRef rhs;      // kRatio only
  Op op = Op::kLt;
  double value = 0;
  int line = 0, column = 0;  // where `text` sits in the suite file
};

// Parses one assertion. On error returns the message and, in *error_offset, its 0-based offset in `text`.
std::optional<Assertion> parseAssertion(const std::string& text, std::string* error, size_t* error_offset);

struct Scenario {
  std::string name;
  std::string spec_path;  // resolved against the suite file's folder
  std::vector<std::string> overrides;
  spec::ExperimentSpec spec;  // parsed with the overrides
  std::vector<Assertion> assertions;
};

struct Suite {
  std::string name;
  std::string file;
  std::vector<Scenario> scenarios;
};

// Reads and validates a suite file; every problem lands in `diagnostics`; nullopt when there was any.
std::optional<Suite> readSuite(const std::string& path, config::Diagnostics* diagnostics);

// One evaluated test case: an assertion for one strategy (or a ratio).
struct CaseResult {
  std::string name;      // "tta_seconds < 60 [mirrored]"
  bool passed = false;
  bool error = false;    // infrastructure: the scenario did not produce the strategy's results
  std::string message;   // "measured 72.3, expected < 60"
  double seconds = 0;    // the run time of the strategies it is about (their wall_seconds)
};

// Evaluates an assertion against a summary.json object (run/results.h). Labels missing from the summary
// give error cases; `labels` (in spec order) is what an unlabelled assertion expands to.
std::vector<CaseResult> evaluate(const Assertion& assertion, const nlohmann::json& summary,
                                 const std::vector<std::string>& labels);

struct ScenarioResult {
  std::string name;
  double seconds = 0;
  std::string error;  // non-empty: the run failed (infrastructure) and every case is an error
  std::vector<CaseResult> cases;
  nlohmann::json provenance;  // the run's summary.json provenance (null when it did not run)
};

// JUnit XML: <testsuites name tests failures errors time><testsuite name tests failures errors time>
// [<properties><property name="chaosbed.<provenance key>" value/>...]<testcase classname name time>
// [<failure message type>text</failure> | <error ...> | <system-out>measured value</system-out>]; XML-escaped.
std::string junitXml(const std::string& suite_name, const std::vector<ScenarioResult>& results);
std::string xmlEscape(std::string_view text);

// Runs a scenario into `dir`; returns the summary.json object it produced.
using ScenarioRunner = std::function<Result<nlohmann::json>(const Scenario& scenario, const std::string& dir)>;

struct SuiteOutcome {
  std::vector<ScenarioResult> results;
  int failures = 0;
  int errors = 0;
  int cases = 0;
};

// Runs every scenario (dirs out_dir/<scenario name>) and evaluates its assertions.
SuiteOutcome runSuite(const Suite& suite, const std::string& out_dir, const ScenarioRunner& runner, FILE* progress);

}  // namespace chaosbed::suite
