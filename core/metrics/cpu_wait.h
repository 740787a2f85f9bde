#pragma once
// CpuWait: how long a thread has waited for a CPU, and how long its cgroup's CPU quota has held it back, as
// the kernel counts them. Accounting tells a node that was frozen (SIGSTOP, the cgroup freezer: the thread
// is off every run queue, neither count grows) from one that was starved of CPU (runnable but not run:
// run_delay grows) or throttled by its quota (cpu.stat's throttled time grows).
//
// - run_delay: /proc/<pid>/task/<tid>/schedstat, second field (ns spent runnable on a run queue), of the
//   thread that opened the reader. Absent without the kernel's sched_info (then reads as 0).
// - throttled: the cpu.stat of the process's own cgroup (v2: throttled_usec; v1 cpu controller:
//   throttled_time in ns), found through /proc/self/cgroup under the mounts of /proc/self/mountinfo.
//   Read 0 when the process is in no cgroup with a CPU quota (the root cgroup has no cpu.stat throttling).
// - quota: whether that cgroup has a CPU quota now (cpu.cfs_quota_us or cpu.max beside cpu.stat).
// Both are cumulative. Reading costs one pread per file; the files stay open. Not thread-safe.

#include <string>

#include "transports/bootstrap/net.h"

namespace chaosbed {

class CpuWait {
 public:
  struct Reading {
    double run_delay_s = 0;
    double throttled_s = 0;
    bool quota = false;  // the cgroup has a CPU quota now (a `slow` fault can set one at any time)
  };

  // Opens the calling thread's schedstat and the process's cgroup cpu.stat (whichever exist).
  static CpuWait forThisThread();
  CpuWait() = default;

  Reading read() const;
  bool knowsRunDelay() const { return schedstat_.valid(); }
  bool knowsThrottling() const { return cpu_stat_.valid(); }

 private:
  net::FileDescriptor schedstat_;
  net::FileDescriptor cpu_stat_;
  net::FileDescriptor quota_;    // v1 cpu.cfs_quota_us (-1: none), v2 cpu.max ("max ..." : none)
  bool cpu_stat_in_ns_ = false;  // v1's throttled_time; v2's throttled_usec is in microseconds
};

// The path of this process's cgroup cpu.stat, or "" when none is found. `proc_cgroup` and `mountinfo` are
// the texts of /proc/self/cgroup and /proc/self/mountinfo; `*in_ns` says which unit the file counts in.
std::string cgroupCpuStatPath(const std::string& proc_cgroup, const std::string& mountinfo, bool* in_ns);

}  // namespace chaosbed
