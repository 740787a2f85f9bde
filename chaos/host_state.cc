#include "chaos/host_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "chaos/state.h"
#include "core/isolation/cgroup.h"

namespace chaosbed::chaos {
namespace fs = std::filesystem;
namespace {

// "<pid>.<start time>", both decimal.
const std::regex kOwner(R"(^([0-9]{1,10})\.([0-9]{1,20})$)");
constexpr char kOwnerLock[] = "owner.lock";

bool isRealDirectory(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

Status prepareOwnDirectory(const std::string& dir, mode_t mode, const std::string& what) {
  const std::string name = what + " " + dir;
  if (::mkdir(dir.c_str(), mode) != 0 && errno != EEXIST)
    return Status::fromErrno(name + ": cannot create");
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::fromErrno(name);
  if (S_ISLNK(st.st_mode)) return Status::invalidArgument(name + " is a symbolic link: refusing to follow it");
  if (!S_ISDIR(st.st_mode)) return Status::invalidArgument(name + " is not a directory");
  if (st.st_uid != ::geteuid())
    return Status::invalidArgument(name + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (" +
                                   std::to_string(::geteuid()) + "): refusing to use it");
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return Status::invalidArgument(name + " is writable by group or others: refusing to use it");
  return Status::ok();
}

Status prepareRoot(const std::string& root) { return prepareOwnDirectory(root, 0700, "host state directory"); }

Result<std::string> hostStateRoot() {
  std::string root;
  if (::geteuid() == 0 && isRealDirectory("/run")) {
    root = "/run/chaosbed";
  } else if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg == '/' && isRealDirectory(xdg)) {
    root = std::string(xdg) + "/chaosbed";
  } else {
    root = "/tmp/chaosbed-" + std::to_string(::geteuid());
  }
  CHAOSBED_RETURN_IF_ERROR(prepareRoot(root));
  return root;
}

std::optional<std::string> ownerName(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) state ppid ..."; comm may hold spaces and parentheses: fields follow the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(fields >> field)) return std::nullopt;
  return std::to_string(pid) + "." + field;  // field 22: start time in clock ticks after boot
}

bool ownerAlive(const std::string& owner, const std::string& claims_root) {
  std::smatch m;
  if (!std::regex_match(owner, m, kOwner)) return false;
  const std::string lock = claims_root + "/" + owner + "/" + kOwnerLock;
  if (const int fd = claims_root.empty() ? -1 : ::open(lock.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC); fd >= 0) {
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);
    return held;
  }
  const long long pid = std::stoll(m[1].str());
  if (pid <= 0 || pid > 0x7fffffff) return false;
  return ownerName(pid_t(pid)) == owner;
}

Result<RunClaim> RunClaim::create(const std::string& root) {
  CHAOSBED_RETURN_IF_ERROR(prepareRoot(root));
  const auto owner = ownerName(::getpid());
  if (!owner) return Status::internal("cannot read /proc/self/stat");
  const std::string dir = root + "/" + *owner;
  // A claim of this very process may exist (a sweep runs experiments one after another): reuse it.
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::fromErrno(dir + ": cannot create");
  if (!isRealDirectory(dir)) return Status::invalidArgument(dir + " is not a directory of ours: refusing to use it");
  const std::string lock = dir + "/" + kOwnerLock;
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::fromErrno(lock + ": cannot open");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::fromErrno(lock + ": cannot lock", err);
    return RunClaim(dir, *owner, -1);  // an earlier claim of this very process holds it (a sweep's)
  }
  return RunClaim(dir, *owner, fd);
}

RunClaim::RunClaim(RunClaim&& other) noexcept
    : dir_(std::move(other.dir_)), owner_(std::move(other.owner_)), lock_fd_(other.lock_fd_) {
  other.dir_.clear();
  other.lock_fd_ = -1;
}

Result<std::string> RunClaim::scratchDir() const {
  const std::string dir = dir_ + "/@scratch";
  CHAOSBED_RETURN_IF_ERROR(prepareOwnDirectory(dir, 0700, "the run's scratch directory"));
  return dir;
}

RunClaim::~RunClaim() {
  if (dir_.empty()) return;
  // Closed last: the claim reads as its owner's until it is gone or left for a heal.
  struct CloseLock {
    int fd;
    ~CloseLock() {
      if (fd >= 0) ::close(fd);
    }
  } close_lock{lock_fd_};
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    auto state = readState(e.path().string());
    // A fault whose revert failed stays listed (a leak): keep the claim, so that the agent or the next
    // start heals it once this process is gone.
    if (!state.isOk() || (*state && !(*state)->finished)) return;
  }
  fs::remove_all(dir_, ec);  // does not follow symbolic links
}

HealReport healDeadRuns(const std::string& root, EventLog* log) {
  HealReport report;
  if (Status s = prepareRoot(root); !s.isOk()) {
    report.errors.push_back(s.toString());
    return report;
  }
  auto groups = listGroups();
  std::vector<std::string> cgroup_groups = groups.isOk() ? *groups : std::vector<std::string>{};
  std::set<std::string> tried;
  auto remove = [&](const std::string& g) {
    if (!tried.insert(g).second) return;
    if (Status s = removeGroup(g); s.isOk()) ++report.cgroups;
    else report.errors.push_back("cgroup group " + g + ": " + s.toString());
  };

  std::error_code ec;
  for (const auto& claim : fs::directory_iterator(root, ec)) {
    const std::string owner = claim.path().filename().string();
    if (!std::regex_match(owner, kOwner) || claim.is_symlink(ec) || !claim.is_directory(ec)) continue;
    if (ownerAlive(owner, root)) continue;
    // Heal first (thaw, restore quotas), then remove the groups: a frozen process only dies once thawed.
    bool whole = true;
    for (const auto& state_dir : fs::directory_iterator(claim.path(), ec)) {
      if (state_dir.is_symlink(ec) || !state_dir.is_directory(ec)) continue;
      auto healed = cleanupStale(state_dir.path().string(), log, "heal");
      if (healed.isOk()) report.records += *healed;
      else report.errors.push_back(state_dir.path().string() + ": " + healed.status().toString());
      whole &= healed.isOk();
    }
    for (const std::string& g : cgroup_groups)
      if (g.starts_with(owner + "-")) remove(g);
    if (!whole) continue;  // what could not be healed stays on record (its groups are gone: nothing runs there)
    fs::remove_all(claim.path(), ec);
    if (ec) report.errors.push_back(claim.path().string() + ": cannot remove: " + ec.message());
    ++report.runs;
  }
  // Groups whose claim is gone (removed by hand, or lost with a tmpfs) but whose owner is dead too.
  static const std::regex kOwnedGroup(R"(^([0-9]{1,10}\.[0-9]{1,20})-.+$)");
  for (const std::string& g : cgroup_groups) {
    std::smatch m;
    if (!std::regex_match(g, m, kOwnedGroup) || ownerAlive(m[1].str(), root)) continue;
    if (isRealDirectory(root + "/" + m[1].str())) continue;  // its claim's removal failed: the next heal retries
    remove(g);
  }
  return report;
}

}  // namespace chaosbed::chaos
