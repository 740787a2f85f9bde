#pragma once
// FailureDetector: declares a node lost once it has been silent for the timeout (a vanished host, a node
// frozen for too long), as a cluster manager's heartbeat check does. Nothing else can notice such a node:
// its sockets stay open, so peers see silence, not an error.
//
// The orchestration checks every heartbeat interval: it hands in each running node's heartbeat (any value
// that changes while the node lives: its reported wall time) and asks which nodes have expired. A node is
// armed by its first heartbeat (start-up is not silence) and is reported once; forget() re-arms it (an exit,
// a replacement). Times are seconds of the run. Pure: no clocks, no processes; one thread (the caller's).

#include <map>
#include <vector>

#include "core/control/node_id.h"

namespace chaosbed::control {

class FailureDetector {
 public:
  explicit FailureDetector(double timeout_s) : timeout_s_(timeout_s) {}

  void observe(const NodeId& node, double heartbeat, double t);
  void forget(const NodeId& node) { last_.erase(node); }

  struct Lost {
    NodeId node;
    double silent_since_s = 0;  // when its heartbeat was last seen to change
  };
  // Nodes whose heartbeat has not changed for timeout_s by t; each is reported once, then forgotten.
  std::vector<Lost> expired(double t);

  double timeout_s() const { return timeout_s_; }

 private:
  struct Seen {
    double heartbeat = 0;
    double changed_at_s = 0;
  };
  const double timeout_s_;
  std::map<NodeId, Seen> last_;
};

}  // namespace chaosbed::control
