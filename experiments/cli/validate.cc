// `chaosbed validate SPEC...`: parses and checks experiment specs without running anything.

#include <cstdio>
#include <string>

#include "experiments/cli/cli.h"
#include "experiments/spec/spec.h"

namespace chaosbed::cli {

int validate(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: chaosbed validate SPEC.yaml...\n"
                 "Checks each experiment spec and prints `ok: FILE`, or every problem as\n"
                 "`file:line:col: field: message` on stderr (exit %d).\n",
                 kExitInvalidSpec);
    return kExitUsage;
  }
  int exit_code = kExitPass;
  for (int i = 1; i < argc; ++i) {
    config::Diagnostics diagnostics;
    if (spec::readExperimentSpec(argv[i], {}, &diagnostics)) {
      std::printf("ok: %s\n", argv[i]);
      continue;
    }
    std::fputs(diagnostics.toString().c_str(), stderr);
    exit_code = kExitInvalidSpec;
  }
  std::fflush(stdout);
  return exit_code;
}

}  // namespace chaosbed::cli
