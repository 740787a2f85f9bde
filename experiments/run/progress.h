#pragma once
// Live progress of `chaosbed run`, for a person at a terminal or a CI log. On a terminal: one status line per
// strategy, redrawn in place (accuracy and target, elapsed, ETA from the accuracy trend, faults active, nodes
// alive), ended when the strategy is done. In a pipe: the same line, at most once every few seconds of the run.

#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiments/run/strategy_run.h"

namespace chaosbed::run {

// Seconds until the accuracy trend reaches `target`: a least-squares line through the last evaluations
// (time_s, accuracy), at most `window` of them (few: a learning curve bends, and a line through a long stretch
// of it promises too much). nullopt when there are fewer than 3 or the trend is not rising.
std::optional<double> etaSeconds(const std::vector<std::pair<double, double>>& evaluations, double target,
                                 size_t window = 5);

class ProgressPrinter {
 public:
  // `out` null prints nothing. `pipe_interval_s`: the least run time between two lines when not a terminal.
  ProgressPrinter(FILE* out, bool tty, double target, double pipe_interval_s = 5.0)
      : out_(out), tty_(tty), target_(target), pipe_interval_s_(pipe_interval_s) {}

  void update(const Progress& p);
  // Ends the strategy's line: "[label] done: reason" on a line of its own.
  void done(const std::string& label, const std::string& reason);

  // The status line for `p` (without a newline), as update() prints it. Its steps/s is the rate since the
  // strategy's last printed line (a pipe's 5 s, not one 500 ms sample that a slow all-reduce empties).
  std::string line(const Progress& p) const;

 private:
  FILE* out_;
  bool tty_;
  double target_;
  double pipe_interval_s_;
  std::map<std::string, std::vector<std::pair<double, double>>> evaluations_;  // per strategy: (t, accuracy)
  struct Printed {
    double elapsed_s = 0;
    int64_t steps = 0;
  };
  std::map<std::string, Printed> last_printed_;  // per strategy: the last line's run time and steps
};

}  // namespace chaosbed::run
