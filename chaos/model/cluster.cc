#include "chaos/model/cluster.h"

namespace chaosbed::chaos {

std::vector<NodeInfo> makeNodes(const std::vector<std::pair<std::string, int>>& roles) {
  std::vector<NodeInfo> out;
  for (const auto& [role, count] : roles)
    for (int i = 0; i < count; ++i) out.push_back({role + "-" + std::to_string(i), role, i});
  return out;
}

}  // namespace chaosbed::chaos
