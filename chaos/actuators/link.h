#pragma once
// Link faults (bandwidth cap, added latency, partition between two node groups) and transport errors.
//
// - LinkControl is what the node runtime implements: a control message to the node's transport shaper
//   (transports/shaper) that shapes or drops its traffic to the given peers. ShaperLinkActuator drives it:
//   a node of group A is shaped towards group B and vice versa, so both directions are affected.
// - TbfLinkActuator is for nodes in network namespaces (hosts: netns): a tbf qdisc on the host side of the
//   node's veth caps the bandwidth into the node (`tc qdisc replace dev <veth> root tbf rate <r>mbit
//   burst <b> latency 50ms`); revert deletes it. tbf can cap bandwidth only: this kernel has no netem, so
//   latency and partition are refused by checkAvailable(); the cap applies to all of the node's traffic,
//   not only to the peer group. Needs root and the `tc` binary.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "chaos/actuators/actuator.h"

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

class TbfLinkActuator final : public Actuator {
 public:
  explicit TbfLinkActuator(Cluster& cluster) : cluster_(cluster) {}
  const char* name() const override { return "link-tbf"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) override;
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

  // The tc argument list that caps `dev` (in netns, "" = ours) at mbps.
  static std::vector<std::string> tbfCommand(const std::string& netns, const std::string& dev, double mbps);

 private:
  Status update(const std::string& node);
  Cluster& cluster_;
  std::map<std::string, std::map<uint64_t, double>> active_;  // node -> fault -> mbps
};

}  // namespace chaosbed::chaos
