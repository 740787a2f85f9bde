#pragma once
// Actuator: acts on one node for one fault (Chaos Mesh / Jepsen nemesis style).
//
// Contract
// - prepare() runs before apply() and returns the HealRecords that undo it; the controller persists them
//   first, so a controller killed halfway through apply() is still healed by the agent.
// - apply() and revert() are idempotent; revert() after a half-done or failed apply() restores the
//   original state; revert() of something never applied is a no-op. escalate() is the second stage of a
//   two-stage fault (preempt: SIGKILL after the grace period); other actuators have none.
// - checkAvailable() says whether this actuator can do `fault` on `node` here (cgroup controllers, root,
//   tc, a LinkControl): Unavailable with a message naming what is missing and what to do. The controller
//   refuses to start a plan with any unavailable action; nothing is silently skipped.
// - A node that is not running (killed, not yet replaced) makes apply() return NotFound; the controller logs
//   it as skipped.
// - Threads: one thread at a time (the controller's); implementations keep per-node state unguarded.

#include <memory>
#include <string>
#include <vector>

#include "chaos/actuators/heal.h"
#include "chaos/model/cluster.h"
#include "chaos/model/fault.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

class Actuator {
 public:
  virtual ~Actuator() = default;
  virtual const char* name() const = 0;
  // How it carries out `fault` ("kernel", "shaper", ...), for the event log; by default its name.
  virtual const char* via(const Fault& /*fault*/) { return name(); }
  virtual Status checkAvailable(const Fault& fault, const std::string& node) = 0;
  virtual Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) = 0;
  virtual Status apply(const Fault& fault, const std::string& node) = 0;
  virtual Status escalate(const Fault& /*fault*/, const std::string& /*node*/) { return Status::ok(); }
  virtual Status revert(const Fault& fault, const std::string& node) = 0;
};

}  // namespace chaosbed::chaos
