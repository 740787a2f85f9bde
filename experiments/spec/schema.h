#pragma once
// The JSON Schema of an experiment spec, recorded from the spec parser itself (core/config/schema.h): the
// parser reads a set of probe documents that lead it into every branch, and what it asked of each value is
// the schema. Published as docs/spec.schema.json (`chaosbed schema > docs/spec.schema.json`) for editors with
// the YAML language server; a test keeps the published file equal to this, and checks the shipped specs
// against it with an independent validator.
//
// The schema checks structure, keys, types, ranges and choices. Rules between fields (a key that applies to
// one fault kind only, "exactly one of"), cross-section checks, the chaos plan and data files stay with
// `chaosbed validate`, the authority: every spec that validates passes the schema, not the other way round.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace chaosbed::spec {

struct SpecSchema {
  nlohmann::json schema;
  std::vector<std::string> untyped_keys;  // keys the parser allows but no probe typed: the probes need one more
};

SpecSchema experimentSpecSchema();

}  // namespace chaosbed::spec
