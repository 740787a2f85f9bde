#pragma once
// Supervision: the controller's decisions about one strategy run, as a pure function of an explicit state.
// Which failures count, when a node is restarted (and how it backs off when it keeps dying young), which
// membership generation to publish (shrink under elastic, roll back together under restart), when a
// failure's recovery episode ends, and when the run is over. It knows nothing of processes, stores or
// clocks: the orchestration (experiments/run) feeds it what happened, with run times in seconds, and
// carries out the actions it returns, in order. Unit tests drive it without processes.
//
// Thread safety: none; the orchestration serialises calls (its supervisor lock).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/control/node_id.h"
#include "core/control/membership.h"

namespace chaosbed::control {

// The strategy's failure policies (from the spec).
struct SupervisionPolicy {
  int workers = 1;
  bool synchronous = false;          // mirrored: workers move together, generation by generation
  bool elastic = false;              // synchronous on_failure: elastic (survivors go on); else restart
  bool job_restart = false;          // parameter server on_server_failure: job_restart; else shard_restart
  double restart_after_crash_s = 0;  // a node that dies on its own is restarted this long after (plus backoff)
};

// A node process ended.
struct NodeExit {
  NodeId node;
  bool requested = false;  // the orchestration stopped it (stop, restart): not a failure
  bool by_chaos = false;   // chaos killed it; chaos decides about its replacement
  bool clean = false;      // it exited with status 0 on its own (a worker that finished)
  double lifetime_s = 0;   // how long that process lived
};

struct Action {
  enum class Kind : uint8_t {
    kRestart,            // restart `node` now (only_if_running: only if it is still running)
    kPublishMembership,  // publish `membership`
    kRecovery,           // a failure's recovery episode ended after `seconds`
  };
  Kind kind = Kind::kRestart;
  NodeId node;
  bool only_if_running = false;
  Membership membership;
  double seconds = 0;
  std::string cause;  // kRecovery: what the episode recovered from ("worker-1 exited", "collective failure ...")

  static Action restart(NodeId node, bool only_if_running) {
    Action a;
    a.node = node;
    a.only_if_running = only_if_running;
    return a;
  }
  static Action publish(Membership m) {
    Action a;
    a.kind = Kind::kPublishMembership;
    a.membership = std::move(m);
    return a;
  }
  static Action recovery(double seconds, std::string cause) {
    Action a;
    a.kind = Kind::kRecovery;
    a.seconds = seconds;
    a.cause = std::move(cause);
    return a;
  }
};

class Supervision {
 public:
  explicit Supervision(SupervisionPolicy policy);

  // Generation 0: every worker.
  std::vector<Action> start();
  // A node exited at run time t; worker_steps is the workers' total step count at that moment.
  std::vector<Action> onExit(const NodeExit& exit, double t, int64_t worker_steps);
  // The orchestration started incarnation `incarnation` of node (a restart, by itself or by chaos); its
  // ready announcement is awaited from now on.
  void onRestarted(const NodeId& node, int incarnation);
  // Nodes whose restart is due at t (the orchestration restarts those that are not running).
  std::vector<NodeId> restartsDue(double t) const;
  // The incarnation of node whose ready announcement is awaited, if any.
  std::optional<int> awaitedIncarnation(const NodeId& node) const;
  // The awaited incarnations of these nodes announced ready (one call per check, so that several
  // replacements that are ready together join in one generation).
  std::vector<Action> onReady(const std::vector<NodeId>& ready);
  // Workers completed worker_steps in total by t: asynchronous training has recovered from a worker's loss
  // once its workers stepped past it.
  std::vector<Action> onProgress(int64_t worker_steps, double t);
  // A node reported its first step after a failure at t: every episode that began by then is over.
  std::vector<Action> onRecoveredEvent(double t);
  // A member of a synchronous strategy saw a collective of `generation` fail (a timeout, a peer lost on the
  // control plane, an abandoned endpoint) at t and waits for a newer generation. Recorded; onTick decides.
  void onCollectiveFailure(const NodeId& reporter, int64_t generation, double t, const std::string& what);
  // At run time t: a reported collective failure that no exit explains (still the current generation, no
  // worker down, reported at least kExitGraceS ago so that an exit that caused it has been seen) makes a new
  // generation of the members: the same set under elastic, every worker rolled back under restart. It opens
  // one recovery episode (another report while that episode is open adds a generation, not an episode).
  std::vector<Action> onTick(double t);
  static constexpr double kExitGraceS = 1.0;

  // The run was stopped at t: episodes that close later are clamped to it.
  void onStop(double t);
  // The reason the run is over because of its workers ("workers_ended"), given the workers running now:
  // none runs and none is down awaiting a replacement (each one finished).
  std::optional<std::string> workersEnded(const std::set<int>& running_workers) const;

  int failures() const { return failures_; }
  int64_t generation() const { return generation_; }
  const std::vector<int>& members() const { return members_; }
  // Whether node is down (dead, or restarted and not yet ready).
  bool isDown(const NodeId& node) const { return down_.count(node) > 0; }

 private:
  struct Outage {
    double since_s = 0;
    bool by_chaos = false;
    std::optional<double> restart_at_s;
    std::optional<int> awaiting_incarnation;
  };
  struct Episode {
    double since_s = 0;
    int64_t steps_at_failure = 0;
    bool worker = false;
    std::string cause;
    bool collective = false;  // opened by a collective failure (onTick), not by an exit
  };
  struct ReportedFailure {
    int64_t generation = 0;
    double since_s = 0;
    std::string what;
  };

  // The next generation; it joins the workers that announced ready since the last one.
  Action publish(std::vector<int> workers, bool rollback);

  const SupervisionPolicy policy_;
  int64_t generation_ = -1;
  std::vector<int> members_;
  std::map<int, int> incarnations_;  // worker rank -> the incarnation that announced ready (absent: 0)
  std::vector<int> joining_;         // workers ready since the last generation, joined by the next
  std::map<NodeId, Outage> down_;
  std::map<NodeId, int> young_deaths_;  // consecutive short-lived incarnations per node
  std::vector<Episode> episodes_;
  std::optional<ReportedFailure> reported_;  // the earliest unanswered collective failure
  int failures_ = 0;
  std::optional<double> stopped_at_;
};

}  // namespace chaosbed::control
