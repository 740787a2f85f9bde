#include "experiments/run/prometheus_targets.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "chaos/host_state.h"
#include "transports/bootstrap/secret.h"

namespace chaosbed::run {
namespace {

constexpr const char* kSuffix = ".json";

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An owner name as chaos::ownerName makes it: digits, a dot, digits. Anything else in the directory is not
// ours and is left alone.
bool isOwnerName(const std::string& s) {
  const size_t dot = s.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == s.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != dot && (s[i] < '0' || s[i] > '9')) return false;
  return true;
}

Status writeNew(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::fromErrno(path);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return Status::fromErrno(path, err);
    }
    done += size_t(n);
  }
  ::fchmod(fd, 0644);  // readable by a Prometheus of another user, whatever the umask
  if (::close(fd) != 0) {
    ::unlink(path.c_str());
    return Status::fromErrno(path);
  }
  return Status::ok();
}

}  // namespace

std::string defaultTargetsDir() {
  if (::geteuid() == 0) return "/run/chaosbed-targets";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg == '/') return std::string(xdg) + "/chaosbed-targets";
  return "/tmp/chaosbed-targets-" + std::to_string(::geteuid());
}

int removeStaleTargets(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (!endsWith(name, kSuffix)) continue;
    const std::string owner = name.substr(0, name.size() - std::strlen(kSuffix));
    if (!isOwnerName(owner) || chaos::ownerAlive(owner)) continue;
    if (::unlink((dir + "/" + name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

Result<PrometheusTarget> PrometheusTarget::publish(const std::string& dir, const std::string& owner,
                                                   const std::string& address,
                                                   const std::map<std::string, std::string>& labels) {
  if (!isOwnerName(owner)) return Status::invalidArgument("prometheus target: malformed owner '" + owner + "'");
  CHAOSBED_RETURN_IF_ERROR(chaos::prepareOwnDirectory(dir, 0755, "prometheus targets directory"));
  removeStaleTargets(dir);
  nlohmann::json group = {{"targets", {address}}, {"labels", labels}};
  const std::string text = nlohmann::json::array({group}).dump(2) + "\n";
  // A temporary name nobody can predict, renamed over the target: Prometheus never reads half a file.
  const std::string temp = dir + "/." + owner + "." + toHex(Secret::nonce(8)) + ".tmp";
  CHAOSBED_RETURN_IF_ERROR(writeNew(temp, text));
  const std::string path = dir + "/" + owner + kSuffix;
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return Status::fromErrno(path, err);
  }
  return PrometheusTarget(path);
}

PrometheusTarget::~PrometheusTarget() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

}  // namespace chaosbed::run
