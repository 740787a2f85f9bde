#include "chaos/actuators/heal.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/isolation/cgroup.h"

namespace chaosbed::chaos {

const char* healOpName(HealRecord::Op op) {
  switch (op) {
    case HealRecord::Op::kThaw: return "thaw";
    case HealRecord::Op::kCpuLimit: return "cpu_limit";
    case HealRecord::Op::kSigcont: return "sigcont";
  }
  return "unknown";
}

nlohmann::json healToJson(const HealRecord& r) {
  nlohmann::json j;
  j["op"] = healOpName(r.op);
  switch (r.op) {
    case HealRecord::Op::kCpuLimit: j["cpus"] = r.cpus; [[fallthrough]];
    case HealRecord::Op::kThaw:
      j["group"] = r.group;
      j["node"] = r.node;
      j["paths"] = r.paths;
      break;
    case HealRecord::Op::kSigcont: j["pgid"] = r.pgid; break;
  }
  return j;
}

Result<HealRecord> healFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
    return Status::dataLoss("heal record without an op: " + j.dump());
  HealRecord r;
  const std::string op = j["op"];
  try {
    if (op == "thaw" || op == "cpu_limit") {
      r.op = op == "thaw" ? HealRecord::Op::kThaw : HealRecord::Op::kCpuLimit;
      r.group = j.at("group");
      r.node = j.at("node");
      r.paths = j.at("paths").get<std::vector<std::string>>();
      if (r.op == HealRecord::Op::kCpuLimit) r.cpus = j.at("cpus");
    } else if (op == "sigcont") {
      r.op = HealRecord::Op::kSigcont;
      r.pgid = j.at("pgid");
    } else {
      return Status::dataLoss("heal record with unknown op '" + op + "'");
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::dataLoss("malformed heal record " + j.dump() + ": " + e.what());
  }
  return r;
}

Status heal(const HealRecord& r) {
  switch (r.op) {
    case HealRecord::Op::kThaw:
    case HealRecord::Op::kCpuLimit: {
      for (const std::string& p : r.paths) {
        std::error_code ec;
        if (!std::filesystem::exists(p, ec)) return Status::ok();  // the cgroup is gone: nothing to undo
      }
      Result<NodeCgroup> cg = NodeCgroup::create(r.group, r.node);
      if (!cg.isOk()) return cg.status().withContext("heal " + std::string(healOpName(r.op)) + " " + r.node);
      return r.op == HealRecord::Op::kThaw ? cg->thaw() : cg->setCpuLimit(r.cpus);
    }
    case HealRecord::Op::kSigcont:
      if (r.pgid <= 1) return Status::invalidArgument("heal sigcont: bad process group " + std::to_string(r.pgid));
      if (::kill(-r.pgid, SIGCONT) != 0 && errno != ESRCH)
        return Status::fromErrno("heal: SIGCONT to process group " + std::to_string(r.pgid));
      return Status::ok();
  }
  return Status::internal("heal: unknown op");
}

}  // namespace chaosbed::chaos
