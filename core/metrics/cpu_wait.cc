#include "core/metrics/cpu_wait.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace chaosbed {
namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The whole file at offset 0 (proc and cgroup files are regenerated at each read from the start).
std::string preadAll(int fd) {
  char buf[1024];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

// The value after `key ` on its own line of a flat-keyed file (cpu.stat), or -1.
double keyed(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ')
      return std::strtod(line.c_str() + key.size() + 1, nullptr);
  return -1;
}

}  // namespace

std::string cgroupCpuStatPath(const std::string& proc_cgroup, const std::string& mountinfo, bool* in_ns) {
  // Our cgroup in the v1 cpu hierarchy and in the v2 one.
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  for (const std::string& line : split(proc_cgroup, '\n')) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      v2_path = path;
      have_v2 = true;
    }
    for (const std::string& c : split(controllers, ','))
      if (c == "cpu") {
        v1_path = path;
        have_v1 = true;
      }
  }
  // Mount points: mountinfo fields are "id parent dev root mountpoint options [tags] - fstype source super".
  std::string v1_mount, v2_mount;
  for (const std::string& line : split(mountinfo, '\n')) {
    const std::vector<std::string> f = split(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 3 >= f.size()) continue;
    const std::string& fstype = f[dash + 1];
    if (fstype == "cgroup2") v2_mount = f[4];
    if (fstype == "cgroup")
      for (const std::string& o : split(f[dash + 3], ','))
        if (o == "cpu") v1_mount = f[4];
  }
  if (have_v1 && !v1_mount.empty()) {
    *in_ns = true;
    return v1_mount + v1_path + "/cpu.stat";
  }
  if (have_v2 && !v2_mount.empty()) {
    *in_ns = false;
    return v2_mount + v2_path + "/cpu.stat";
  }
  return "";
}

CpuWait CpuWait::forThisThread() {
  CpuWait w;
  const std::string schedstat =
      "/proc/" + std::to_string(::getpid()) + "/task/" + std::to_string(::syscall(SYS_gettid)) + "/schedstat";
  w.schedstat_.reset(::open(schedstat.c_str(), O_RDONLY | O_CLOEXEC));
  const std::string stat = cgroupCpuStatPath(readText("/proc/self/cgroup"), readText("/proc/self/mountinfo"),
                                             &w.cpu_stat_in_ns_);
  if (!stat.empty()) {
    w.cpu_stat_.reset(::open(stat.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    const std::string dir = stat.substr(0, stat.size() - std::string("cpu.stat").size());
    w.quota_.reset(::open((dir + (w.cpu_stat_in_ns_ ? "cpu.cfs_quota_us" : "cpu.max")).c_str(),
                          O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  }
  return w;
}

CpuWait::Reading CpuWait::read() const {
  Reading r;
  if (schedstat_.valid()) {
    const std::vector<std::string> f = split(preadAll(schedstat_.get()), ' ');
    if (f.size() >= 2) r.run_delay_s = std::strtod(f[1].c_str(), nullptr) * 1e-9;
  }
  if (cpu_stat_.valid()) {
    const std::string text = preadAll(cpu_stat_.get());
    const double v = cpu_stat_in_ns_ ? keyed(text, "throttled_time") : keyed(text, "throttled_usec");
    if (v > 0) r.throttled_s = v * (cpu_stat_in_ns_ ? 1e-9 : 1e-6);
  }
  if (quota_.valid()) {
    const std::string text = preadAll(quota_.get());
    r.quota = !text.empty() && (cpu_stat_in_ns_ ? std::strtol(text.c_str(), nullptr, 10) > 0 : text.rfind("max", 0) != 0);
  }
  return r;
}

}  // namespace chaosbed
