#include "chaos/agent/protocol.h"

#include <algorithm>

namespace chaosbed::chaos::agent_wire {

using nlohmann::json;

nlohmann::json toJson(const NodeSpec& spec) {
  json j = {{"name", spec.name}, {"role", spec.role}, {"index", spec.index}, {"args", spec.args},
            {"env", spec.env},   {"binary", spec.binary}};
  if (spec.cpus) j["cpus"] = *spec.cpus;
  return j;
}

Result<NodeSpec> nodeSpecFromJson(const json& j) {
  try {
    NodeSpec s;
    s.name = j.at("name").get<std::string>();
    s.role = j.at("role").get<std::string>();
    s.index = j.at("index").get<int>();
    s.args = j.at("args").get<std::vector<std::string>>();
    s.env = j.at("env").get<std::map<std::string, std::string>>();
    s.binary = j.at("binary").get<std::string>();
    if (j.contains("cpus")) s.cpus = j.at("cpus").get<double>();
    return s;
  } catch (const json::exception& e) {
    return Status::invalidArgument(std::string("node spec: ") + e.what());
  }
}

Status admissible(const NodeSpec& spec, const std::vector<std::string>& extra_binaries) {
  auto refused = [&](const std::string& why) {
    return Status::invalidArgument("agent: refused to start " + spec.name + ": " + why);
  };
  for (const auto& [key, value] : spec.env)
    if (key != "OPENBLAS_NUM_THREADS") return refused("environment variable " + key + " is not one a node is given");
  if (!spec.binary.empty()) {
    if (std::find(extra_binaries.begin(), extra_binaries.end(), spec.binary) == extra_binaries.end())
      return refused("an order may not name a program ('" + spec.binary + "'): the agent runs its own executable");
    return Status::ok();
  }
  const bool role_ok = spec.role == "worker" || spec.role == "ps" || spec.role == "evaluator";
  if (!role_ok) return refused("'" + spec.role + "' is not a node role (worker, ps, evaluator)");
  if (spec.args.size() != 2 || spec.args[0] != spec.role || spec.args[1].rfind("--node_config=", 0) != 0)
    return refused("arguments must be exactly '" + spec.role + " --node_config=FILE'");
  return Status::ok();
}

json toJson(const ExitInfo& e) {
  return {{"name", e.name},     {"pid", e.pid},       {"incarnation", e.incarnation}, {"signaled", e.signaled},
          {"code", e.code},     {"signal", e.signal}, {"requested", e.requested},
          {"lifetime_ns", e.lifetime.count()}};
}

Result<ExitInfo> exitFromJson(const json& j) {
  try {
    ExitInfo e;
    e.name = j.at("name").get<std::string>();
    e.pid = j.at("pid").get<pid_t>();
    e.incarnation = j.at("incarnation").get<int>();
    e.signaled = j.at("signaled").get<bool>();
    e.code = j.at("code").get<int>();
    e.signal = j.at("signal").get<int>();
    e.requested = j.at("requested").get<bool>();
    e.lifetime = std::chrono::nanoseconds(j.at("lifetime_ns").get<int64_t>());
    e.at = SteadyClock::now();
    return e;
  } catch (const json::exception& ex) {
    return Status::invalidArgument(std::string("exit notice: ") + ex.what());
  }
}

json toJson(const Fault& f) {
  return {{"id", f.id},
          {"name", f.name},
          {"kind", faultKindName(f.kind)},
          {"cpu_fraction", f.params.cpu_fraction},
          {"grace_s", f.params.grace_s}};
}

Result<Fault> faultFromJson(const json& j) {
  try {
    Fault f;
    f.id = j.at("id").get<uint64_t>();
    f.name = j.at("name").get<std::string>();
    const std::string kind = j.at("kind").get<std::string>();
    auto k = parseFaultKind(kind);
    if (!k) return Status::invalidArgument("fault: unknown kind '" + kind + "'");
    f.kind = *k;
    f.params.cpu_fraction = j.at("cpu_fraction").get<double>();
    f.params.grace_s = j.at("grace_s").get<double>();
    return f;
  } catch (const json::exception& e) {
    return Status::invalidArgument(std::string("fault: ") + e.what());
  }
}

json toJson(const Status& s) { return {{"code", int(s.code())}, {"message", s.message()}}; }

Status statusFromJson(const json& j) {
  const auto code = j.find("code");
  if (code == j.end() || !code->is_number_integer()) return Status::invalidArgument("reply without a code");
  const int c = code->get<int>();
  const std::string message = j.value("message", "");
  switch (static_cast<StatusCode>(c)) {
    case StatusCode::kOk: return Status::ok();
    case StatusCode::kInvalidArgument: return Status::invalidArgument(message);
    case StatusCode::kNotFound: return Status::notFound(message);
    case StatusCode::kTimeout: return Status::timeout(message);
    case StatusCode::kCancelled: return Status::cancelled(message);
    case StatusCode::kUnavailable: return Status::unavailable(message);
    case StatusCode::kDataLoss: return Status::dataLoss(message);
    case StatusCode::kIoError: return Status::ioError(message);
    default: return Status::internal(message);
  }
}

Result<json> parseEntry(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::invalidArgument(what + " is not a JSON object");
  return j;
}

}  // namespace chaosbed::chaos::agent_wire
