#include "chaos/actuators/signal.h"

#include <signal.h>

#include <cerrno>
#include <cstring>

#include "core/isolation/cgroup.h"

namespace chaosbed::chaos {
namespace {

Status sendToGroup(pid_t pgid, int sig, const std::string& node) {
  if (pgid <= 1) return Status::internal(node + ": refusing to signal process group " + std::to_string(pgid));
  if (::kill(-pgid, sig) != 0) {
    if (errno == ESRCH) return Status::ok();  // already gone: idempotent
    return Status::ioError(node + ": " + strsignal(sig) + " to process group " + std::to_string(pgid) + ": " +
                           std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace

Status SignalActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kKill && fault.kind != FaultKind::kPreempt)
    return Status::internal(std::string("signal actuator cannot do ") + faultKindName(fault.kind));
  (void)node;
  return Status::ok();
}

Status SignalActuator::signalNode(const std::string& node, int sig) {
  Result<pid_t> pgid = cluster_.processGroup(node);
  if (!pgid.isOk()) return pgid.status();
  CHAOSBED_RETURN_IF_ERROR(sendToGroup(*pgid, sig, node));
  if (sig == SIGKILL) {
    // A SIGKILLed task in a frozen cgroup cannot die until the cgroup is thawed.
    if (NodeCgroup* cg = cluster_.cgroup(node)) {
      Result<bool> frozen = cg->isFrozen();
      if (frozen.isOk() && *frozen) CHAOSBED_RETURN_IF_ERROR(cg->thaw().withContext(node + ": thaw after SIGKILL"));
    }
  }
  return Status::ok();
}

Status SignalActuator::apply(const Fault& fault, const std::string& node) {
  return signalNode(node, fault.kind == FaultKind::kPreempt ? SIGTERM : SIGKILL);
}

Status SignalActuator::escalate(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kPreempt) return Status::ok();
  return signalNode(node, SIGKILL);
}

PauseActuator::PauseActuator(Cluster& cluster, PauseMode mode) : cluster_(cluster), mode_(mode) {
  CgroupSupport s = probeCgroups();
  freezer_supported_ = s.freezer;
  why_no_freezer_ = s.why_not;
}

bool PauseActuator::useFreezer(const std::string& node) {
  if (mode_ == PauseMode::kSignal) return false;
  return freezer_supported_ && cluster_.cgroup(node) != nullptr;
}

Status PauseActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kPause && fault.kind != FaultKind::kVanish)
    return Status::internal(std::string("pause actuator cannot do ") + faultKindName(fault.kind));
  if (mode_ != PauseMode::kFreezer) return Status::ok();
  const std::string what = std::string(faultKindName(fault.kind)) + " of " + node;
  if (!freezer_supported_)
    return Status::unavailable(what + " with pause_mode: freezer: no usable cgroup freezer here (" +
                               why_no_freezer_ + "); run as root with the freezer controller, or set pause_mode: signal");
  if (cluster_.cgroup(node) == nullptr)
    return Status::unavailable(what + " with pause_mode: freezer: the node has no cgroup (node isolation "
                               "is off); set cluster.cpu_per_node or pause_mode: signal");
  return Status::ok();
}

Result<std::vector<HealRecord>> PauseActuator::prepare(const Fault&, const std::string& node) {
  HealRecord r;
  if (useFreezer(node)) {
    NodeCgroup* cg = cluster_.cgroup(node);
    r.op = HealRecord::Op::kThaw;
    r.group = cg->group();
    r.node = cg->node();
    r.paths = cg->paths();
  } else {
    Result<pid_t> pgid = cluster_.processGroup(node);
    if (!pgid.isOk()) return pgid.status();
    r.op = HealRecord::Op::kSigcont;
    r.pgid = *pgid;
  }
  return std::vector<HealRecord>{r};
}

Status PauseActuator::apply(const Fault& fault, const std::string& node) {
  Result<pid_t> pgid = cluster_.processGroup(node);
  if (!pgid.isOk()) return Status::notFound(node + " is not running: " + pgid.status().message());
  Hold& hold = holds_[node];
  if (hold.pgid != *pgid) hold = Hold{*pgid, {}};  // the process it held is gone
  hold.faults.insert(fault.id);
  if (useFreezer(node)) return cluster_.cgroup(node)->freeze().withContext(node + ": freeze");
  return sendToGroup(*pgid, SIGSTOP, node);
}

Status PauseActuator::revert(const Fault& fault, const std::string& node) {
  auto it = holds_.find(node);
  if (it == holds_.end() || it->second.faults.erase(fault.id) == 0) return Status::ok();  // never applied
  if (!it->second.faults.empty()) return Status::ok();  // another pause still holds the node
  const pid_t held = it->second.pgid;
  holds_.erase(it);
  Result<pid_t> now = cluster_.processGroup(node);
  if (!now.isOk() || *now != held) return Status::ok();  // that process is gone; its successor started thawed
  if (useFreezer(node)) return cluster_.cgroup(node)->thaw().withContext(node + ": thaw");
  return sendToGroup(held, SIGCONT, node);
}

}  // namespace chaosbed::chaos
