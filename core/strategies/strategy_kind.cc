#include "core/strategies/strategy_kind.h"

namespace chaosbed {

const char* strategyKindName(StrategyKind kind) {
  return kind == StrategyKind::kMirrored ? "mirrored" : "parameter_server";
}

std::optional<StrategyKind> parseStrategyKind(std::string_view name) {
  for (StrategyKind k : {StrategyKind::kMirrored, StrategyKind::kParameterServer})
    if (name == strategyKindName(k)) return k;
  return std::nullopt;
}

}  // namespace chaosbed
