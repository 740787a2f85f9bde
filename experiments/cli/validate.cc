// `chaosbed validate FILE...`: parses and checks experiment specs and suite files without running anything.
// The file's `kind` picks the parser (Suite: experiments/suite/suite.h, which checks every scenario spec it
// names too; anything else: an experiment spec).

#include <cstdio>
#include <string>

#include "core/config/config.h"
#include "experiments/cli/cli.h"
#include "experiments/spec/spec.h"
#include "experiments/suite/suite.h"

namespace chaosbed::cli {
namespace {

// True when the file is a YAML map whose kind is Suite. A file that does not load is left to the experiment
// parser, which reports why.
bool isSuite(const std::string& path) {
  config::Diagnostics ignored;
  auto doc = config::loadYamlFile(path, &ignored);
  if (!doc || !doc->IsMap()) return false;
  const YAML::Node kind = (*doc)["kind"];
  return kind && kind.IsScalar() && kind.Scalar() == "Suite";
}

}  // namespace

int validate(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: chaosbed validate SPEC.yaml...\n"
                 "Checks each experiment spec (kind: Experiment) or suite (kind: Suite, with the scenario specs it\n"
                 "names) and prints `ok: FILE`, or every problem as `file:line:col: field: message` on stderr\n"
                 "(exit %d; a file that is not there: exit %d).\n",
                 kExitInvalidSpec, kExitUsage);
    return kExitUsage;
  }
  int exit_code = kExitPass;
  for (int i = 1; i < argc; ++i) {
    if (fileMissing("validate", argv[i])) {
      if (exit_code == kExitPass) exit_code = kExitUsage;  // an invalid spec among them says more
      continue;
    }
    config::Diagnostics diagnostics;
    bool ok = false;
    if (isSuite(argv[i])) {
      ok = suite::readSuite(argv[i], &diagnostics).has_value();
    } else if (auto spec = spec::readExperimentSpec(argv[i], repeatedFlag("set"), &diagnostics)) {
      spec::checkDataFiles(argv[i], *spec, &diagnostics);  // as `run` would find them
      ok = diagnostics.empty();
    }
    if (ok) {
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
