#pragma once
// Link faults (bandwidth cap, added latency, partition between two node groups) and transport errors.
//
// - LinkControl is what the node runtime implements: a control message to the node's transport shaper
//   (transports/shaper) that shapes or drops its traffic to the given peers. ShaperLinkActuator drives it:
//   a node of group A is shaped towards group B and vice versa, so both directions are affected.
// - HostLinkActuator is for emulated hosts (hosts: netns, core/isolation/emulated_hosts.h). A link fault
//   between groups on different hosts is a fault of the links between their hosts, and the hosts' kernels
//   carry it out, on every packet between them, as on real machines: a bandwidth cap is a class of the htb
//   root on the sending host's eth0 with a u32 filter for the peer host's address (egress, so each direction is capped
//   by its sender), a partition a blackhole route to the peer host's address on each side (TCP stalls and
//   retransmits, and resumes when the route goes). Other nodes on those hosts share the faulted links, as
//   processes on one machine do. Added latency, and a fault between groups that share a host, go to the
//   in-process shaper (these kernels have no netem); params.via chooses: auto (the kernel where it can),
//   kernel (refused by checkAvailable where it cannot), shaper. Overlapping caps of a host pair take the
//   smallest. Nothing needs healing after a crash: the qdiscs and routes live in the hosts' namespaces,
//   which the kernel frees with the controller (section 2.9 of docs/design.md). Needs root, `tc` and `ip`.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "chaos/actuators/actuator.h"
#include "core/isolation/emulated_hosts.h"

namespace chaosbed::chaos {

class LinkControl {
 public:
  virtual ~LinkControl() = default;
  // Shapes node's traffic to every peer in `peers` per params (bandwidth_mbps 0 = uncapped). Idempotent:
  // a second call with the same arguments changes nothing. Returns once the node's shaper acknowledged.
  virtual Status setLink(const std::string& node, const std::vector<std::string>& peers, const FaultParams& params) = 0;
  // Removes the shaping set for those peers; OK when there is none.
  virtual Status clearLink(const std::string& node, const std::vector<std::string>& peers) = 0;
  // Makes node's transport fail towards `peers` (empty: any peer) per params.error/nth/count
  // (transports/faulty); each call adds rules under the fault's id. Returns once the node acknowledged.
  virtual Status injectTransportError(const std::string& node, uint64_t fault_id, const std::vector<std::string>& peers,
                                      const FaultParams& params) = 0;
  // Removes the rules of that fault (a broken peer stays broken until the strategy reconnects it).
  virtual Status clearTransportError(const std::string& node, uint64_t fault_id) = 0;
};

// The peers that `node` is shaped towards for a link fault: the other group.
const std::vector<std::string>& linkPeersOf(const Fault& fault, const std::string& node);

class ShaperLinkActuator final : public Actuator {
 public:
  explicit ShaperLinkActuator(LinkControl* control) : control_(control) {}
  const char* name() const override { return "link-shaper"; }
  const char* via(const Fault&) override { return "shaper"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault&, const std::string&) override { return std::vector<HealRecord>{}; }
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

 private:
  LinkControl* control_;
  std::set<std::pair<uint64_t, std::string>> applied_;
};

// transport_error: group A's transports fail towards group B (or any peer) through LinkControl.
class TransportErrorActuator final : public Actuator {
 public:
  explicit TransportErrorActuator(LinkControl* control) : control_(control) {}
  const char* name() const override { return "transport-error"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault&, const std::string&) override { return std::vector<HealRecord>{}; }
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

 private:
  LinkControl* control_;
  std::set<std::pair<uint64_t, std::string>> applied_;
};

class HostLinkActuator final : public Actuator {
 public:
  // shaper: what carries out the faults the kernel cannot (not owned).
  HostLinkActuator(Cluster& cluster, const EmulatedHosts& hosts, Actuator& shaper)
      : cluster_(cluster), hosts_(hosts), shaper_(shaper) {}
  const char* name() const override { return "link"; }
  const char* via(const Fault& fault) override { return inKernel(fault) ? "kernel" : "shaper"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) override;
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

  // Why the kernel cannot carry out `fault` here; empty when it can.
  std::string whyNotKernel(const Fault& fault);

 private:
  bool inKernel(const Fault& fault) { return fault.params.via != FaultParams::Via::kShaper && whyNotKernel(fault).empty(); }
  // Brings host `from`'s kernel in line with wanted_ for its link to host `to`.
  Status update(int from, int to);

  using Holder = std::pair<uint64_t, std::string>;  // (fault, node): each node of a group holds its host's links
  struct Link {
    std::map<Holder, double> caps;  // mbps
    std::set<Holder> partitions;
  };
  struct Installed {
    double mbps = 0;  // 0: no class
    bool blackhole = false;
  };
  Cluster& cluster_;
  const EmulatedHosts& hosts_;
  Actuator& shaper_;
  std::map<std::pair<int, int>, Link> wanted_;  // (from host, to host)
  std::map<std::pair<int, int>, Installed> installed_;
};

}  // namespace chaosbed::chaos
