#include "core/launcher/identity.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <optional>

namespace chaosbed {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

// A non-negative decimal int; `what` names the variable in the error.
Result<int> parseCount(const std::string& what, const std::string& text) {
  if (text.empty()) return Status::invalidArgument(what + "='': empty, want a non-negative integer");
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || v < 0 || v > 1'000'000)
    return Status::invalidArgument(what + "='" + text + "': want a non-negative integer");
  return static_cast<int>(v);
}

Result<int> optionalCount(const char* name, int fallback) {
  auto v = env(name);
  if (!v) return fallback;
  return parseCount(name, *v);
}

Status validRole(const std::string& what, const std::string& role) {
  if (role == "worker" || role == "ps" || role == "evaluator") return Status::ok();
  return Status::invalidArgument(what + "='" + role + "': want worker, ps or evaluator");
}

// Splits a global rank by the documented convention: ps first, then workers, then evaluators.
Result<NodeIdentity> fromGlobalRank(const LauncherRank& launched) {
  const int rank = launched.rank, size = launched.size;
  const std::string size_var = launched.size_var;
  CHAOSBED_ASSIGN_OR_RETURN(int servers, optionalCount("CHAOSBED_SERVERS", 0));
  CHAOSBED_ASSIGN_OR_RETURN(int evaluators, optionalCount("CHAOSBED_EVALUATORS", 0));
  int workers = size - servers - evaluators;
  if (workers < 1)
    return Status::invalidArgument("CHAOSBED_SERVERS=" + std::to_string(servers) + " + CHAOSBED_EVALUATORS=" +
                                   std::to_string(evaluators) + " leave no worker among " + size_var + "=" +
                                   std::to_string(size) + " ranks");
  NodeIdentity id;
  id.source = launched.source;
  id.num_servers = servers;
  id.num_workers = workers;
  id.num_evaluators = evaluators;
  if (rank < servers) {
    id.role = "ps";
    id.index = rank;
  } else if (rank < servers + workers) {
    id.role = "worker";
    id.index = rank - servers;
  } else {
    id.role = "evaluator";
    id.index = rank - servers - workers;
  }
  return id;
}

Result<NodeIdentity> fromTfConfig(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalidArgument("TF_CONFIG: not a JSON object");
  if (!j.contains("cluster") || !j["cluster"].is_object())
    return Status::invalidArgument("TF_CONFIG: cluster: missing or not an object");
  if (!j.contains("task") || !j["task"].is_object())
    return Status::invalidArgument("TF_CONFIG: task: missing or not an object");
  const nlohmann::json& task = j["task"];
  if (!task.contains("type") || !task["type"].is_string())
    return Status::invalidArgument("TF_CONFIG: task.type: missing or not a string");
  if (!task.contains("index") || !task["index"].is_number_integer() || task["index"].get<long long>() < 0)
    return Status::invalidArgument("TF_CONFIG: task.index: missing or not a non-negative integer");

  std::map<std::string, std::vector<std::string>> lists;
  for (const auto& [role, members] : j["cluster"].items()) {
    if (role != "worker" && role != "ps" && role != "chief" && role != "evaluator")
      return Status::invalidArgument("TF_CONFIG: cluster." + role + ": unknown task type (want worker, ps, chief, "
                                     "evaluator)");
    if (!members.is_array()) return Status::invalidArgument("TF_CONFIG: cluster." + role + ": not a list");
    for (size_t i = 0; i < members.size(); ++i) {
      if (!members[i].is_string())
        return Status::invalidArgument("TF_CONFIG: cluster." + role + "[" + std::to_string(i) + "]: not a string");
      lists[role].push_back(members[i].get<std::string>());
    }
  }
  if (lists["chief"].size() > 1) return Status::invalidArgument("TF_CONFIG: cluster.chief: more than one chief");

  std::string type = task["type"].get<std::string>();
  int index = static_cast<int>(task["index"].get<long long>());
  if (!lists.count(type) || lists[type].empty())
    return Status::invalidArgument("TF_CONFIG: task.type '" + type + "' has no list in cluster");
  if (static_cast<size_t>(index) >= lists[type].size())
    return Status::invalidArgument("TF_CONFIG: task.index " + std::to_string(index) + " is past cluster." + type +
                                   " (" + std::to_string(lists[type].size()) + " entries)");
  const int chiefs = static_cast<int>(lists["chief"].size());
  NodeIdentity id;
  id.source = "TF_CONFIG";
  if (type == "chief") {
    id.role = "worker";
    id.index = 0;
  } else if (type == "worker") {
    id.role = "worker";
    id.index = index + chiefs;
  } else {
    id.role = type;
    id.index = index;
  }
  std::vector<std::string> workers = lists["chief"];
  workers.insert(workers.end(), lists["worker"].begin(), lists["worker"].end());
  id.addresses["worker"] = workers;
  id.addresses["ps"] = lists["ps"];
  id.addresses["evaluator"] = lists["evaluator"];
  id.num_workers = static_cast<int>(workers.size());
  id.num_servers = static_cast<int>(lists["ps"].size());
  id.num_evaluators = static_cast<int>(lists["evaluator"].size());
  return id;
}

Result<NodeIdentity> identityWithoutIncarnation() {
  auto role = env("CHAOSBED_ROLE");
  auto rank = env("CHAOSBED_RANK");
  if (role || rank) {
    if (!role) return Status::invalidArgument("CHAOSBED_RANK is set but CHAOSBED_ROLE is not: set both");
    if (!rank) return Status::invalidArgument("CHAOSBED_ROLE is set but CHAOSBED_RANK is not: set both");
    CHAOSBED_RETURN_IF_ERROR(validRole("CHAOSBED_ROLE", *role));
    CHAOSBED_ASSIGN_OR_RETURN(int index, parseCount("CHAOSBED_RANK", *rank));
    NodeIdentity id;
    id.source = "CHAOSBED_ROLE";
    id.role = *role;
    id.index = index;
    CHAOSBED_ASSIGN_OR_RETURN(id.num_workers, optionalCount("CHAOSBED_WORKERS", -1));
    CHAOSBED_ASSIGN_OR_RETURN(id.num_servers, optionalCount("CHAOSBED_SERVERS", -1));
    CHAOSBED_ASSIGN_OR_RETURN(id.num_evaluators, optionalCount("CHAOSBED_EVALUATORS", -1));
    int count = role == "worker" ? id.num_workers : role == "ps" ? id.num_servers : id.num_evaluators;
    if (count >= 0 && index >= count)
      return Status::invalidArgument("CHAOSBED_RANK=" + std::to_string(index) + " is not below the number of " +
                                     *role + " nodes (" + std::to_string(count) + ")");
    return id;
  }
  if (auto tf = env("TF_CONFIG")) return fromTfConfig(*tf);
  auto launched = launcherRankFromEnvironment();
  if (launched.isOk()) return fromGlobalRank(*launched);
  if (launched.status().code() != StatusCode::kNotFound) return launched.status();
  return Status::notFound(
      "no node identity in the environment: set CHAOSBED_ROLE and CHAOSBED_RANK, TF_CONFIG, SLURM_PROCID, "
      "OMPI_COMM_WORLD_RANK, torchrun's RANK or JOB_COMPLETION_INDEX (with CHAOSBED_WORLD_SIZE)");
}

}  // namespace

Result<LauncherRank> launcherRankFromEnvironment() {
  struct Source {
    const char* name;
    const char* rank_var;
    const char* size_var;
    const char* marker;  // set by that launcher only (torchrun's RANK is too common a name on its own)
  };
  static constexpr Source kSources[] = {
      {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", nullptr},
      {"OMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr},
      {"TORCHRUN", "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
      {"JOB_COMPLETION_INDEX", "JOB_COMPLETION_INDEX", "CHAOSBED_WORLD_SIZE", nullptr},
  };
  for (const Source& s : kSources) {
    auto rank_text = env(s.rank_var);
    if (!rank_text || (s.marker && !env(s.marker))) continue;
    auto size_text = env(s.size_var);
    if (!size_text)
      return Status::invalidArgument(std::string(s.rank_var) + " is set but " + s.size_var + " is not: set both");
    LauncherRank r;
    r.source = s.name;
    r.rank_var = s.rank_var;
    r.size_var = s.size_var;
    CHAOSBED_ASSIGN_OR_RETURN(r.rank, parseCount(s.rank_var, *rank_text));
    CHAOSBED_ASSIGN_OR_RETURN(r.size, parseCount(s.size_var, *size_text));
    if (r.rank >= r.size)
      return Status::invalidArgument(std::string(s.rank_var) + "=" + std::to_string(r.rank) + " is not below " +
                                     s.size_var + "=" + std::to_string(r.size));
    return r;
  }
  return Status::notFound("no launcher rank in the environment");
}

std::string NodeIdentity::nodeName() const { return role + "-" + std::to_string(index); }

Result<NodeIdentity> identityFromEnvironment() {
  CHAOSBED_ASSIGN_OR_RETURN(NodeIdentity id, identityWithoutIncarnation());
  if (auto inc = env("CHAOSBED_INCARNATION")) {
    CHAOSBED_ASSIGN_OR_RETURN(id.incarnation, parseCount("CHAOSBED_INCARNATION", *inc));
  }
  return id;
}

}  // namespace chaosbed
