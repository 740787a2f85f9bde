// Two ranks, each its own process, sum a vector with chaosbed's ring all-reduce over UCX, using only the
// installed headers and libraries. Prints "allreduce ok: ..." and exits 0 when both ranks got the right sum.

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "transports/bootstrap/secret.h"
#include "transports/bootstrap/store.h"
#include "transports/collective.h"
#include "transports/ucx/transport.h"

using namespace chaosbed;

namespace {

constexpr int kRanks = 2;
constexpr size_t kFloats = 1 << 16;

int rankMain(int rank, int address_fd, const Secret& secret) {
  char buf[256] = {};
  const ssize_t n = ::read(address_fd, buf, sizeof buf - 1);
  if (n <= 0) return 2;
  auto store = connectStore(std::string(buf, size_t(n)), secret, deadlineIn(std::chrono::seconds(10)));
  if (!store.isOk()) return std::fprintf(stderr, "rank %d: %s\n", rank, store.status().toString().c_str()), 3;
  UcxOptions options;
  options.rank = rank;
  options.size = kRanks;
  options.secret = secret;
  options.prefix = "consumer";
  auto transport = createUcxTransport(**store, options);
  if (!transport.isOk()) return std::fprintf(stderr, "rank %d: %s\n", rank, transport.status().toString().c_str()), 4;
  auto comm = worldCommunicator(transport->get());
  if (!comm.isOk()) return 5;
  std::vector<float> data(kFloats, float(rank + 1));
  if (Status s = allreduce(*comm, data, deadlineIn(std::chrono::seconds(30))); !s.isOk())
    return std::fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str()), 6;
  for (float v : data)
    if (v != 3.0f) return std::fprintf(stderr, "rank %d: got %g, not 3\n", rank, double(v)), 7;
  // Leave only once both are done, so that neither sees the other vanish mid-collective.
  if (!(*store)->set("consumer/done/" + std::to_string(rank), "1").isOk()) return 8;
  for (int r = 0; r < kRanks; ++r)
    if (!(*store)->get("consumer/done/" + std::to_string(r), deadlineIn(std::chrono::seconds(30))).isOk()) return 9;
  return 0;
}

}  // namespace

int main() {
  auto secret = Secret::generate();
  if (!secret.isOk()) return 1;
  // The ranks fork before anything starts threads; the parent then serves the store and hands out its address.
  std::vector<pid_t> pids;
  std::vector<int> writers;
  for (int rank = 0; rank < kRanks; ++rank) {
    int fds[2];
    if (::pipe(fds) != 0) return 1;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[1]);
      ::_exit(rankMain(rank, fds[0], *secret));
    }
    ::close(fds[0]);
    pids.push_back(pid);
    writers.push_back(fds[1]);
  }
  auto server = startStoreServer("127.0.0.1:0", *secret);
  if (!server.isOk()) return 1;
  const std::string address = (*server)->address();
  for (int fd : writers) {
    if (::write(fd, address.data(), address.size()) != ssize_t(address.size())) return 1;
    ::close(fd);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "rank process %d failed (status %d)\n", int(pid), status);
      ++failed;
    }
  }
  if (failed) return 1;
  std::printf("allreduce ok: %d ranks summed %zu floats\n", kRanks, kFloats);
  return 0;
}
