#include "core/launcher/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glog/logging.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <sstream>

#include "core/isolation/command.h"

extern char** environ;

namespace chaosbed {
namespace {

constexpr auto kExecTimeout = std::chrono::seconds(10);  // fork to exec, normally well under 10 ms
constexpr auto kKillTimeout = std::chrono::seconds(10);  // SIGKILL to reaped


Status validNodeName(const std::string& name) {
  if (name.empty() || name == "." || name == "..")
    return Status::invalidArgument("launcher: node name '" + name + "' is empty, '.' or '..'");
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return Status::invalidArgument("launcher: node name '" + name + "' has '" + std::string(1, c) +
                                     "'; use [A-Za-z0-9._-]");
  return Status::ok();
}

Result<std::string> resolveBinary(const std::string& binary) {
  if (binary.find('/') != std::string::npos) {
    if (::access(binary.c_str(), X_OK) != 0) {
      int err = errno;
      return Status::invalidArgument("launcher: binary " + binary + " is not executable: " + errnoText(err));
    }
    return binary;
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + binary;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return Status::invalidArgument("launcher: binary '" + binary + "' not found in PATH");
}

int pidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// What the child reports over the error pipe when it cannot exec.
struct ChildError {
  int stage;  // 0 prctl, 1 dup2, 2 exec
  int err;
};

}  // namespace

std::string ExitInfo::describe() const {
  if (!signaled) return "exited with code " + std::to_string(code);
  const char* abbrev = ::sigabbrev_np(signal);
  return "killed by signal " + std::to_string(signal) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

struct Launcher::Node {
  NodeSpec spec;
  int incarnation = 0;
  pid_t pid = -1;
  int pidfd = -1;
  bool running = false;
  bool starting = false;
  bool stop_requested = false;
  SteadyClock::time_point started;
  std::optional<ExitInfo> last_exit;
  std::unique_ptr<NodeCgroup> cgroup;
};

// One fork+exec, prepared by the caller and carried out on the launcher thread.
struct Launcher::SpawnJob {
  std::string name;
  std::string binary;
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  int log_fd = -1;
  NodeCgroup* cgroup = nullptr;
  int net_namespace_fd = -1;
  std::promise<Result<pid_t>> done;
};

Result<std::unique_ptr<Launcher>> Launcher::create(LauncherOptions options) {
  if (options.log_dir.empty()) return Status::invalidArgument("launcher: options.log_dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.log_dir, ec);
  if (ec) return Status::ioError("launcher: cannot create log dir " + options.log_dir + ": " + ec.message());
  if (options.cgroup_group.empty()) options.cgroup_group = "launcher-" + std::to_string(::getpid());
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) {
    int err = errno;
    return Status::fromErrno("launcher: readlink /proc/self/exe", err);
  }
  std::string self(buf, static_cast<size_t>(n));
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd < 0) {
    int err = errno;
    return Status::fromErrno("launcher: eventfd", err);
  }
  return std::unique_ptr<Launcher>(new Launcher(std::move(options), std::move(self), efd));
}

Launcher::Launcher(LauncherOptions options, std::string self_exe, int event_fd)
    : options_(std::move(options)), self_exe_(std::move(self_exe)), event_fd_(event_fd) {
  thread_ = std::thread([this] { loop(); });
}

Launcher::~Launcher() {
  Status s = stopAll(options_.stop_grace);
  if (!s.isOk()) LOG(ERROR) << "launcher: stopping nodes: " << s.toString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
  }
  wake();
  thread_.join();
  for (auto& [name, node] : nodes_) {
    if (node->pidfd >= 0) ::close(node->pidfd);
    if (node->cgroup) {
      Status d = node->cgroup->destroy();
      if (!d.isOk()) LOG(ERROR) << "launcher: removing the cgroup of " << name << ": " << d.toString();
    }
  }
  if (created_cgroups_) {
    Status r = removeGroup(options_.cgroup_group);
    if (!r.isOk()) LOG(ERROR) << "launcher: removing cgroup group " << options_.cgroup_group << ": " << r.toString();
  }
  ::close(event_fd_);
}

void Launcher::wake() {
  uint64_t one = 1;
  // EAGAIN only when the counter is saturated, which still wakes the loop.
  ssize_t n = ::write(event_fd_, &one, sizeof one);
  (void)n;
}

Result<pid_t> Launcher::start(const NodeSpec& spec) {
  CHAOSBED_RETURN_IF_ERROR(validNodeName(spec.name));
  if (spec.role.empty()) return Status::invalidArgument("launcher: node " + spec.name + ": role is empty");
  if (spec.index < 0)
    return Status::invalidArgument("launcher: node " + spec.name + ": index " + std::to_string(spec.index) + " < 0");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (nodes_.count(spec.name))
      return Status::invalidArgument("launcher: node " + spec.name + " already exists (use restart)");
    auto node = std::make_unique<Node>();
    node->spec = spec;
    node->starting = true;  // reserves the name while the cgroup is set up
    nodes_.emplace(spec.name, std::move(node));
  }
  if (spec.cpus) {
    auto cg = NodeCgroup::create(options_.cgroup_group, spec.name);
    Status s = cg.isOk() ? cg->setCpuLimit(*spec.cpus) : cg.status();
    if (cg.isOk() && !s.isOk())
      if (Status d = cg->destroy(); !d.isOk()) LOG(WARNING) << "launcher: " << d.toString();
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.isOk()) {
      nodes_.erase(spec.name);
      exited_cv_.notify_all();
      return s.withContext("launcher: isolating node " + spec.name);
    }
    nodes_.at(spec.name)->cgroup = std::make_unique<NodeCgroup>(std::move(cg).value());
    created_cgroups_ = true;
  }
  return launch(spec.name, true);
}

Result<pid_t> Launcher::restart(const std::string& name, Deadline deadline) {
  NodeCgroup* cg = nullptr;
  std::optional<double> cpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nodes_.find(name);
    if (it == nodes_.end()) return Status::notFound("launcher: restart: no node named " + name);
    Node& node = *it->second;
    if (node.starting) return Status::invalidArgument("launcher: restart: node " + name + " is being started");
    cg = node.cgroup.get();
    cpus = node.spec.cpus;
  }
  if (cg) (void)cg->thaw();  // a frozen task does not die
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(name);
    if (node.running) {  // under mu_: not reaped yet, so the pgid is still the node's
      node.stop_requested = true;
      ::killpg(node.pid, SIGKILL);
    }
  }
  auto exited = waitExit(name, deadline);
  if (!exited.isOk()) return exited.status().withContext("launcher: restart " + name);
  if (cg) {
    CHAOSBED_RETURN_IF_ERROR(cg->thaw());
    CHAOSBED_RETURN_IF_ERROR(cg->setCpuLimit(cpus.value_or(0)));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(name);
    if (node.running || node.starting)
      return Status::invalidArgument("launcher: restart: node " + name + " was started meanwhile");
    node.starting = true;
  }
  return launch(name, false);
}

Result<pid_t> Launcher::launch(const std::string& name, bool first) {
  auto job = std::make_shared<SpawnJob>();
  NodeSpec spec;
  int incarnation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(name);
    spec = node.spec;
    incarnation = node.incarnation + 1;
    job->cgroup = node.cgroup.get();
    job->net_namespace_fd = spec.net_namespace_fd;
  }
  auto fail = [&](const Status& s) -> Result<pid_t> {
    std::unique_ptr<NodeCgroup> cg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Node& node = *nodes_.at(name);
      node.starting = false;
      if (first) {  // a failed first start leaves no trace
        cg = std::move(node.cgroup);
        nodes_.erase(name);
      }
      exited_cv_.notify_all();
    }
    if (cg)
      if (Status d = cg->destroy(); !d.isOk()) LOG(WARNING) << "launcher: " << d.toString();
    return s;
  };
  auto binary = resolveBinary(spec.binary.empty() ? self_exe_ : spec.binary);
  if (!binary.isOk()) return fail(binary.status().withContext("node " + name));
  job->name = name;
  job->binary = *binary;
  job->argv.push_back(job->binary);
  job->argv.insert(job->argv.end(), spec.args.begin(), spec.args.end());

  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  env["CHAOSBED_NODE"] = name;
  env["CHAOSBED_ROLE"] = spec.role;
  env["CHAOSBED_RANK"] = std::to_string(spec.index);
  env["CHAOSBED_INCARNATION"] = std::to_string(incarnation);
  for (const auto& [k, v] : env) job->envp.push_back(k + "=" + v);

  std::string log = logPath(name);
  job->log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (job->log_fd < 0) {
    int err = errno;
    return fail(Status::fromErrno("launcher: open log " + log, err));
  }
  std::string header = "--- chaosbed launcher: " + name + " incarnation " + std::to_string(incarnation) + ":";
  for (const std::string& a : job->argv) header += " " + a;
  header += "\n";
  if (::write(job->log_fd, header.data(), header.size()) < 0) {
    int err = errno;
    ::close(job->log_fd);
    return fail(Status::fromErrno("launcher: write log " + log, err));
  }

  std::future<Result<pid_t>> result = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    spawn_queue_.push_back(job);
  }
  wake();
  // Bounded: the launcher thread gives up on a child that has not exec'ed within kExecTimeout.
  Result<pid_t> pid = result.get();
  ::close(job->log_fd);
  if (!pid.isOk()) return fail(pid.status());
  return pid;
}

void Launcher::spawn(SpawnJob& job) {
  auto finish = [&](Result<pid_t> r) { job.done.set_value(std::move(r)); };
  std::vector<char*> argv, envp;
  for (std::string& a : job.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : job.envp) envp.push_back(e.data());
  envp.push_back(nullptr);

  int sync_pipe[2], err_pipe[2];
  if (::pipe2(sync_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    return finish(Status::fromErrno("launcher: pipe", err));
  }
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(sync_pipe[0]);
    ::close(sync_pipe[1]);
    return finish(Status::fromErrno("launcher: pipe", err));
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const int log_fd = job.log_fd;
  const char* path = job.binary.c_str();
  const int net_namespace_fd = job.net_namespace_fd;

  pid_t pid = ::fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only until execve.
    auto die = [&](int stage) {
      ChildError ce{stage, errno};
      ssize_t n = ::write(err_pipe[1], &ce, sizeof ce);
      (void)n;
      ::_exit(127);
    };
    ::setpgid(0, 0);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die(0);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
    restoreDefaultSignals();
    if ((devnull >= 0 && ::dup2(devnull, 0) < 0) || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) die(1);
    if (net_namespace_fd >= 0 && ::setns(net_namespace_fd, CLONE_NEWNET) != 0) die(3);
    char go = 0;
    ssize_t n;
    while ((n = ::read(sync_pipe[0], &go, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) ::_exit(127);  // the launcher gave up on us
    ::execve(path, argv.data(), envp.data());
    die(2);
  }
  int fork_errno = errno;
  ::close(sync_pipe[0]);
  ::close(err_pipe[1]);
  if (devnull >= 0) ::close(devnull);
  auto closeFd = [](int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  };
  int pidfd = -1;
  auto abandon = [&](const Status& why) {
    closeFd(sync_pipe[1]);
    closeFd(err_pipe[0]);
    closeFd(pidfd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    finish(why);
  };
  if (pid < 0) return abandon(Status::fromErrno("launcher: fork for " + job.name, fork_errno));
  ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before anyone signals it
  pidfd = pidfdOpen(pid);
  if (pidfd < 0) {
    int err = errno;
    return abandon(Status::fromErrno("launcher: pidfd_open for " + job.name, err));
  }
  if (job.cgroup) {
    Status s = job.cgroup->addProcess(pid);
    if (!s.isOk()) return abandon(s.withContext("launcher: placing " + job.name + " in its cgroup"));
  }
  SteadyClock::time_point started = SteadyClock::now();
  char go = 1;
  if (::write(sync_pipe[1], &go, 1) != 1) {
    int err = errno;
    return abandon(Status::fromErrno("launcher: releasing " + job.name, err));
  }
  closeFd(sync_pipe[1]);

  // EOF on the error pipe means the exec succeeded (the pipe is close-on-exec).
  pollfd pfd{err_pipe[0], POLLIN, 0};
  int ready;
  while ((ready = ::poll(&pfd, 1, static_cast<int>(std::chrono::milliseconds(kExecTimeout).count()))) < 0 &&
         errno == EINTR) {
  }
  ChildError ce{};
  ssize_t n = 0;
  if (ready > 0) {
    while ((n = ::read(err_pipe[0], &ce, sizeof ce)) < 0 && errno == EINTR) {
    }
  }
  if (ready <= 0 || n != 0) {
    if (ready <= 0)
      return abandon(Status::timeout("launcher: " + job.name + " did not exec " + job.binary + " within " +
                                     std::to_string(std::chrono::seconds(kExecTimeout).count()) + " s"));
    static const char* kStage[] = {"prctl(PR_SET_PDEATHSIG)", "redirecting stdout/stderr", "exec",
                                   "entering its network namespace for"};
    std::string stage = (ce.stage >= 0 && ce.stage <= 3) ? kStage[ce.stage] : "setup";
    return abandon(Status::invalidArgument("launcher: " + job.name + ": " + stage + " " + job.binary + ": " +
                                           errnoText(ce.err)));
  }
  closeFd(err_pipe[0]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(job.name);
    node.pid = pid;
    node.pidfd = pidfd;
    node.running = true;
    node.starting = false;
    node.stop_requested = false;
    node.started = started;
    ++node.incarnation;
  }
  finish(pid);
}

void Launcher::reap(const std::string& name) {
  pid_t pid;
  NodeCgroup* cg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(name);
    pid = node.pid;
    cg = node.cgroup.get();
  }
  // The leader is a zombie until we reap it, so its pid (= the pgid) cannot be reused meanwhile: killing the
  // rest of the node's process group (and cgroup) is safe here, and a node's helpers never outlive it.
  ::killpg(pid, SIGKILL);
  if (cg) {
    auto procs = cg->processes();
    if (procs.isOk())
      for (pid_t p : *procs) ::kill(p, SIGKILL);
  }
  siginfo_t info{};
  int rc;
  while ((rc = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED)) < 0 && errno == EINTR) {
  }
  ExitInfo notice;
  notice.name = name;
  notice.pid = pid;
  notice.at = SteadyClock::now();
  if (rc < 0) {  // someone else reaped our child (see the contract): its status is lost
    LOG(ERROR) << "launcher: waitid for " << name << " (pid " << pid << "): " << errnoText(errno)
               << "; reporting exit code -1";
    notice.code = -1;
  } else {
    notice.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
    (notice.signaled ? notice.signal : notice.code) = info.si_status;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Node& node = *nodes_.at(name);
    notice.incarnation = node.incarnation;
    notice.requested = node.stop_requested;
    notice.lifetime = notice.at - node.started;
    ::close(node.pidfd);
    node.pidfd = -1;
    node.running = false;
    node.stop_requested = false;
    node.last_exit = notice;
    exited_cv_.notify_all();
  }
  if (options_.on_exit) options_.on_exit(notice);  // outside mu_: it may call back into the launcher
}

void Launcher::loop() {
  for (;;) {
    std::vector<pollfd> fds{{event_fd_, POLLIN, 0}};
    std::vector<std::string> watched;
    std::deque<std::shared_ptr<SpawnJob>> jobs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_ && spawn_queue_.empty()) return;
      for (const auto& [name, node] : nodes_) {
        if (node->running && node->pidfd >= 0) {
          fds.push_back({node->pidfd, POLLIN, 0});
          watched.push_back(name);
        }
      }
    }
    // Woken by the eventfd (new job, new node, shutdown) or a pidfd (a node exited): no timeout needed.
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      LOG(FATAL) << "launcher: poll: " << errnoText(errno);
    }
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      ssize_t n = ::read(event_fd_, &count, sizeof count);
      (void)n;
      std::lock_guard<std::mutex> lock(mu_);
      jobs.swap(spawn_queue_);
    }
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) reap(watched[i - 1]);
    for (auto& job : jobs) spawn(*job);
  }
}

Result<pid_t> Launcher::pid(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::notFound("launcher: no node named " + name);
  if (!it->second->running) return Status::unavailable("launcher: node " + name + " is not running");
  return it->second->pid;
}

bool Launcher::running(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it != nodes_.end() && it->second->running;
}

int Launcher::incarnation(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? 0 : it->second->incarnation;
}

Status Launcher::signal(const std::string& name, int sig) {
  std::lock_guard<std::mutex> lock(mu_);  // held so that the group cannot be reaped (and its id reused) meanwhile
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::notFound("launcher: signal: no node named " + name);
  if (!it->second->running) return Status::unavailable("launcher: signal: node " + name + " is not running");
  if (::killpg(it->second->pid, sig) != 0) {
    int err = errno;
    return Status::fromErrno("launcher: killpg(" + std::to_string(it->second->pid) + ", " + std::to_string(sig) +
                           ") for " + name + "", err);
  }
  if (sig == SIGKILL && it->second->cgroup) {  // a frozen task dies only once thawed
    Result<bool> frozen = it->second->cgroup->isFrozen();
    if (frozen.isOk() && *frozen) return it->second->cgroup->thaw().withContext(name + ": thaw after SIGKILL");
  }
  return Status::ok();
}

Result<ExitInfo> Launcher::waitExit(const std::string& name, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return Status::notFound("launcher: waitExit: no node named " + name);
  Node& node = *it->second;
  if (!exited_cv_.wait_until(lock, deadline, [&] { return !node.running && !node.starting; }))
    return Status::timeout("launcher: node " + name + " (pid " + std::to_string(node.pid) + ") still running");
  if (!node.last_exit) return Status::unavailable("launcher: node " + name + " never ran");
  return *node.last_exit;
}

Status Launcher::stopAll(std::chrono::milliseconds grace) {
  std::vector<NodeCgroup*> cgroups;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, node] : nodes_)
      if (node->running && node->cgroup) cgroups.push_back(node->cgroup.get());
  }
  for (NodeCgroup* cg : cgroups) (void)cg->thaw();  // a frozen node would sit on its SIGTERM
  auto none_running = [&] {
    for (const auto& [name, node] : nodes_)
      if (node->running) return false;
    return true;
  };
  std::unique_lock<std::mutex> lock(mu_);
  for (auto& [name, node] : nodes_) {
    if (!node->running) continue;
    node->stop_requested = true;
    ::killpg(node->pid, SIGTERM);  // under mu_: not reaped yet, so the pgid is still the node's
    ::killpg(node->pid, SIGCONT);  // a SIGSTOPped node acts on SIGTERM only once continued
  }
  if (none_running()) return Status::ok();
  if (exited_cv_.wait_until(lock, SteadyClock::now() + grace, none_running)) return Status::ok();
  for (auto& [name, node] : nodes_)
    if (node->running) ::killpg(node->pid, SIGKILL);  // under mu_: not reaped yet, so the pgid is still ours
  if (exited_cv_.wait_until(lock, SteadyClock::now() + kKillTimeout, none_running)) return Status::ok();
  std::string left;
  for (const auto& [name, node] : nodes_)
    if (node->running) left += " " + name + "(pid " + std::to_string(node->pid) + ")";
  return Status::timeout("launcher: still running after SIGKILL:" + left);
}

NodeCgroup* Launcher::cgroup(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second->cgroup.get();
}

std::string Launcher::logPath(const std::string& name) const { return options_.log_dir + "/" + name + ".log"; }

std::vector<std::string> Launcher::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, node] : nodes_) out.push_back(name);
  return out;
}

}  // namespace chaosbed
