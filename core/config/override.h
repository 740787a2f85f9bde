#pragma once
// Dotted-path overrides of a YAML document, for sweeps and command-line tweaks:
//   "cluster.workers" = 8
//   "chaos.faults[0].schedule.poisson.rate_per_node_hour" = 0.6
//   "strategies[1].max_staleness" = null
//
// Contract: the document is changed in place (yaml-cpp nodes are handles: YAML::Clone it first to keep the
// original). Missing map keys along the path are created; a list index must exist, or equal the list's
// size to append. The new value carries no source location, so a later validation error about it points
// at its key when that came from the file, else at the nearest enclosing map that did. Errors are InvalidArgument naming the path and
// the step that failed; the document is unchanged when an error is returned.

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "transports/base/status.h"

namespace chaosbed::config {

// Sets `path` in `root` to a copy of `value`.
Status applyOverride(YAML::Node root, std::string_view path, const YAML::Node& value);
// The value is YAML text: "8", "0.6", "null", "elastic", "[784, 64, 10]", "{poisson: {rate_per_node_hour: 1}}".
Status applyOverride(YAML::Node root, std::string_view path, std::string_view value_yaml);
// "path=value" as given on a command line (--set cluster.workers=8).
Status applyOverrideAssignment(YAML::Node root, std::string_view assignment);

}  // namespace chaosbed::config
