#pragma once
// Trace files that a fault's schedule can replay.
//
// events format: CSV lines `time_s,node,fault[,duration_s]`, e.g. `12.5,worker-2,kill` or
//   `30,worker-1,pause,5`: seconds of the run (not scaled), a node name, a fault kind (kill, preempt,
//   pause, slow), and an optional duration in seconds of the run. Replayed exactly.
// capacity format: CSV lines `t,available_instances` without a header, a step function of a spot fleet's
//   live instances (the AWS spot traces of the Bamboo project in shared/data/spot-traces; times in seconds,
//   or hours for the p2 trace: time_unit: h). Mapping to the cluster, documented here and in the plan:
//   - rows with the same time collapse to the last one (the trace lists the old and the new count at each
//     step);
//   - the replay starts at start_s (default: the first time the fleet reaches its full size fleet_size,
//     which defaults to the trace's maximum; before that the fleet was still being acquired);
//   - trace time t maps to run second (t - start) * time_unit / time_scale;
//   - the targeted nodes (n of them) follow the fleet proportionally: live(t) = round(available(t) * n /
//     fleet_size), capped at n. When live drops by d, d of the live targeted nodes, drawn from the fault's
//     seeded stream, are preempted (or killed, per the fault's action) at once; when it rises by u, u of the
//     down nodes (longest down first) are replaced at that time. restart_after is ignored: capacity decides.
// Blank lines and lines starting with '#' are skipped; so is a first line whose first field is not a
// number (a header).

#include <optional>
#include <string>
#include <vector>

#include "chaos/model/fault.h"
#include "transports/base/status.h"

namespace chaosbed::chaos {

enum class TraceFormat : uint8_t { kEvents, kCapacity };

struct TraceRow {
  double time_s = 0.0;  // events: seconds of the run; capacity: trace seconds (time_unit applied)
  std::string node;     // events
  FaultKind kind = FaultKind::kKill;  // events
  std::optional<double> duration_s;   // events
  int available = 0;                  // capacity
  int line = 0;                       // 1-based line in the file
};

// Reads and validates a trace. Errors: InvalidArgument "path:line: what is wrong" (or IoError when
// unreadable). Times must not decrease.
Result<std::vector<TraceRow>> readTrace(const std::string& path, TraceFormat format, double time_unit_s);

}  // namespace chaosbed::chaos
