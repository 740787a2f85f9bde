#pragma once
// Runs a short-lived tool (ip, tc) to completion: what the chaos actuators and the emulated hosts use.

#include <string>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed {

// Runs argv (argv[0] looked up in PATH) with a deadline; OK on exit 0, else an error carrying its stderr.
// `ok_stderr` substrings turn a failure into OK (e.g. "No such file" when deleting what is gone). The child
// inherits the calling thread's namespaces. `out`, when given, receives its standard output (else it goes
// to /dev/null).
Status runCommand(const std::vector<std::string>& argv, double timeout_s,
                  const std::vector<std::string>& ok_stderr = {}, std::string* out = nullptr);

// In a forked child before exec: no signal blocked and every disposition the default, whatever the parent
// had (a controller blocks SIGINT and SIGTERM for its signal watcher; an exec keeps the mask, so a child
// would start deaf to them). Async-signal-safe.
void restoreDefaultSignals();

}  // namespace chaosbed
