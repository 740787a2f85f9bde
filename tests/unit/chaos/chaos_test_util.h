#pragma once
// Helpers shared by the chaos unit tests.

#include <gtest/gtest.h>

#include <string>

#include "chaos/model/spec.h"
#include "core/config/config.h"

namespace chaosbed::chaos::testing {

// Parses `yaml` (a whole spec document with a `chaos:` section) as file `file`; diagnostics into *diags.
inline ChaosSpec parseChaosYaml(const std::string& yaml, config::Diagnostics* diags,
                                const std::string& file = "spec.yaml") {
  std::optional<YAML::Node> doc = config::loadYamlString(yaml, file, diags);
  if (!doc) return {};
  config::ConfigNode root(*doc, file, diags);
  return parseChaosSpec(root.child("chaos"));
}

// Parses and expects no diagnostics.
inline ChaosSpec parseOk(const std::string& yaml) {
  config::Diagnostics diags;
  ChaosSpec spec = parseChaosYaml(yaml, &diags);
  EXPECT_TRUE(diags.empty()) << diags.toString();
  return spec;
}

}  // namespace chaosbed::chaos::testing
