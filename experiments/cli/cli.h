#pragma once
// The subcommands of the `chaosbed` binary. Each takes the arguments left after gflags removed the flags
// (argv[0] is the subcommand's name) and returns the process exit code (exit_codes.h).

namespace chaosbed::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitPass = 0;
inline constexpr int kExitAssertionFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInvalidSpec = 3;
inline constexpr int kExitInfrastructure = 4;
inline constexpr int kExitInterrupted = 130;  // SIGINT; 143 for SIGTERM

}  // namespace chaosbed::cli
