#include "core/isolation/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace chaosbed {
namespace {

constexpr const char* kBaseDir = "chaosbed";
constexpr long kPeriodUs = 100000;  // 100 ms: CFS's default period
constexpr double kMinCpus = 0.01;   // 1 ms per period: the kernel's minimum quota


Status writeFile(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Status::fromErrno("cgroup: open " + path + " for writing", err);
  }
  ssize_t n = ::write(fd, content.data(), content.size());
  int err = errno;
  ::close(fd);
  if (n < 0) return Status::fromErrno("cgroup: write '" + content + "' to " + path, err);
  if (static_cast<size_t>(n) != content.size())
    return Status::ioError("cgroup: short write of '" + content + "' to " + path);
  return Status::ok();
}

Result<std::string> readFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::notFound("cgroup: " + path + " does not exist");
    return Status::fromErrno("cgroup: open " + path, err);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return Status::fromErrno("cgroup: read " + path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status makeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::ok();
  int err = errno;
  return Status::fromErrno("cgroup: mkdir " + path, err);
}

Status validName(const std::string& what, const std::string& name) {
  if (name.empty() || name == "." || name == "..")
    return Status::invalidArgument("cgroup: " + what + " name '" + name + "' is empty, '.' or '..'");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return Status::invalidArgument("cgroup: " + what + " name '" + name + "' has '" + std::string(1, c) +
                                     "'; use [A-Za-z0-9._-]");
  return Status::ok();
}

struct Mounts {
  std::string cpu_v1, freezer_v1, cpuacct_with_cpu, unified;
};

// Parses /proc/self/mountinfo: "id parent maj:min root mountpoint opts [optional...] - fstype source superopts".
Mounts findMounts() {
  Mounts m;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> fields;
    for (std::string f; ls >> f;) fields.push_back(f);
    auto dash = std::find(fields.begin(), fields.end(), "-");
    if (fields.size() < 5 || dash == fields.end() || dash + 3 > fields.end()) continue;
    const std::string& mountpoint = fields[4];
    const std::string& fstype = *(dash + 1);
    const std::string& superopts = (dash + 3 < fields.end()) ? *(dash + 3) : *(dash + 2);
    if (fstype == "cgroup2") {
      if (m.unified.empty()) m.unified = mountpoint;
    } else if (fstype == "cgroup") {
      std::set<std::string> opts;
      std::istringstream os(superopts);
      for (std::string o; std::getline(os, o, ',');) opts.insert(o);
      if (opts.count("cpu") && m.cpu_v1.empty()) {
        m.cpu_v1 = mountpoint;
        if (opts.count("cpuacct")) m.cpuacct_with_cpu = mountpoint;
      }
      if (opts.count("freezer") && m.freezer_v1.empty()) m.freezer_v1 = mountpoint;
    }
  }
  return m;
}

bool kernelAtLeast(int major, int minor) {
  struct utsname u;
  if (::uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

std::string writableProblem(const std::string& dir) {
  if (::access(dir.c_str(), W_OK) == 0) return "";
  int err = errno;
  return dir + " is not writable (" + errnoText(err) + "; run as root or delegate the hierarchy)";
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (exists(dir + "/" + name + "/cgroup.procs")) out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::vector<pid_t>> readProcs(const std::string& dir) {
  CHAOSBED_ASSIGN_OR_RETURN(std::string text, readFile(dir + "/cgroup.procs"));
  std::vector<pid_t> pids;
  std::istringstream in(text);
  for (long p; in >> p;) pids.push_back(static_cast<pid_t>(p));
  return pids;
}

// v1: "FROZEN"/"THAWED" in freezer.state; v2: "1"/"0" in cgroup.freeze, "frozen 1" in cgroup.events.
Status setFrozen(int version, const std::string& dir, bool frozen, std::chrono::milliseconds timeout) {
  if (version == 1) {
    CHAOSBED_RETURN_IF_ERROR(writeFile(dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"));
  } else {
    CHAOSBED_RETURN_IF_ERROR(writeFile(dir + "/cgroup.freeze", frozen ? "1" : "0"));
  }
  // The kernel reaches the state asynchronously and offers no portable event for v1: poll with backoff.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    bool reached;
    if (version == 1) {
      CHAOSBED_ASSIGN_OR_RETURN(std::string state, readFile(dir + "/freezer.state"));
      reached = trim(state) == (frozen ? "FROZEN" : "THAWED");
    } else {
      CHAOSBED_ASSIGN_OR_RETURN(std::string events, readFile(dir + "/cgroup.events"));
      reached = events.find(frozen ? "frozen 1" : "frozen 0") != std::string::npos;
    }
    if (reached) return Status::ok();
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::timeout("cgroup: " + dir + " did not become " + (frozen ? "frozen" : "thawed") + " within " +
                             std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

// Thaws, kills every process in dir and waits until it is empty, then removes dir (ENOENT is fine).
Status drainAndRemove(int version, const std::string& dir, bool freezable, std::chrono::milliseconds timeout) {
  if (!exists(dir)) return Status::ok();
  // A frozen task does not die until thawed; the root of a v1 freezer hierarchy has no freezer.state.
  if (freezable) CHAOSBED_RETURN_IF_ERROR(setFrozen(version, dir, false, timeout));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    auto pids = readProcs(dir);
    if (!pids.isOk()) {
      if (pids.status().code() == StatusCode::kNotFound) return Status::ok();
      return pids.status();
    }
    if (pids->empty()) break;
    for (pid_t p : *pids) ::kill(p, SIGKILL);
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::timeout("cgroup: " + dir + " still has " + std::to_string(pids->size()) +
                             " process(es) (first pid " + std::to_string(pids->front()) + ") after SIGKILL");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
  // A killed task leaves cgroup.procs before it has finished exiting (a large address space takes a while
  // to tear down, e.g. under ThreadSanitizer); until it has, rmdir says EBUSY.
  for (;;) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return Status::ok();
    const int err = errno;
    if (err != EBUSY || std::chrono::steady_clock::now() >= deadline)
      return Status::fromErrno("cgroup: rmdir " + dir, err);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }
}

// Enables the cpu controller for the children of dir (v2); returns the kernel's complaint if it refuses.
Status enableCpuForChildren(const std::string& dir) {
  auto current = readFile(dir + "/cgroup.subtree_control");
  if (current.isOk()) {
    std::istringstream in(*current);
    for (std::string c; in >> c;)
      if (c == "cpu") return Status::ok();
  }
  return writeFile(dir + "/cgroup.subtree_control", "+cpu");
}

}  // namespace

int availableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::optional<std::string> cpuQuotaOvercommit(std::span<const double> cpus, int cores) {
  if (cores <= 0) cores = availableCpus();
  double sum = 0;
  bool unlimited = false;
  for (double c : cpus) {
    if (c <= 0) unlimited = true;
    sum += std::max(0.0, c);
  }
  std::ostringstream msg;
  if (sum > cores + 1e-9) {
    msg << "cpu quotas add up to " << sum << " cores but only " << cores
        << " are available: nodes will compete for CPU and quotas no longer isolate them";
    return msg.str();
  }
  if (unlimited && cpus.size() > 1) {
    msg << "some nodes have no cpu quota (0 = unlimited): they may take the CPU of paused or killed nodes";
    return msg.str();
  }
  return std::nullopt;
}

CgroupSupport probeCgroups() {
  CgroupSupport s;
  Mounts m = findMounts();
  if (!m.cpu_v1.empty() || !m.freezer_v1.empty()) {
    s.version = 1;
    std::vector<std::string> problems;
    if (m.cpu_v1.empty()) {
      problems.push_back("the v1 cpu controller is not mounted");
    } else if (std::string p = writableProblem(m.cpu_v1); !p.empty()) {
      problems.push_back(p);
    } else {
      s.cpu = true;
    }
    if (m.freezer_v1.empty()) {
      problems.push_back("the v1 freezer controller is not mounted");
    } else if (std::string p = writableProblem(m.freezer_v1); !p.empty()) {
      problems.push_back(p);
    } else {
      s.freezer = true;
    }
    for (size_t i = 0; i < problems.size(); ++i) s.why_not += (i ? "; " : "") + problems[i];
    return s;
  }
  if (m.unified.empty()) {
    s.why_not = "no cgroup hierarchy is mounted (no cgroup or cgroup2 entry in /proc/self/mountinfo)";
    return s;
  }
  s.version = 2;
  if (std::string p = writableProblem(m.unified); !p.empty()) {
    s.why_not = p;
    return s;
  }
  std::vector<std::string> problems;
  auto controllers = readFile(m.unified + "/cgroup.controllers");
  bool has_cpu = false;
  if (controllers.isOk()) {
    std::istringstream in(*controllers);
    for (std::string c; in >> c;) has_cpu |= c == "cpu";
  }
  if (has_cpu) {
    s.cpu = true;
  } else {
    problems.push_back("the cpu controller is not available in " + m.unified + "/cgroup.controllers");
  }
  if (kernelAtLeast(5, 2)) {
    s.freezer = true;
  } else {
    problems.push_back("cgroup v2 freezing (cgroup.freeze) needs Linux 5.2 or newer");
  }
  for (size_t i = 0; i < problems.size(); ++i) s.why_not += (i ? "; " : "") + problems[i];
  return s;
}

Result<CgroupRoots> detectCgroupRoots() {
  CgroupSupport s = probeCgroups();
  if (!s.cpu && !s.freezer) return Status::unavailable("cgroups: " + s.why_not);
  Mounts m = findMounts();
  CgroupRoots r;
  r.version = s.version;
  if (s.version == 1) {
    r.cpu_root = m.cpu_v1;
    r.freezer_root = m.freezer_v1;
  } else {
    r.unified_root = m.unified;
  }
  return r;
}

Result<NodeCgroup> NodeCgroup::create(const std::string& group, const std::string& node) {
  CHAOSBED_ASSIGN_OR_RETURN(CgroupRoots roots, detectCgroupRoots());
  return create(group, node, roots);
}

Result<NodeCgroup> NodeCgroup::create(const std::string& group, const std::string& node,
                                      const CgroupRoots& roots) {
  CHAOSBED_RETURN_IF_ERROR(validName("group", group));
  CHAOSBED_RETURN_IF_ERROR(validName("node", node));
  NodeCgroup cg;
  cg.version_ = roots.version;
  cg.group_ = group;
  cg.node_ = node;
  if (roots.version == 1) {
    for (const std::string* root : {&roots.cpu_root, &roots.freezer_root}) {
      if (root->empty()) continue;
      std::string dir = *root + "/" + kBaseDir;
      CHAOSBED_RETURN_IF_ERROR(makeDir(dir));
      CHAOSBED_RETURN_IF_ERROR(makeDir(dir += "/" + group));
      CHAOSBED_RETURN_IF_ERROR(makeDir(dir += "/" + node));
      (root == &roots.cpu_root ? cg.cpu_dir_ : cg.freezer_dir_) = dir;
    }
    if (cg.cpu_dir_.empty() && cg.freezer_dir_.empty())
      return Status::invalidArgument("cgroup: v1 roots name neither a cpu nor a freezer mount");
  } else if (roots.version == 2) {
    if (roots.unified_root.empty()) return Status::invalidArgument("cgroup: v2 roots without a cgroup2 mount");
    // cpu must be enabled in the subtree_control of every ancestor; failing that, the node still freezes and
    // setCpuLimit() explains why it cannot.
    std::string dir = roots.unified_root;
    bool cpu_ok = enableCpuForChildren(dir).isOk();
    CHAOSBED_RETURN_IF_ERROR(makeDir(dir += std::string("/") + kBaseDir));
    cpu_ok = cpu_ok && enableCpuForChildren(dir).isOk();
    CHAOSBED_RETURN_IF_ERROR(makeDir(dir += "/" + group));
    if (cpu_ok) (void)enableCpuForChildren(dir);  // without the controller, setCpuLimit() fails and says why
    CHAOSBED_RETURN_IF_ERROR(makeDir(dir += "/" + node));
    cg.cpu_dir_ = cg.freezer_dir_ = dir;
  } else {
    return Status::invalidArgument("cgroup: unknown cgroup version " + std::to_string(roots.version));
  }
  return cg;
}

const std::string& NodeCgroup::procsDir() const { return freezer_dir_.empty() ? cpu_dir_ : freezer_dir_; }

std::vector<std::string> NodeCgroup::paths() const {
  std::vector<std::string> out;
  if (!cpu_dir_.empty()) out.push_back(cpu_dir_);
  if (!freezer_dir_.empty() && freezer_dir_ != cpu_dir_) out.push_back(freezer_dir_);
  return out;
}

Status NodeCgroup::addProcess(pid_t pid) {
  if (pid <= 0) return Status::invalidArgument("cgroup: addProcess: bad pid " + std::to_string(pid));
  for (const std::string& dir : paths())
    CHAOSBED_RETURN_IF_ERROR(writeFile(dir + "/cgroup.procs", std::to_string(pid)));
  return Status::ok();
}

Status NodeCgroup::setCpuLimit(double cpus) {
  if (!(cpus >= 0) || !std::isfinite(cpus) || (cpus > 0 && cpus < kMinCpus))
    return Status::invalidArgument("cgroup: cpu limit " + std::to_string(cpus) + " for node " + node_ +
                                   ": want 0 (unlimited) or at least 0.01 cores");
  if (cpu_dir_.empty()) return Status::unavailable("cgroup: node " + node_ + " has no cpu cgroup");
  long quota = cpus == 0 ? -1 : std::lround(cpus * kPeriodUs);
  if (version_ == 1) {
    CHAOSBED_RETURN_IF_ERROR(writeFile(cpu_dir_ + "/cpu.cfs_period_us", std::to_string(kPeriodUs)));
    return writeFile(cpu_dir_ + "/cpu.cfs_quota_us", std::to_string(quota));
  }
  std::string file = cpu_dir_ + "/cpu.max";
  if (!exists(file))
    return Status::unavailable("cgroup: " + file + " does not exist: the cpu controller is not enabled in the "
                               "parents' cgroup.subtree_control (a cgroup with processes cannot delegate it)");
  return writeFile(file, (quota < 0 ? std::string("max") : std::to_string(quota)) + " " + std::to_string(kPeriodUs));
}

Result<double> NodeCgroup::cpuLimit() const {
  if (cpu_dir_.empty()) return Status::unavailable("cgroup: node " + node_ + " has no cpu cgroup");
  long quota = -1, period = kPeriodUs;
  if (version_ == 1) {
    CHAOSBED_ASSIGN_OR_RETURN(std::string q, readFile(cpu_dir_ + "/cpu.cfs_quota_us"));
    CHAOSBED_ASSIGN_OR_RETURN(std::string p, readFile(cpu_dir_ + "/cpu.cfs_period_us"));
    quota = std::strtol(q.c_str(), nullptr, 10);
    period = std::strtol(p.c_str(), nullptr, 10);
  } else {
    CHAOSBED_ASSIGN_OR_RETURN(std::string text, readFile(cpu_dir_ + "/cpu.max"));
    std::istringstream in(text);
    std::string q;
    in >> q >> period;
    quota = q == "max" ? -1 : std::strtol(q.c_str(), nullptr, 10);
  }
  if (quota < 0) return 0.0;
  if (period <= 0) return Status::internal("cgroup: period " + std::to_string(period) + " in " + cpu_dir_);
  return static_cast<double>(quota) / static_cast<double>(period);
}

Result<std::chrono::microseconds> NodeCgroup::cpuUsage() const {
  if (version_ == 2) {
    CHAOSBED_ASSIGN_OR_RETURN(std::string text, readFile(cpu_dir_ + "/cpu.stat"));
    std::istringstream in(text);
    for (std::string key; in >> key;) {
      long long v = 0;
      in >> v;
      if (key == "usage_usec") return std::chrono::microseconds(v);
    }
    return Status::internal("cgroup: no usage_usec in " + cpu_dir_ + "/cpu.stat");
  }
  std::string file = cpu_dir_ + "/cpuacct.usage";
  if (!exists(file))
    return Status::unavailable("cgroup: " + file + " does not exist (cpuacct is not co-mounted with cpu here)");
  CHAOSBED_ASSIGN_OR_RETURN(std::string text, readFile(file));
  return std::chrono::microseconds(std::strtoll(text.c_str(), nullptr, 10) / 1000);
}

Status NodeCgroup::freeze(std::chrono::milliseconds timeout) {
  if (freezer_dir_.empty()) return Status::unavailable("cgroup: node " + node_ + " has no freezer cgroup");
  return setFrozen(version_, freezer_dir_, true, timeout);
}

Status NodeCgroup::thaw(std::chrono::milliseconds timeout) {
  if (freezer_dir_.empty()) return Status::unavailable("cgroup: node " + node_ + " has no freezer cgroup");
  return setFrozen(version_, freezer_dir_, false, timeout);
}

Result<bool> NodeCgroup::isFrozen() const {
  if (freezer_dir_.empty()) return Status::unavailable("cgroup: node " + node_ + " has no freezer cgroup");
  if (version_ == 1) {
    CHAOSBED_ASSIGN_OR_RETURN(std::string state, readFile(freezer_dir_ + "/freezer.state"));
    return trim(state) == "FROZEN";
  }
  CHAOSBED_ASSIGN_OR_RETURN(std::string events, readFile(freezer_dir_ + "/cgroup.events"));
  return events.find("frozen 1") != std::string::npos;
}

Result<std::vector<pid_t>> NodeCgroup::processes() const {
  if (procsDir().empty()) return std::vector<pid_t>{};
  return readProcs(procsDir());
}

Status NodeCgroup::destroy(std::chrono::milliseconds timeout) {
  // The freezer directory first: that thaws and kills; the cpu directory is then empty.
  if (!freezer_dir_.empty()) CHAOSBED_RETURN_IF_ERROR(drainAndRemove(version_, freezer_dir_, true, timeout));
  if (!cpu_dir_.empty() && cpu_dir_ != freezer_dir_)
    CHAOSBED_RETURN_IF_ERROR(drainAndRemove(version_, cpu_dir_, false, timeout));
  return Status::ok();
}

Status removeGroup(const std::string& group) {
  auto roots = detectCgroupRoots();
  if (!roots.isOk()) return Status::ok();  // nothing can have been created
  return removeGroup(group, *roots);
}

Status removeGroup(const std::string& group, const CgroupRoots& roots) {
  CHAOSBED_RETURN_IF_ERROR(validName("group", group));
  std::vector<std::pair<std::string, bool>> dirs;  // group dir, freezable
  if (roots.version == 1) {
    if (!roots.freezer_root.empty()) dirs.emplace_back(roots.freezer_root + "/" + kBaseDir + "/" + group, true);
    if (!roots.cpu_root.empty()) dirs.emplace_back(roots.cpu_root + "/" + kBaseDir + "/" + group, false);
  } else if (!roots.unified_root.empty()) {
    dirs.emplace_back(roots.unified_root + "/" + kBaseDir + "/" + group, true);
  }
  Status first;
  for (const auto& [dir, freezable] : dirs) {
    for (const std::string& node : subdirs(dir)) {
      Status s = drainAndRemove(roots.version, dir + "/" + node, freezable, std::chrono::seconds(5));
      if (!s.isOk() && first.isOk()) first = s;
    }
    if (exists(dir) && ::rmdir(dir.c_str()) != 0 && errno != ENOENT && first.isOk()) {
      int err = errno;
      first = Status::fromErrno("cgroup: rmdir " + dir, err);
    }
  }
  return first;
}

Result<std::vector<std::string>> listGroups() {
  auto roots = detectCgroupRoots();
  if (!roots.isOk()) return std::vector<std::string>{};
  return listGroups(*roots);
}

Result<std::vector<std::string>> listGroups(const CgroupRoots& roots) {
  std::set<std::string> groups;
  for (const std::string* root : {&roots.cpu_root, &roots.freezer_root, &roots.unified_root}) {
    if (root->empty()) continue;
    for (const std::string& g : subdirs(*root + "/" + kBaseDir)) groups.insert(g);
  }
  return std::vector<std::string>(groups.begin(), groups.end());
}

}  // namespace chaosbed
