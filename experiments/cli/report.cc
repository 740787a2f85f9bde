// `chaosbed report DIR`: (re)writes DIR/report.html from a results directory (experiments/report/report.h).

#include <cstdio>

#include "experiments/cli/cli.h"
#include "experiments/report/report.h"

namespace chaosbed::cli {

int runReport(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: chaosbed report RESULTS_DIR\n");
    return kExitUsage;
  }
  const std::string dir = argv[1];
  if (Status s = report::writeReport(dir); !s.isOk()) {
    std::fprintf(stderr, "chaosbed report: %s\n", s.message().c_str());
    // A missing summary.json means DIR is not a results directory (usage); a malformed one is bad input.
    if (s.code() == StatusCode::kNotFound) return kExitUsage;
    return s.code() == StatusCode::kInvalidArgument ? kExitInvalidSpec : kExitInfrastructure;
  }
  std::printf("%s/report.html\n", dir.c_str());
  return kExitPass;
}

}  // namespace chaosbed::cli
