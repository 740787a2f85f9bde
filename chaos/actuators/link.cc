#include "chaos/actuators/link.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace chaosbed::chaos {
namespace {

bool tcPresent() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(p.substr(start, end - start)) / "tc", ec)) return true;
    start = end + 1;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& linkPeersOf(const Fault& fault, const std::string& node) {
  const bool in_a = std::find(fault.targets.begin(), fault.targets.end(), node) != fault.targets.end();
  return in_a ? fault.peers : fault.targets;
}

Status ShaperLinkActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kLink) return Status::internal(std::string("link-shaper cannot do ") + faultKindName(fault.kind));
  if (control_ == nullptr)
    return Status::unavailable("link fault on " + node + ": no link control (the node runtime's transport shaper) is "
                               "connected to the chaos controller");
  return Status::ok();
}

Status ShaperLinkActuator::apply(const Fault& fault, const std::string& node) {
  applied_.insert({fault.id, node});
  return control_->setLink(node, linkPeersOf(fault, node), fault.params);
}

Status ShaperLinkActuator::revert(const Fault& fault, const std::string& node) {
  if (applied_.erase({fault.id, node}) == 0) return Status::ok();
  return control_->clearLink(node, linkPeersOf(fault, node));
}

Status TransportErrorActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kTransportError)
    return Status::internal(std::string("transport-error cannot do ") + faultKindName(fault.kind));
  if (control_ == nullptr)
    return Status::unavailable("transport_error on " + node + ": no link control (the node runtime) is connected to "
                               "the chaos controller");
  return Status::ok();
}

Status TransportErrorActuator::apply(const Fault& fault, const std::string& node) {
  applied_.insert({fault.id, node});
  return control_->injectTransportError(node, fault.id, fault.peers, fault.params);
}

Status TransportErrorActuator::revert(const Fault& fault, const std::string& node) {
  if (applied_.erase({fault.id, node}) == 0) return Status::ok();
  return control_->clearTransportError(node, fault.id);
}

std::vector<std::string> TbfLinkActuator::tbfCommand(const std::string& netns, const std::string& dev, double mbps) {
  std::vector<std::string> argv;
  if (!netns.empty()) argv = {"ip", "netns", "exec", netns};
  const double bytes_per_s = mbps * 125000.0;
  // At least 10 ms of traffic per burst, and never less than a few MTUs, or tbf starves the link.
  const long burst = std::max<long>(32 * 1024, std::lround(bytes_per_s * 0.01));
  char rate[64];
  std::snprintf(rate, sizeof rate, "%.0fkbit", std::max(8.0, mbps * 1000.0));
  for (const std::string& a : {std::string("tc"), std::string("qdisc"), std::string("replace"), std::string("dev"), dev,
                               std::string("root"), std::string("tbf"), std::string("rate"), std::string(rate),
                               std::string("burst"), std::to_string(burst), std::string("latency"), std::string("50ms")})
    argv.push_back(a);
  return argv;
}

Status TbfLinkActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kLink) return Status::internal(std::string("link-tbf cannot do ") + faultKindName(fault.kind));
  if (fault.params.partition || fault.params.latency_ms > 0)
    return Status::unavailable("link fault '" + fault.name + "' on " + node +
                               ": tbf can only cap bandwidth (this kernel has no netem for latency or partition); "
                               "use the transport shaper for latency_ms and partition");
  if (!(fault.params.bandwidth_mbps > 0))
    return Status::unavailable("link fault '" + fault.name + "' on " + node + ": tbf needs params.bandwidth_mbps");
  if (::geteuid() != 0) return Status::unavailable("link fault on " + node + ": tc qdisc needs root");
  if (!tcPresent()) return Status::unavailable("link fault on " + node + ": the `tc` binary (iproute2) is not in PATH");
  if (cluster_.netDevice(node).empty())
    return Status::unavailable("link fault on " + node + ": the node has no veth (it does not run in a network "
                               "namespace; set cluster.hosts: netns)");
  return Status::ok();
}

Result<std::vector<HealRecord>> TbfLinkActuator::prepare(const Fault&, const std::string& node) {
  HealRecord r;
  r.op = HealRecord::Op::kTcDelete;
  r.netns = cluster_.netNamespace(node);
  r.dev = cluster_.netDevice(node);
  return std::vector<HealRecord>{r};
}

Status TbfLinkActuator::update(const std::string& node) {
  const std::string dev = cluster_.netDevice(node), netns = cluster_.netNamespace(node);
  if (dev.empty()) return Status::unavailable("link fault on " + node + ": the node has no veth");
  auto it = active_.find(node);
  if (it == active_.end() || it->second.empty()) {
    if (it != active_.end()) active_.erase(it);
    HealRecord r;
    r.op = HealRecord::Op::kTcDelete;
    r.netns = netns;
    r.dev = dev;
    return heal(r).withContext(node + ": remove tbf");
  }
  double mbps = 0;
  for (const auto& [id, m] : it->second) mbps = mbps == 0 ? m : std::min(mbps, m);
  return runCommand(tbfCommand(netns, dev, mbps), 5.0).withContext(node + ": tbf");
}

Status TbfLinkActuator::apply(const Fault& fault, const std::string& node) {
  active_[node][fault.id] = fault.params.bandwidth_mbps;
  return update(node);
}

Status TbfLinkActuator::revert(const Fault& fault, const std::string& node) {
  auto it = active_.find(node);
  if (it == active_.end() || it->second.erase(fault.id) == 0) return Status::ok();
  return update(node);
}

}  // namespace chaosbed::chaos
