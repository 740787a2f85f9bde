// `chaosbed bench NAME [--json]`: micro-benchmarks, one function per NAME. Add a line to kBenches for a
// new one.

#include <cstdio>
#include <cstring>

#include "experiments/cli/cli.h"

namespace chaosbed::cli {
namespace {

struct Bench {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Bench kBenches[] = {
    {"train", "MLP training step on one thread: samples/s and GFLOP/s", runBenchTrain},
    {"p2p", "UCX transport between two processes: bandwidth and latency per message size", runBenchP2p},
    {"allreduce", "ring all-reduce over UCX, --ranks N processes: time, algbw and busbw per size", runBenchAllreduce},
};

int usage() {
  std::fprintf(stderr, "usage: chaosbed bench NAME [--json]\n");
  for (const Bench& b : kBenches) std::fprintf(stderr, "  %-10s %s\n", b.name, b.summary);
  return kExitUsage;
}

}  // namespace

int runBench(int argc, char** argv) {
  if (argc < 2) return usage();
  for (const Bench& b : kBenches)
    if (std::strcmp(argv[1], b.name) == 0) return b.run(argc - 1, argv + 1);
  std::fprintf(stderr, "chaosbed bench: unknown benchmark '%s'\n", argv[1]);
  return usage();
}

}  // namespace chaosbed::cli
