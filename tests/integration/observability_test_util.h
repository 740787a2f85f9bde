#pragma once
// Helpers of the observability tests: the repository's dashboards/ folder, running a tool and capturing its
// output, a child process whose stdout+stderr lines are read with deadlines (the controller, a Prometheus
// server, a Pushgateway), free loopback ports, the metric names a PromQL expression refers to, and the
// dashboard's queries with their variables filled in.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/transport.h"

namespace chaosbed::observability_test {

// The repository root (CHAOSBED_SOURCE_DIR, set by tests/CMakeLists.txt).
inline std::filesystem::path repoRoot() { return CHAOSBED_SOURCE_DIR; }
inline std::filesystem::path dashboardsDir() { return repoRoot() / "dashboards"; }

inline bool haveTool(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

inline std::string readFile(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CommandResult {
  int rc = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line to completion (the tools used here finish in well under a second).
inline CommandResult runCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A fresh temporary directory, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("chaosbed_" + tag + "_XXXXXX")).string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A loopback TCP port free at the time of the call (the kernel's choice for port 0).
inline int freePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A child process (own process group, dies with the test) whose stdout and stderr arrive as lines on one
// pipe. The destructor kills (SIGKILL to the group) and reaps it if it is still running.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    // argv is built before the fork: the child of a threaded process must not allocate before exec.
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::execvp(args[0], args.data());
      (void)!::write(STDERR_FILENO, "exec ", 5);
      (void)!::write(STDERR_FILENO, args[0], std::strlen(args[0]));
      (void)!::write(STDERR_FILENO, " failed\n", 8);
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0 && fd_ >= 0; }
  pid_t pid() const { return pid_; }

  // The next complete line, or nullopt at the deadline or at end of output (eof() tells which).
  std::optional<std::string> readLine(Deadline deadline) {
    for (;;) {
      if (size_t nl = partial_.find('\n'); nl != std::string::npos) {
        std::string line = partial_.substr(0, nl);
        partial_.erase(0, nl + 1);
        output_ += line + "\n";
        return line;
      }
      if (eof_) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n > 0) partial_.append(buf, size_t(n));
      else if (n == 0) eof_ = true;
    }
  }
  // Reads lines until one contains `needle`; that line, or nullopt (deadline or end of output).
  std::optional<std::string> waitForLine(const std::string& needle, Deadline deadline) {
    while (auto line = readLine(deadline))
      if (line->find(needle) != std::string::npos) return line;
    return std::nullopt;
  }
  bool eof() const { return eof_; }
  // Everything read so far (for failure messages).
  const std::string& output() const { return output_; }

  // Drains the output and reaps the process: its exit code (128 + signal if killed), or nullopt at the
  // deadline (the process is then left to the destructor).
  std::optional<int> waitExit(Deadline deadline) {
    while (readLine(deadline)) {
    }
    if (exit_code_) return exit_code_;
    // A pidfd becomes readable when the process exits: wait on it with the deadline.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd < 0) return std::nullopt;
    pollfd p{pidfd, POLLIN, 0};
    int n;
    do {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
      n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
    } while (n < 0 && errno == EINTR);
    ::close(pidfd);
    if (n != 1) return std::nullopt;
    int st = 0;
    if (::waitpid(pid_, &st, 0) != pid_) return std::nullopt;
    exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return exit_code_;
  }
  // SIGTERM, then waitExit.
  std::optional<int> terminate(Deadline deadline) {
    if (!exit_code_) ::kill(pid_, SIGTERM);
    return waitExit(deadline);
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string partial_, output_;
  bool eof_ = false;
  std::optional<int> exit_code_;
};

// Names of chaosbed metrics (chaosbed_*, not recording rules chaosbed:*) that a PromQL expression uses.
inline std::set<std::string> metricNames(const std::string& promql) {
  static const std::regex kName(R"((^|[^A-Za-z0-9_:])(chaosbed_[A-Za-z0-9_]+))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(promql.begin(), promql.end(), kName); it != std::sregex_iterator(); ++it)
    out.insert((*it)[2].str());
  return out;
}

// A PromQL expression of the Grafana dashboard, and where it sits.
struct DashboardQuery {
  std::string where;     // "panel 'Idle wait by reason' A", "annotation '...'", "variable strategy"
  std::string expr;
  bool instant = false;  // a panel target queried at one instant (stat, bar gauge): the last values
};

// Every PromQL expression of the dashboard; variable queries contribute the selector inside label_values().
inline std::vector<DashboardQuery> dashboardQueries(const nlohmann::json& d) {
  std::vector<DashboardQuery> out;
  for (const nlohmann::json& p : d.at("panels"))
    for (const nlohmann::json& t : p.value("targets", nlohmann::json::array()))
      out.push_back({"panel '" + p.value("title", "") + "' " + t.value("refId", ""), t.at("expr").get<std::string>(),
                     t.value("instant", false)});
  for (const nlohmann::json& a : d.at("annotations").at("list"))
    if (a.contains("expr")) out.push_back({"annotation '" + a.value("name", "") + "'", a.at("expr").get<std::string>()});
  static const std::regex kLabelValues(R"(^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\)$)");
  for (const nlohmann::json& v : d.at("templating").at("list")) {
    if (v.value("type", "") != "query") continue;
    std::string q = v.at("query").is_string() ? v.at("query").get<std::string>()
                                              : v.at("query").at("query").get<std::string>();
    std::smatch m;
    if (std::regex_match(q, m, kLabelValues)) q = m[1].str();
    out.push_back({"variable " + v.value("name", ""), q});
  }
  return out;
}

// Grafana's variables replaced by values of the right shape (the experiment regex and the dashboard's time
// range as given); anything left starting with '$' is unknown.
inline std::string substituteVariables(std::string expr, const std::string& experiment = ".*",
                                       const std::string& range = "1h") {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"${experiment}", experiment}, {"$experiment", experiment}, {"${strategy}", ".*"}, {"$strategy", ".*"},
      {"$__rate_interval", "1m"},    {"$__interval", "15s"},      {"$__range", range}};
  for (const auto& [from, to] : vars)
    for (size_t pos; (pos = expr.find(from)) != std::string::npos;) expr.replace(pos, from.size(), to);
  return expr;
}

}  // namespace chaosbed::observability_test
