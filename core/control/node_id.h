#pragma once
// NodeId: who a node process is, as one value ("worker-2", "ps-0", "evaluator-0"), instead of substr/stoi
// on names wherever a role or index is needed. An incarnation (0 for a node's first process, 1 for its
// first replacement, ...) tells processes of the same node apart.

#include <charconv>
#include <compare>
#include <optional>
#include <string>
#include <string_view>

namespace chaosbed::control {

enum class Role : uint8_t { kWorker, kServer, kEvaluator };

inline const char* roleName(Role r) {
  switch (r) {
    case Role::kWorker: return "worker";
    case Role::kServer: return "ps";
    case Role::kEvaluator: return "evaluator";
  }
  return "?";
}

struct NodeId {
  Role role = Role::kWorker;
  int index = 0;

  std::string name() const { return std::string(roleName(role)) + "-" + std::to_string(index); }
  bool isWorker() const { return role == Role::kWorker; }
  bool isServer() const { return role == Role::kServer; }
  auto operator<=>(const NodeId&) const = default;

  // "worker-2" -> {kWorker, 2}; nullopt for anything else (unknown role, no index, trailing bytes, < 0).
  static std::optional<NodeId> parse(std::string_view name) {
    const size_t dash = name.rfind('-');
    if (dash == std::string_view::npos || dash + 1 >= name.size()) return std::nullopt;
    NodeId id;
    const std::string_view role = name.substr(0, dash);
    if (role == "worker") id.role = Role::kWorker;
    else if (role == "ps") id.role = Role::kServer;
    else if (role == "evaluator") id.role = Role::kEvaluator;
    else return std::nullopt;
    const char* first = name.data() + dash + 1;
    const char* last = name.data() + name.size();
    auto [end, ec] = std::from_chars(first, last, id.index);
    if (ec != std::errc() || end != last || id.index < 0) return std::nullopt;
    return id;
  }
};

}  // namespace chaosbed::control
