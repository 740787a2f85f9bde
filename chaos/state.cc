#include "chaos/state.h"

#include "transports/base/files.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "chaos/clock.h"
#include "core/isolation/command.h"
#include "core/runtime/events.h"

namespace chaosbed::chaos {
namespace {

std::string join(const std::string& dir, const std::string& name) { return dir + "/" + name; }

// The whole file, or nullopt when there is none. Never through a symbolic link (chaosbed runs as root: a
// planted state.json would make a heal signal or thaw whatever the link's target names).
Result<std::optional<std::string>> readWhole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    if (errno == ELOOP) return Status::invalidArgument(path + ": a symbolic link, not followed");
    return Status::fromErrno(path + ": cannot read");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, size_t(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    if (n < 0) return Status::fromErrno(path + ": cannot read", err);
    return std::optional<std::string>(std::move(text));
  }
}

}  // namespace

Status writeState(const std::string& dir, const ChaosState& state) { return writeStateFile(join(dir, kStateFile), state); }

Result<std::optional<ChaosState>> readState(const std::string& dir) { return readStateFile(join(dir, kStateFile)); }

Status writeStateFile(const std::string& path, const ChaosState& state) {
  nlohmann::json j;
  j["version"] = 1;
  j["controller_pid"] = state.controller_pid;
  j["agent_pid"] = state.agent_pid;
  j["finished"] = state.finished;
  j["events_path"] = state.events_path;
  j["entries"] = nlohmann::json::array();
  for (const StateEntry& e : state.entries) {
    nlohmann::json je{{"fault_id", e.fault_id}, {"name", e.name}, {"kind", e.kind}, {"node", e.node}};
    je["heal"] = nlohmann::json::array();
    for (const HealRecord& r : e.heal) je["heal"].push_back(healToJson(r));
    j["entries"].push_back(je);
  }
  return writeFileAtomically(path, j.dump() + "\n", 0644, /*sync=*/false);
}

Result<std::optional<ChaosState>> readStateFile(const std::string& path) {
  CHAOSBED_ASSIGN_OR_RETURN(std::optional<std::string> text, readWhole(path));
  if (!text) return std::optional<ChaosState>();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::dataLoss(path + ": not a JSON object");
  ChaosState s;
  try {
    s.controller_pid = j.value("controller_pid", 0);
    s.agent_pid = j.value("agent_pid", 0);
    s.finished = j.value("finished", false);
    s.events_path = j.value("events_path", std::string());
    for (const nlohmann::json& je : j.at("entries")) {
      StateEntry e;
      e.fault_id = je.at("fault_id");
      e.name = je.value("name", std::string());
      e.kind = je.value("kind", std::string());
      e.node = je.at("node");
      for (const nlohmann::json& jr : je.at("heal")) {
        Result<HealRecord> r = healFromJson(jr);
        if (!r.isOk()) return r.status().withContext(path);
        e.heal.push_back(*r);
      }
      s.entries.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::dataLoss(path + ": malformed state: " + e.what());
  }
  return std::optional<ChaosState>(std::move(s));
}

Status renewLease(const std::string& dir, int64_t monotonic_ns) {
  return writeFileAtomically(join(dir, kLeaseFile), std::to_string(monotonic_ns) + "\n", 0644, /*sync=*/false);
}

Result<int64_t> readLease(const std::string& dir) {
  const std::string path = join(dir, kLeaseFile);
  CHAOSBED_ASSIGN_OR_RETURN(std::optional<std::string> text, readWhole(path));
  if (!text) return Status::notFound(path + ": no lease");
  try {
    return static_cast<int64_t>(std::stoll(*text));
  } catch (const std::exception&) {
    return Status::dataLoss(path + ": not a number");
  }
}

Result<int> cleanupStale(const std::string& dir, EventLog* log, const std::string& by) {
  CHAOSBED_ASSIGN_OR_RETURN(std::optional<ChaosState> state, readState(dir));
  if (!state || state->finished) return 0;
  std::unique_ptr<EventLog> own_log;
  if (log == nullptr && !state->events_path.empty()) {
    Result<std::unique_ptr<EventLog>> opened = EventLog::open(state->events_path);
    if (opened.isOk()) own_log = std::move(opened).value();
    log = own_log.get();
  }
  int healed = 0;
  Status first_error;
  // Newest first: undo in the reverse order of application.
  for (auto e = state->entries.rbegin(); e != state->entries.rend(); ++e) {
    for (const HealRecord& r : e->heal) {
      Status s = heal(r);
      if (s.isOk()) ++healed;
      else if (first_error.isOk()) first_error = s;
      if (log) {
        events::ChaosHealed ev{.fault_id = e->fault_id, .name = e->name, .kind = e->kind, .node = e->node,
                               .op = healOpName(r.op), .by = by};
        if (!s.isOk()) ev.error = s.toString();
        log->record(events::toJson(ev));
      }
    }
  }
  state->entries.clear();
  state->finished = true;
  CHAOSBED_RETURN_IF_ERROR(writeState(dir, *state));
  if (!first_error.isOk()) return first_error;
  return healed;
}

int runAgent(const std::string& dir, const AgentOptions& options) {
  RealClock& clock = realClock();
  const auto heal_and_exit = [&](const char* why, bool tell_controller) {
    Result<std::optional<ChaosState>> before = readState(dir);
    Result<int> r = cleanupStale(dir, nullptr, std::string("agent: ") + why);
    // A controller that only stalled may wake: it learns what was healed from kHealedFile (written after
    // the heal) and the missing lease, and neither reverts nor re-records those faults.
    if (tell_controller && before.isOk() && *before && !(*before)->entries.empty())
      (void)writeStateFile(join(dir, kHealedFile), **before);  // without it, such a controller reverts them again
    ::unlink(join(dir, kLeaseFile).c_str());
    return r.isOk() ? 0 : 4;
  };
  bool pipe_open = options.control_fd >= 0;
  while (true) {
    if (pipe_open) {
      pollfd p{options.control_fd, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(options.poll_interval_s * 1000));
      if (n > 0) {
        char buf[64];
        const ssize_t got = ::read(options.control_fd, buf, sizeof buf);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
          // The controller closed the pipe: it ended normally (state finished) or it died.
          pipe_open = false;
          Result<std::optional<ChaosState>> st = readState(dir);
          if (st.isOk() && (!*st || (*st)->finished)) return 0;
          return heal_and_exit("controller gone", /*tell_controller=*/false);
        }
      }
    } else {
      ::usleep(static_cast<useconds_t>(options.poll_interval_s * 1e6));
    }
    Result<std::optional<ChaosState>> st = readState(dir);
    if (st.isOk() && (!*st || (*st)->finished)) return 0;
    Result<int64_t> lease = readLease(dir);
    if (lease.isOk() && clock.monotonicNs() - *lease > static_cast<int64_t>(options.lease_timeout_s * 1e9))
      return heal_and_exit("lease lapsed", /*tell_controller=*/true);
  }
}

Result<pid_t> spawnAgent(const std::string& binary, const std::string& dir, double lease_timeout_s, int* control_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::fromErrno("agent pipe");
  const std::string lease_arg = "--agent_lease_timeout_s=" + std::to_string(lease_timeout_s);
  const std::string log_path = join(dir, "agent.log");
  std::vector<std::string> argv_s = {binary, "chaos", "agent", "--state", dir, "--control_fd", "3", lease_arg};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return Status::fromErrno("fork agent");
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    ::setsid();
    restoreDefaultSignals();    // the controller's watcher blocks SIGINT and SIGTERM: the agent must hear SIGTERM
    ::signal(SIGINT, SIG_IGN);  // a Ctrl-C to the controller's terminal must not kill the healer
    // The pipe as fd 3, without close-on-exec: dup2 clears it on a copy, but dup2 onto itself does nothing
    // (a process with few descriptors open gets the pipe as fd 3), so then clear it directly.
    if (fds[0] == 3) ::fcntl(3, F_SETFD, 0);
    else ::dup2(fds[0], 3);
    const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    ::close_range(4, ~0U, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[0]);
  *control_fd = fds[1];
  return pid;
}

}  // namespace chaosbed::chaos
