#pragma once
// Provenance: what produced a result, recorded in every summary.json (and, through it, in sweep CSVs and
// reports), so that a figure can be traced to a binary, a machine and the load it ran under.
//
// The build's commit and dirty flag come from the source tree at build time (cmake/BuildInfo.cmake); the
// rest is read when a run starts and ends. A run that starts while more than a tenth of the machine's CPU time
// is busy (over 200 ms, from /proc/stat) is not a quiet-machine measurement: `quiet` says so, and the run
// warns on stderr. The 1-minute load average is recorded too, but it holds a previous run's own load for a
// minute after that run ended, so back-to-back runs of a sweep would all read as loaded.

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace chaosbed::run {

struct BuildInfo {
  const char* version;
  const char* commit;  // "unknown" without git
  bool dirty;          // the tree had uncommitted changes to tracked files
  const char* date;    // the commit's date, YYYY-MM-DD ("unknown" without git)
};
BuildInfo buildInfo();  // generated at build time

struct Provenance {
  std::string version, commit;
  bool dirty = false;
  std::string host, cpu_model;
  int cores = 0;               // online CPUs
  double load1_at_start = 0;   // /proc/loadavg, 1-minute
  double load1_at_end = -1;    // set by end(); negative before
  double cpu_busy_at_start = 0;  // fraction of all cores' time busy over kQuietWindow before the run
  bool quiet = true;           // cpu_busy_at_start < kQuietBusy
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

// Quiet: under a tenth of the machine's CPU time busy over the window.
inline constexpr double kQuietBusy = 0.1;
inline constexpr std::chrono::milliseconds kQuietWindow{200};

// The fraction of all cores' time spent busy (not idle, not waiting for I/O) over `window`, from
// /proc/stat; negative when unreadable.
double cpuBusyFraction(std::chrono::milliseconds window);

// Waits (up to max_wait_s) until the machine is quiet (cpuBusyFraction over 1 s below kQuietBusy), saying so
// on `progress` when it has to wait. Returns whether it is quiet now.
bool waitForQuiet(double max_wait_s, FILE* progress);

}  // namespace chaosbed::run
