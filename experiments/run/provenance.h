#pragma once
// Provenance: what produced a result, recorded in every summary.json (and, through it, in sweep CSVs and
// reports), so that a figure can be traced to a binary, a machine and the load it ran under.
//
// The build's commit and dirty flag come from the source tree at build time (cmake/BuildInfo.cmake); the
// rest is read when a run starts and ends. A run that starts with a 1-minute load of half the cores or more is
// not a quiet-machine measurement: `quiet` says so, and the run warns on stderr.

#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace chaosbed::run {

struct BuildInfo {
  const char* version;
  const char* commit;  // "unknown" without git
  bool dirty;          // the tree had uncommitted changes to tracked files
};
BuildInfo buildInfo();  // generated at build time

struct Provenance {
  std::string version, commit;
  bool dirty = false;
  std::string host, cpu_model;
  int cores = 0;               // online CPUs
  double load1_at_start = 0;   // /proc/loadavg, 1-minute
  double load1_at_end = -1;    // set by end(); negative before
  bool quiet = true;           // load1_at_start < cores / 2
  std::string spec_sha256;     // of the resolved spec (spec.yaml), when a run sets it
  std::string command_line;    // of this process
  std::string slurm_job;       // "<job>" or "<array job>_<task>" when run by Slurm, else empty
  std::string started_at, ended_at;  // UTC, ISO 8601

  static Provenance atStart();
  void end();  // sets ended_at and load1_at_end
  nlohmann::json toJson() const;
};

// SHA-256 of `text`, as 64 lowercase hex digits.
std::string sha256Hex(std::string_view text);

// The 1-minute load average; negative when unreadable.
double loadAverage1();

// Waits (up to max_wait_s) until the 1-minute load is below half the cores, saying so on `progress` when
// it has to wait. Back-to-back runs need it: a run's own load lingers in the next run's load average for
// about a minute. Returns whether the machine is quiet now.
bool waitForQuiet(double max_wait_s, FILE* progress);

}  // namespace chaosbed::run
