#pragma once
// The two families of strategies (docs/design.md §3): one enum for the spec, the node configs and the nodes,
// with the one spelling they all use.

#include <cstdint>
#include <optional>
#include <string_view>

namespace chaosbed {

enum class StrategyKind : uint8_t { kMirrored, kParameterServer };

// "mirrored", "parameter_server".
const char* strategyKindName(StrategyKind kind);
// The kind of a name as strategyKindName spells it; nullopt for anything else.
std::optional<StrategyKind> parseStrategyKind(std::string_view name);

}  // namespace chaosbed
