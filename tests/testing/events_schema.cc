#include "tests/testing/events_schema.h"

#include <iostream>

#include "tests/testing/command.h"

namespace chaosbed::testing {

::testing::AssertionResult EventsMatchSchema(const std::string& events_path) {
  const std::string repo = CHAOSBED_SOURCE_DIR;
  Command check({"/usr/bin/python3", repo + "/tests/schema/check_events.py", "validate",
                 repo + "/docs/events.schema.json", events_path});
  const std::optional<int> code = check.wait(deadlineIn(std::chrono::seconds(60)));
  if (code == 0) return ::testing::AssertionSuccess();
  if (code == 77) {
    static bool said = false;
    if (!said) std::cerr << "events not checked against docs/events.schema.json: " << check.output();
    said = true;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << events_path << " does not match docs/events.schema.json ("
                                       << (code ? "exit " + std::to_string(*code) : std::string("timed out"))
                                       << "):\n"
                                       << check.output();
}

}  // namespace chaosbed::testing
