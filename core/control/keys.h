#pragma once
// ControlKeys: every store key of one strategy run's control plane, built in one place for the controller
// (experiments/run) and the nodes (core/runtime/control.h), so the two sides cannot drift apart. Keys live
// under the run's prefix "<run id>/<strategy label>". The values' encodings are next to their types:
// Membership (core/runtime/control.h), NodeStats (core/metrics/accounting.h), LinkCommand
// (core/runtime/link_command.h); events are JSON objects, one atomic append each.
//
//   key                              writer      value
//   ready/<node>#<incarnation>       node        "1" once its transport is up
//   start                            controller  realtime ns of the start of training (t0 of TTA)
//   stats/<node>#<incarnation>       node        NodeStats, cumulative, refreshed every 250 ms
//   events (a list)                  node        JSON events (recovered, checkpoint, eval, error, ...)
//   membership/<g>                   controller  Membership of generation g (0, 1, ...)
//   stop                             controller  the reason; nodes finish their step and exit 0
//   notice/<node>#<incarnation>      node        realtime ns when it received a preemption notice
//   link/<node>/count                controller  counter of link commands for that node
//   link/<node>/<i>                  controller  LinkCommand i
//   link/<node>/ack/<i>              node        "1" applied, or "rejected: why"
// <incarnation> counts a node's predecessors: 0 for its first process, 1 for its first replacement, ...

#include <cstdint>
#include <string>

namespace chaosbed::control {

class ControlKeys {
 public:
  explicit ControlKeys(std::string prefix) : prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }

  std::string ready(const std::string& node, int incarnation) const { return perProcess("ready/", node, incarnation); }
  std::string start() const { return at("start"); }
  std::string stats(const std::string& node, int incarnation) const { return perProcess("stats/", node, incarnation); }
  std::string events() const { return at("events"); }
  std::string membership(int64_t generation) const { return at("membership/" + std::to_string(generation)); }
  std::string stop() const { return at("stop"); }
  std::string notice(const std::string& node, int incarnation) const { return perProcess("notice/", node, incarnation); }
  std::string linkCount(const std::string& node) const { return at("link/" + node + "/count"); }
  std::string linkCommand(const std::string& node, int64_t i) const { return at("link/" + node + "/" + std::to_string(i)); }
  std::string linkAck(const std::string& node, int64_t i) const { return at("link/" + node + "/ack/" + std::to_string(i)); }
  // A key private to a strategy's own protocol (e.g. "ps/<shard>/applied"), under the same prefix.
  std::string at(const std::string& suffix) const { return prefix_ + "/" + suffix; }

 private:
  std::string perProcess(const char* kind, const std::string& node, int incarnation) const {
    return at(kind + node + "#" + std::to_string(incarnation));
  }
  std::string prefix_;
};

}  // namespace chaosbed::control
