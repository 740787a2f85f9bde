#pragma once
// Controller: executes a Plan against a Cluster on its own thread.
//
// Contract
// - start() refuses to run (Unavailable, listing every problem) when any planned action has no usable
//   actuator here (checkAvailable), heals what a crashed previous run left in the state directory
//   (cleanupStale), writes the state file, starts the lease and the agent, logs every planned action, and
//   starts the run clock: action times are seconds after start().
// - Timed actions run at their planned time on the injected Clock; injection delay = monotonic time when
//   the actuator returned - planned time. Triggered actions are scheduled when notify() reports that the
//   trigger's node (any node, for a trigger without one) reached the step or epoch: at the time of that
//   call plus the action's offset. Each trigger fires once.
// - Faults with a duration are reverted when it ends; stop() (idempotent; also from the destructor)
//   reverts every fault still applied, newest first, and ends the lease and the agent. An agent that dies
//   while the controller runs is replaced at the next lease renewal (event chaos.agent_restarted), so no
//   fault is ever left without a guardian. A revert that fails
//   at stop() counts as a leak (leakCount()) and stays in the state file, which the agent then heals.
// - Crash safety: see state.h. Apply order is: heal records to the state file, then the actuator.
// - The controller's thread raises its own priority (nice -10) when permitted, so that due actions win the
//   CPU from busy nodes; injectionDelaysNs() shows what was achieved.
// - Threads: notify(), stop() and the accessors may be called from any thread. Actuators and the Cluster
//   are only called from the controller's thread (or from stop() after that thread has ended).

#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "chaos/actuators/actuator.h"
#include "chaos/actuators/cgroup.h"
#include "chaos/actuators/link.h"
#include "chaos/actuators/signal.h"
#include "chaos/clock.h"
#include "chaos/model/cluster.h"
#include "chaos/event_log.h"
#include "chaos/model/fault.h"
#include "chaos/model/spec.h"
#include "chaos/state.h"

namespace chaosbed::chaos {

// The standard actuators: signal (kill, preempt), pause (freezer or SIGSTOP), cgroup CPU quota (slow) and
// link (the node shaper through `link_control`; with emulated hosts, the hosts' kernels where they can).
class ActuatorSet {
 public:
  struct Options {
    PauseMode pause_mode = PauseMode::kAuto;
    LinkControl* link_control = nullptr;  // not owned; must outlive the set
    const EmulatedHosts* hosts = nullptr;  // hosts: netns; not owned
  };
  ActuatorSet(Cluster& cluster, const Options& options);
  std::map<FaultKind, Actuator*> map() const;

 private:
  std::unique_ptr<SignalActuator> signal_;
  std::unique_ptr<PauseActuator> pause_;
  std::unique_ptr<CpuQuotaActuator> cpu_;
  std::unique_ptr<ShaperLinkActuator> shaper_;
  std::unique_ptr<HostLinkActuator> host_link_;
  std::unique_ptr<TransportErrorActuator> transport_errors_;
};

struct ControllerOptions {
  Clock* clock = nullptr;       // default: realClock()
  EventLog* events = nullptr;   // not owned; optional
  std::string state_dir;        // empty: no state file, lease or agent
  std::string agent_binary;     // the chaosbed binary for `chaos agent`; empty: no agent
  double lease_interval_s = 1.0;
  double lease_timeout_s = 3.0;
  std::string strategy;         // added to every event as "strategy" (one log holds several strategies' runs)
};

class Controller {
 public:
  Controller(Plan plan, Cluster& cluster, std::map<FaultKind, Actuator*> actuators, ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  Status checkAvailable() const;
  Status start();
  // Progress of a node (its current step and epoch); fires matching triggers.
  // `for_any`: whether the node's progress also counts for triggers that name no node (the workers' does;
  // a server's, only for a trigger that names it).
  void notify(const std::string& node, int64_t step, int64_t epoch, bool for_any = true);
  Status stop();

  // Blocks until every timed action planned at or before run_s has been executed (and, for a manual clock,
  // the clock has reached it); false on timeout. For tests and benchmarks.
  bool waitProcessed(double run_s, std::chrono::milliseconds timeout);

  // Metrics hooks (Prometheus comes later): faults active now by kind (pause/slow/link: applied and not
  // reverted; preempt: notice given, not yet killed), faults left applied after stop(), and counters.
  int activeFaults(FaultKind kind) const;
  int64_t leakCount() const;
  int64_t appliedCount() const;
  int64_t failedCount() const;
  std::vector<int64_t> injectionDelaysNs() const;  // one per executed timed or triggered apply
  pid_t agentPid() const { return agent_pid_.load(); }
  const Plan& plan() const { return plan_; }

 private:
  struct Key {
    uint64_t fault;
    std::string node;
    auto operator<=>(const Key&) const = default;
  };
  void run();
  void leaseLoop();
  void execute(const Action& a, int64_t planned_ns);
  void logAction(const char* type, const Action& a, int64_t planned_ns, int64_t done_ns, const Status& s);
  Status persistLocked();
  void persistOrWarnLocked();
  void log(nlohmann::json event);  // to options_.events, if any
  // After the agent healed on a lapsed lease (it removed the lease file; kHealedFile lists what it healed):
  // those faults count as reverted (by the agent), the state is written again for the next guardian, and
  // the lease renewed. A no-op while the lease stands.
  void adoptAgentHealLocked();

  Plan plan_;
  Cluster& cluster_;
  std::map<FaultKind, Actuator*> actuators_;
  ControllerOptions options_;
  Clock* clock_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false, stopping_ = false, stopped_ = false, executing_ = false;
  int64_t start_ns_ = 0;
  std::multimap<std::pair<int64_t, uint64_t>, Action> queue_;  // (abs ns, seq) -> action
  uint64_t seq_ = 0;
  std::map<std::string, std::vector<Action>> triggered_;       // trigger description -> its actions
  std::map<std::string, ProgressTrigger> triggers_;
  std::map<Key, StateEntry> applied_;  // what stop() must revert, in the state file
  std::vector<Key> apply_order_;
  std::map<FaultKind, int> active_;
  std::set<Key> active_keys_;
  int64_t leaks_ = 0, applied_count_ = 0, failed_count_ = 0;
  std::vector<int64_t> delays_;
  ChaosState state_;
  int clock_sub_ = 0;

  std::thread thread_;
  std::thread lease_thread_;
  std::condition_variable lease_cv_;
  bool lease_stop_ = false;
  // The agent. Set by start(); then replaced only by the lease thread (keepAgent) until stop() has joined it.
  std::atomic<pid_t> agent_pid_{0};
  int agent_fd_ = -1;
  void keepAgent();
};

// Blocks SIGINT and SIGTERM in the calling thread (call it before starting any thread, so every thread
// inherits the mask) and calls on_signal(signo) from a watcher thread when one arrives; the owner then
// calls Controller::stop(). Destroying the watcher ends its thread and restores the mask of the calling
// thread.
class StopSignalWatcher {
 public:
  static Result<std::unique_ptr<StopSignalWatcher>> start(std::function<void(int)> on_signal);
  ~StopSignalWatcher();
  int received() const { return received_.load(); }

 private:
  StopSignalWatcher() = default;
  int signal_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<int> received_{0};
  std::thread thread_;
  sigset_t old_mask_{};
};

}  // namespace chaosbed::chaos
