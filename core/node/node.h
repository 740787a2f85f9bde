#pragma once
// The node process: what `chaosbed worker`, `chaosbed ps` and `chaosbed evaluator` run. It joins the
// strategy run the controller described in a node config file, sets up the transport and the control
// channel, and runs its role (core/strategies).
//
// Node config (JSON, written by the controller):
//   {"store": "127.0.0.1:PORT", "secret_file": "<results dir>/.secret (0600)", "prefix": "<run>/<strategy label>", "workers": W, "servers": P,
//    "training": TrainingConfig, "strategy": StrategyOptions, "checkpoint_dir": "...",
//    "connect_timeout_s": 60}
// Transport ranks: worker i = i, ps j = W + j, the evaluator = W + P (core/strategies/strategy.h).
//
// Exit status: 0 after a normal stop (or leaving on a preemption notice), 3 for a bad config, 4 for an
// infrastructure failure (store unreachable, transport set-up, training error, or the controller gone
// while training: its store stayed unavailable, so the node stopped rather than outlive it; see
// core/runtime/control.h).

#include <string>

#include "transports/base/status.h"

namespace chaosbed {

struct NodeLaunch {
  std::string config_path;
  std::string role;      // "worker" | "ps" | "evaluator"
  int index = 0;         // within the role
  int incarnation = 1;   // the launcher's count: 1 for the first process of a node, +1 per replacement
};

int runNodeProcess(const NodeLaunch& launch);

}  // namespace chaosbed
