#pragma once
// CpuQuotaActuator (slow): lowers the node's cgroup CPU quota to cpu_fraction of its configured quota
// (Cluster::cpuQuota), or of one CPU when it has none. Overlapping slow faults of one node take the smallest
// fraction; when the last is reverted the configured quota (0 = unlimited) is restored. Needs the cgroup
// cpu controller and a node cgroup; checkAvailable() says which is missing.

#include <map>
#include <string>

#include "chaos/actuators/actuator.h"

namespace chaosbed::chaos {

class CpuQuotaActuator final : public Actuator {
 public:
  explicit CpuQuotaActuator(Cluster& cluster);
  const char* name() const override { return "cgroup-cpu"; }
  Status checkAvailable(const Fault& fault, const std::string& node) override;
  Result<std::vector<HealRecord>> prepare(const Fault& fault, const std::string& node) override;
  Status apply(const Fault& fault, const std::string& node) override;
  Status revert(const Fault& fault, const std::string& node) override;

  // The quota in cores that `fraction` means for `node`.
  double quotaFor(const std::string& node, double fraction);

 private:
  Status update(const std::string& node);
  Cluster& cluster_;
  bool cpu_supported_;
  std::string why_not_;
  std::map<std::string, std::map<uint64_t, double>> active_;  // node -> fault -> cpu_fraction
};

}  // namespace chaosbed::chaos
