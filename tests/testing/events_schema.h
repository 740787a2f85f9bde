#pragma once
// EventsMatchSchema: every line of a run's events.jsonl against the published event schema
// (docs/events.schema.json), checked by an independent validator (tests/schema/check_events.py, python3-jsonschema).
// Tests that run an experiment call it on the run's events, so every event a test provokes is held to the schema.

#include <string>

#include <gtest/gtest.h>

namespace chaosbed::testing {

// Success when every event validates, or when python3-jsonschema is missing (said once on stderr); a failure
// lists the validator's findings.
::testing::AssertionResult EventsMatchSchema(const std::string& events_path);

}  // namespace chaosbed::testing
