#include "core/control/membership.h"

#include <algorithm>
#include <limits>

#include "core/config/json_fields.h"

namespace chaosbed {

std::optional<int> Membership::incarnationOf(int rank) const {
  auto it = std::lower_bound(workers.begin(), workers.end(), rank);
  if (it == workers.end() || *it != rank) return std::nullopt;
  const size_t i = size_t(it - workers.begin());
  return i < incarnations.size() ? incarnations[i] : 0;
}

nlohmann::json Membership::toJson() const {
  nlohmann::json j = {{"generation", generation}, {"workers", workers}, {"rollback", rollback}, {"joined", joined}};
  if (!incarnations.empty()) j["incarnations"] = incarnations;
  return j;
}

Result<Membership> Membership::fromJson(const nlohmann::json& j, int world_workers) {
  config::JsonFields f(j, "membership");
  const int64_t max_rank = world_workers > 0 ? world_workers - 1 : int64_t{kMaxMembers} - 1;
  Membership m;
  m.generation = f.integer("generation", 0, std::numeric_limits<int64_t>::max());
  const std::vector<int64_t> workers = f.integers("workers", 0, max_rank, kMaxMembers);
  m.rollback = f.boolean("rollback", false);
  const std::vector<int64_t> joined = f.integers("joined", 0, max_rank, kMaxMembers, std::vector<int64_t>{});
  const std::vector<int64_t> incarnations =
      f.integers("incarnations", 0, std::numeric_limits<int>::max(), kMaxMembers, std::vector<int64_t>{});
  if (f.ok() && workers.empty()) f.error("workers", "empty");
  if (f.ok() && !incarnations.empty() && incarnations.size() != workers.size())
    f.error("incarnations", std::to_string(incarnations.size()) + " entries for " + std::to_string(workers.size()) +
                                " workers");
  for (size_t i = 1; f.ok() && i < workers.size(); ++i)
    if (workers[i] <= workers[i - 1]) f.error("workers", "not strictly increasing at index " + std::to_string(i));
  for (size_t i = 0; f.ok() && i < joined.size(); ++i) {
    if (!std::binary_search(workers.begin(), workers.end(), joined[i]))
      f.error("joined", "rank " + std::to_string(joined[i]) + " is not among the workers");
    else if (std::find(joined.begin(), joined.begin() + long(i), joined[i]) != joined.begin() + long(i))
      f.error("joined", "rank " + std::to_string(joined[i]) + " listed twice");
  }
  CHAOSBED_RETURN_IF_ERROR(f.status());
  m.workers.assign(workers.begin(), workers.end());
  m.joined.assign(joined.begin(), joined.end());
  m.incarnations.assign(incarnations.begin(), incarnations.end());
  return m;
}

Result<Membership> Membership::decode(std::string_view text, int world_workers) {
  CHAOSBED_ASSIGN_OR_RETURN(nlohmann::json j, config::parseJson(text, "membership"));
  return fromJson(j, world_workers);
}

}  // namespace chaosbed
