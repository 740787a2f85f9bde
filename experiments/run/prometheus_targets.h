#pragma once
// Prometheus file-based service discovery (file_sd) for runs: while `chaosbed run` serves /metrics it
// announces the endpoint in <dir>/<owner>.json, one target with the run's labels, and removes the file when it
// exits. The shipped dashboards/prometheus/prometheus.yml watches <dir>/*.json, so a run on any port (port 0
// picks a free one, and several runs may share a host) is scraped without a flag, and its series carry
// run_id, experiment and seed. <owner> is the controller's "<pid>.<start time>" (chaos/host_state.h): the file
// of a run that died is found by that name and removed by the next run.
//
// Security: the directory is created 0755 (Prometheus often runs as another user; a target file holds an
// address and labels, no secret). It must be a real directory owned by this user without group or other
// write, or nothing is published. Files are written under a fresh temporary name (O_EXCL, O_NOFOLLOW) and
// renamed into place; entries are removed with unlink, which never follows a link.

#include <map>
#include <string>

#include "transports/base/status.h"

namespace chaosbed::run {

// /run/chaosbed-targets as root; else $XDG_RUNTIME_DIR/chaosbed-targets, else /tmp/chaosbed-targets-<uid>.
std::string defaultTargetsDir();

// One published target; removes its file when destroyed.
class PrometheusTarget {
 public:
  // Writes <dir>/<owner>.json: [{"targets": [address], "labels": labels}]. Creates dir if needed, and first
  // removes the files of owners that are no longer alive.
  static Result<PrometheusTarget> publish(const std::string& dir, const std::string& owner, const std::string& address,
                                          const std::map<std::string, std::string>& labels);
  PrometheusTarget(PrometheusTarget&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  PrometheusTarget& operator=(PrometheusTarget&&) = delete;
  PrometheusTarget(const PrometheusTarget&) = delete;
  ~PrometheusTarget();

  const std::string& path() const { return path_; }

 private:
  explicit PrometheusTarget(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Removes <dir>/<owner>.json of every owner that is not alive; returns how many.
int removeStaleTargets(const std::string& dir);

}  // namespace chaosbed::run
