#pragma once
// The control plane between the controller (`chaosbed run`) and its nodes, carried by the bootstrap Store
// (TensorFlow's coordination service works the same way: a key-value store plus conventions). Every key
// lives under the strategy run's prefix, "<run>/". The controller owns the membership and the stop flag;
// nodes own their reports. Keys written by nodes survive the node, so a killed node's counters still count.
//
//   key                           writer      value
// <incarnation> counts a node's predecessors: 0 for its first process, 1 for its first replacement, ...
//   ready/<node>#<incarnation>    node        "1" once its transport is up (the controller waits on it)
//   start                         controller  realtime ns of the start of training (t0 of TTA)
//   stats/<node>#<incarnation>    node        NodeStats JSON, cumulative, refreshed ~2x per second
//   events (a list)               node        JSON events (recovery, rollback, checkpoint, ...), one atomic
//                                             append each (Store::append), read in order with readList
//   membership/<g>                controller  Membership JSON of generation g (g = 0, 1, ...)
//   stop                          controller  reason; nodes finish the current step and exit 0
//   notice/<node>#<incarnation>   node        a preemption notice (SIGTERM) was received
//   link/<node>/count, link/<node>/<i>  controller  link shaping commands for that node (JSON: op set|clear,
//                                                  peers [node names], bandwidth_mbps, latency_ms, partition)
//   link/<node>/ack/<i>           node        command i was applied to the node's shaper
//
// Times that cross processes are realtime nanoseconds (CLOCK_REALTIME; one host or NTP-synchronised).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/metrics/accounting.h"
#include "transports/bootstrap/store.h"
#include "transports/status.h"

namespace chaosbed {

int64_t realtimeNs();

// Who takes part in training, decided by the controller. Ranks are transport ranks.
struct Membership {
  int64_t generation = 0;
  std::vector<int> workers;  // live worker ranks of this generation, sorted
  bool rollback = false;     // everyone restores the latest checkpoint before continuing (restart policy)
  std::vector<int> joined;   // replacements that join in this generation (elastic: receive params)

  nlohmann::json toJson() const;
  static Membership fromJson(const nlohmann::json& j);
};

// Node side. Owns two watcher threads that long-poll the stop flag and the next membership generation, so
// the training loop checks them with an atomic load.
class ControlChannel {
 public:
  ControlChannel(Store& store, std::string prefix, std::string node, int incarnation);
  ~ControlChannel();

  const std::string& node() const { return node_; }
  int incarnation() const { return incarnation_; }
  std::string key(const std::string& suffix) const { return prefix_ + "/" + suffix; }

  Status announceReady();
  // Blocks until the controller starts training; returns t0 (realtime ns).
  Result<int64_t> waitStart(Deadline deadline);
  // Seconds since t0 (after waitStart).
  double elapsed() const;
  int64_t startNs() const { return start_ns_; }

  Status reportStats(const NodeStats& stats);
  // Appends {"type": type, "node": node, "t": elapsed(), ...fields}.
  Status event(const std::string& type, nlohmann::json fields = {});
  Status noticeReceived();

  bool stopRequested() const { return stop_.load(std::memory_order_acquire); }
  // The newest membership generation the watcher has seen (-1 before the first).
  int64_t latestGeneration() const { return latest_generation_.load(std::memory_order_acquire); }
  Result<Membership> membership(int64_t generation, Deadline deadline);
  // Blocks until a generation > after exists; returns the newest one.
  Result<Membership> waitMembershipAfter(int64_t after, Deadline deadline);

  // Starts the watchers and a reporter that publishes stats() every period; stopBackground() publishes a
  // last report.
  void startBackground(std::function<NodeStats()> stats, std::chrono::milliseconds period);
  void stopBackground();

  Store& store() { return store_; }
  // Key prefix of this strategy run in the store.
  const std::string& prefix() const { return prefix_; }

 private:
  Store& store_;
  std::string prefix_;
  std::string node_;
  int incarnation_;
  int64_t start_ns_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> latest_generation_{-1};
  std::atomic<bool> closing_{false};
  std::function<NodeStats()> stats_fn_;
  std::vector<std::thread> threads_;
};

}  // namespace chaosbed
