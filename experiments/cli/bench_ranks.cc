#include "experiments/cli/bench_ranks.h"

#include <fcntl.h>
#include <gflags/gflags.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "experiments/cli/cli.h"
#include "transports/bootstrap/store.h"

DEFINE_bool(bench_shm, true,
            "let UCX use shared memory (its mm FIFOs and cross-memory attach), as ucx_perftest does; "
            "training nodes run without it, since a peer killed mid-send can wedge or abort its partner "
            "there; --bench_shm=false measures the nodes' configuration (TCP over loopback)");

namespace chaosbed::cli {

bool benchSharedMemory() { return FLAGS_bench_shm; }

namespace {

// Reads the whole address the parent writes before closing its end; empty when the parent gave up.
std::string readAddress(int fd) {
  std::string address;
  char buf[256];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      address.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      return address;
    }
  }
}

}  // namespace

int runRanks(const char* who, int ranks, const std::function<int(int rank, const std::string& store_address, const Secret& secret)>& rank_main) {
  std::fflush(stdout);
  auto secret = Secret::generate();
  if (!secret.isOk()) {
    std::fprintf(stderr, "%s: %s\n", who, secret.status().message().c_str());
    return kExitInfrastructure;
  }
  std::vector<pid_t> pids;
  std::vector<int> address_pipes;  // write ends, one per child
  auto killAll = [&pids](pid_t except) {
    for (pid_t p : pids)
      if (p != except) ::kill(p, SIGKILL);
  };
  auto abandon = [&](const char* what) {
    std::fprintf(stderr, "%s: %s: %s\n", who, what, std::strerror(errno));
    killAll(-1);
    for (int fd : address_pipes) ::close(fd);
    for (pid_t p : pids) ::waitpid(p, nullptr, 0);
    return kExitInfrastructure;
  };
  for (int rank = 0; rank < ranks; ++rank) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return abandon("pipe");
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return abandon("fork");
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(fds[1]);
      for (int fd : address_pipes) ::close(fd);
      const std::string address = readAddress(fds[0]);
      ::close(fds[0]);
      if (address.empty()) _exit(kExitInfrastructure);
      _exit(rank_main(rank, address, *secret));
    }
    ::close(fds[0]);
    pids.push_back(pid);
    address_pipes.push_back(fds[1]);
  }

  auto server = startStoreServer("127.0.0.1:0", *secret);
  if (!server.isOk()) {
    std::fprintf(stderr, "%s: %s\n", who, server.status().message().c_str());
    killAll(-1);
  }
  const std::string address = server.isOk() ? (*server)->address() : std::string();
  for (int fd : address_pipes) {
    if (!address.empty() && ::write(fd, address.data(), address.size()) != static_cast<ssize_t>(address.size()))
      std::fprintf(stderr, "%s: handing the store address to a rank: %s\n", who, std::strerror(errno));
    ::close(fd);
  }

  int result = server.isOk() ? kExitPass : kExitInfrastructure;
  for (int left = ranks; left > 0; --left) {
    int ws = 0;
    pid_t pid = ::waitpid(-1, &ws, 0);
    if (pid < 0) break;
    int code = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    if (code != 0 && result == kExitPass) {
      result = kExitInfrastructure;
      killAll(pid);
    }
  }
  return result;
}

}  // namespace chaosbed::cli
