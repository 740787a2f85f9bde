#include "chaos/actuators/link.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace chaosbed::chaos {
namespace {

bool onPath(const char* tool) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(p.substr(start, end - start)) / tool, ec)) return true;
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
  if (fault.params.via == FaultParams::Via::kKernel)
    return Status::unavailable("link fault '" + fault.name + "' (via: kernel) needs emulated hosts (cluster.hosts: "
                               "{netns: N}); on one host the nodes' shapers carry out link faults");
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

std::string HostLinkActuator::whyNotKernel(const Fault& fault) {
  if (fault.params.latency_ms > 0) return "added latency needs the in-process shaper (these kernels have no netem)";
  std::map<int, std::string> a_hosts;
  for (const std::string& n : fault.targets) a_hosts.emplace(cluster_.host(n), n);
  for (const std::string& n : fault.peers) {
    const int h = cluster_.host(n);
    if (h < 0) return n + " is not on an emulated host";
    if (auto it = a_hosts.find(h); it != a_hosts.end())
      return it->second + " and " + n + " share host " + std::to_string(h) + ": no link between hosts joins them";
  }
  if (a_hosts.count(-1)) return a_hosts.at(-1) + " is not on an emulated host";
  return {};
}

Status HostLinkActuator::checkAvailable(const Fault& fault, const std::string& node) {
  if (fault.kind != FaultKind::kLink) return Status::internal(std::string("link cannot do ") + faultKindName(fault.kind));
  if (fault.params.via == FaultParams::Via::kShaper) return shaper_.checkAvailable(fault, node);
  const std::string why = whyNotKernel(fault);
  if (!why.empty()) {
    if (fault.params.via == FaultParams::Via::kKernel)
      return Status::unavailable("link fault '" + fault.name + "' (via: kernel): " + why + "; use via: auto or shaper");
    return shaper_.checkAvailable(fault, node);
  }
  if (::geteuid() != 0) return Status::unavailable("link fault '" + fault.name + "' in the hosts' kernels needs root");
  for (const char* tool : {"tc", "ip"})
    if (!onPath(tool))
      return Status::unavailable(std::string("link fault '") + fault.name + "': the `" + tool +
                                 "` binary (iproute2) is not in PATH");
  return Status::ok();
}

Result<std::vector<HealRecord>> HostLinkActuator::prepare(const Fault& fault, const std::string& node) {
  // In the kernel: nothing outlives the controller (the hosts' namespaces go with it).
  if (!inKernel(fault)) return shaper_.prepare(fault, node);
  return std::vector<HealRecord>{};
}

Status HostLinkActuator::apply(const Fault& fault, const std::string& node) {
  if (!inKernel(fault)) return shaper_.apply(fault, node);
  const int from = cluster_.host(node);
  std::set<int> to_hosts;
  for (const std::string& peer : linkPeersOf(fault, node)) to_hosts.insert(cluster_.host(peer));
  Status first;
  for (const int to : to_hosts) {
    Link& link = wanted_[{from, to}];
    if (fault.params.partition) link.partitions.insert({fault.id, node});
    else link.caps[{fault.id, node}] = fault.params.bandwidth_mbps;
    if (Status s = update(from, to); !s.isOk() && first.isOk()) first = s;
  }
  return first;
}

Status HostLinkActuator::revert(const Fault& fault, const std::string& node) {
  if (!inKernel(fault)) return shaper_.revert(fault, node);
  const int from = cluster_.host(node);
  Status first;
  for (auto& [hosts, link] : wanted_) {
    if (hosts.first != from) continue;
    const size_t erased = link.caps.erase({fault.id, node}) + link.partitions.erase({fault.id, node});
    if (erased == 0) continue;
    if (Status s = update(hosts.first, hosts.second); !s.isOk() && first.isOk()) first = s;
  }
  return first;
}

Status HostLinkActuator::update(int from, int to) {
  const Link& want = wanted_[{from, to}];
  Installed& have = installed_[{from, to}];
  double mbps = 0;
  for (const auto& [holder, m] : want.caps) mbps = mbps == 0 ? m : std::min(mbps, m);
  const bool blackhole = !want.partitions.empty();
  const std::string peer = hosts_.address(to) + "/32";
  const std::string what = "host " + std::to_string(from) + " -> host " + std::to_string(to);
  auto run = [&](std::vector<std::string> argv) { return hosts_.runInHost(from, argv).withContext(what); };
  const std::string dev = EmulatedHosts::kDevice;
  // One class of the host's htb root (EmulatedHosts made it) and one filter per peer host; the filter's
  // priority names it, so that it can be deleted alone.
  char classid[16];
  std::snprintf(classid, sizeof classid, "1:%x", to + 0x10);
  const std::string prio = std::to_string(to + 1);

  if (blackhole != have.blackhole) {
    CHAOSBED_RETURN_IF_ERROR(run({"ip", "route", blackhole ? "replace" : "del", "blackhole", peer}));
    have.blackhole = blackhole;
  }
  if (mbps == have.mbps) return Status::ok();
  if (mbps == 0) {
    CHAOSBED_RETURN_IF_ERROR(run({"tc", "filter", "del", "dev", dev, "parent", "1:", "protocol", "ip", "prio", prio}));
    CHAOSBED_RETURN_IF_ERROR(run({"tc", "class", "del", "dev", dev, "classid", classid}));
    have.mbps = 0;
    return Status::ok();
  }
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.0fkbit", std::max(8.0, mbps * 1000.0));
  // The quantum only divides spare rate between classes (there is none to spare here); a fixed one keeps htb
  // from warning that rate/r2q is out of range.
  CHAOSBED_RETURN_IF_ERROR(run({"tc", "class", have.mbps == 0 ? "add" : "change", "dev", dev, "parent", "1:",
                                "classid", classid, "htb", "rate", rate, "ceil", rate, "quantum", "60000"}));
  if (have.mbps == 0)
    CHAOSBED_RETURN_IF_ERROR(run({"tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", prio,
                                  "u32", "match", "ip", "dst", peer, "flowid", classid}));
  have.mbps = mbps;
  return Status::ok();
}

}  // namespace chaosbed::chaos
