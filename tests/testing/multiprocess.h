#pragma once
// MultiProcess: a fork fixture for multi-process tests (Gloo style). The parent starts a bootstrap
// StoreServer in a helper process of its own (the parent stays single-threaded), then forks one child
// process per rank; each child runs a function with its ChildContext and
// exits with the function's return value. Children report progress and results to the parent over a pipe,
// one line per report ("step 3", "result PeerLost 1 812us"); the parent waits for a given report with a
// deadline, injects faults at those protocol points (SIGKILL, SIGSTOP/SIGCONT), waits for exits with a
// deadline, and on destruction kills and reaps everything still running, so no process outlives a test.
//
// Usage:
//   testing::MultiProcess mp;                                  // store server on 127.0.0.1, port chosen
//   ASSERT_TRUE(mp.spawnAll(2, [](testing::ChildContext& c) {
//     auto t = createUcxTransport(c.store(), {...c.rank()...});
//     if (!t.isOk()) return c.fail(t.status().toString());
//     c.report("connected");
//     ...
//     return 0;
//   }).isOk());
//   ASSERT_TRUE(mp.waitFor(1, "connected", deadlineIn(10s)).isOk());
//   mp.signal(1, SIGKILL);
//   EXPECT_EQ(mp.waitExit(0, deadlineIn(10s)).value(), 0);
//
// Rules for child functions: they run in a forked copy of the test process that holds only one thread, so
// they must not use the parent's threads or the parent's StoreServer object (use c.store(), a client
// connected after the fork), and must not initialise UCX/CUDA in the parent before forking. gtest
// assertions inside a child do not reach the parent: return non-zero (c.fail(msg) reports "FAIL msg" and
// returns 1) and assert on exit codes and reports in the parent. Every fd except stdin/stdout/stderr and
// the child's report pipe is closed in the child, so pipes and sockets of other ranks never leak into it.
// Children die with the parent (PR_SET_PDEATHSIG). Not thread-safe: use one MultiProcess from one thread.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

#include "transports/bootstrap/store.h"
#include "transports/transport.h"

namespace chaosbed::testing {

class ChildContext {
 public:
  ChildContext(int rank, int size, int incarnation, std::string store_address, const Secret& secret, int report_fd)
      : rank_(rank), size_(size), incarnation_(incarnation), store_address_(std::move(store_address)),
        secret_(secret), report_fd_(report_fd) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  // 0 for the first process of a rank, 1 for its first replacement, ...
  int incarnation() const { return incarnation_; }
  const std::string& storeAddress() const { return store_address_; }
  // The fixture's store secret (inherited through fork).
  const Secret& secret() const { return secret_; }
  // A Store client to the parent's server, connected on first use (exits the child with 100 if that fails).
  Store& store();
  // Sends one line to the parent (newlines inside are replaced by spaces). Atomic below 4 KiB.
  void report(const std::string& line) const;
  // report("FAIL " + why) and return 1: `return c.fail("...")` from a child function.
  int fail(const std::string& why) const;

 private:
  int rank_, size_, incarnation_;
  std::string store_address_;
  Secret secret_;
  int report_fd_;
  std::unique_ptr<Store> store_;
};

using ChildFunction = std::function<int(ChildContext&)>;

// The child's rank of a UCX transport over the parent's store (keys under `prefix`), connecting within 20 s;
// reports "FAIL create: ..." and exits the child with 2 when it cannot be created.
std::unique_ptr<Transport> ucxTransport(ChildContext& c, const std::string& prefix);

class MultiProcess {
 public:
  // Starts the StoreServer (CHECK-fails if it cannot: a test environment problem).
  MultiProcess();
  ~MultiProcess();  // SIGCONT + SIGKILL + reap every child still running
  MultiProcess(const MultiProcess&) = delete;
  MultiProcess& operator=(const MultiProcess&) = delete;

  const std::string& storeAddress() const { return store_address_; }
  const Secret& secret() const { return secret_; }
  // A parent-side client of the same store (e.g. to read what children published).
  Store& store();

  // Forks ranks 0..size-1 running fn.
  Status spawnAll(int size, const ChildFunction& fn);
  // Forks one child for rank (a replacement when a previous child of that rank has exited: its incarnation
  // is one more). The previous process of the rank must have been reaped (waitExit).
  Status spawn(int rank, int size, const ChildFunction& fn);

  // Reads rank's reports until one starts with `prefix`; returns that line. Earlier lines are kept
  // (reports()). Unavailable when the child closed its pipe (exited) first, Timeout at the deadline.
  Result<std::string> waitFor(int rank, const std::string& prefix, Deadline deadline);
  // Every line received from rank's current process so far.
  const std::vector<std::string>& reports(int rank) const;

  // Sends sig to rank's process. SIGSTOP and SIGCONT return once the child has actually stopped/continued
  // (or exited); SIGKILL returns at once (use waitExit to reap).
  Status signal(int rank, int sig);
  // Waits for rank's process to exit and reaps it: its exit code, or 128 + signal number if killed.
  Result<int> waitExit(int rank, Deadline deadline);
  // waitExit for every running child; the first failure, or OK with exit codes in `codes` (by rank; -1 for
  // ranks that were not running, e.g. already reaped).
  Status waitAllExit(Deadline deadline, std::vector<int>* codes);
  pid_t pid(int rank) const;

 private:
  struct Child {
    pid_t pid = -1;
    int pipe_fd = -1;     // read end
    int incarnation = -1;
    std::string partial;  // bytes after the last newline
    std::vector<std::string> lines;
    size_t consumed = 0;  // lines already matched by waitFor
    bool eof = false;
  };
  Child& child(int rank);
  void readAvailable(Child& c);
  void closeChild(Child& c);

  pid_t store_pid_ = -1;  // the process that hosts the StoreServer
  Secret secret_ = *Secret::generate();  // made before any fork: every rank inherits it
  std::string store_address_;
  std::unique_ptr<Store> store_;
  std::vector<Child> children_;
};

}  // namespace chaosbed::testing
