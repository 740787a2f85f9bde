#pragma once
// Command: runs the chaosbed binary (or any program) as a child process for end-to-end tests, with its
// stdout and stderr on a pipe the test reads line by line. The child leads its own process group; the
// destructor SIGKILLs the group if it is still running, so a failed test leaves no process behind.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "transports/transport.h"

namespace chaosbed::testing {

class Command {
 public:
  explicit Command(std::vector<std::string> argv);
  ~Command();
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until a line containing `needle` arrives (returns it) or the deadline / end of output.
  std::optional<std::string> waitForLine(const std::string& needle, Deadline deadline);
  // Waits for exit; returns the exit status (128 + signal when killed), or nullopt at the deadline.
  std::optional<int> wait(Deadline deadline);
  void signal(int sig);
  // Everything the child printed so far.
  const std::string& output() const { return output_; }

 private:
  bool readSome(Deadline deadline);  // false at end of output or deadline

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
  size_t scanned_ = 0;
  std::optional<int> status_;
};

// The path of the built chaosbed binary.
std::string chaosbedBinary();
// A fresh empty directory under the system temp dir.
std::string makeTempDir(const std::string& name);
// A whole file's contents ("" when it cannot be read).
std::string readFile(const std::string& path);
// Pids of running processes whose command line contains `needle` (orphan checks).
std::vector<pid_t> processesMentioning(const std::string& needle);

}  // namespace chaosbed::testing
