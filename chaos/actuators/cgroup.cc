#include "chaos/actuators/cgroup.h"

#include <algorithm>

#include "core/isolation/cgroup.h"

namespace chaosbed::chaos {

CpuQuotaActuator::CpuQuotaActuator(Cluster& cluster) : cluster_(cluster) {
  CgroupSupport s = probeCgroups();
  cpu_supported_ = s.cpu;
  why_not_ = s.why_not;
}

Status CpuQuotaActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kSlow) return Status::internal(std::string("cgroup-cpu cannot do ") + faultKindName(fault.kind));
  if (!cpu_supported_)
    return Status::unavailable("slow of " + node + ": no usable cgroup cpu controller here (" + why_not_ +
                               "); run as root with the cpu controller mounted");
  if (cluster_.cgroup(node) == nullptr)
    return Status::unavailable("slow of " + node + ": the node has no cgroup (node isolation is off); set cluster.cpu_per_node");
  return Status::ok();
}

double CpuQuotaActuator::quotaFor(const std::string& node, double fraction) {
  const double base = cluster_.cpuQuota(node) > 0 ? cluster_.cpuQuota(node) : 1.0;
  return std::max(0.01, base * fraction);
}

Result<std::vector<HealRecord>> CpuQuotaActuator::prepare(const Fault&, const std::string& node) {
  NodeCgroup* cg = cluster_.cgroup(node);
  if (cg == nullptr) return Status::unavailable("slow of " + node + ": the node has no cgroup");
  HealRecord r;
  r.op = HealRecord::Op::kCpuLimit;
  r.group = cg->group();
  r.node = cg->node();
  r.paths = cg->paths();
  r.cpus = cluster_.cpuQuota(node);
  return std::vector<HealRecord>{r};
}

Status CpuQuotaActuator::update(const std::string& node) {
  NodeCgroup* cg = cluster_.cgroup(node);
  if (cg == nullptr) return Status::unavailable("slow of " + node + ": the node has no cgroup");
  auto it = active_.find(node);
  if (it == active_.end() || it->second.empty()) {
    if (it != active_.end()) active_.erase(it);
    return cg->setCpuLimit(cluster_.cpuQuota(node)).withContext(node + ": restore CPU quota");
  }
  double f = 1.0;
  for (const auto& [id, frac] : it->second) f = std::min(f, frac);
  return cg->setCpuLimit(quotaFor(node, f)).withContext(node + ": lower CPU quota");
}

Status CpuQuotaActuator::apply(const Fault& fault, const std::string& node) {
  active_[node][fault.id] = fault.params.cpu_fraction;
  return update(node);
}

Status CpuQuotaActuator::revert(const Fault& fault, const std::string& node) {
  auto it = active_.find(node);
  if (it == active_.end() || it->second.erase(fault.id) == 0) return Status::ok();
  return update(node);
}

}  // namespace chaosbed::chaos
