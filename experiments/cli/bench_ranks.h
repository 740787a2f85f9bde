#pragma once
// Runs a benchmark's ranks as forked processes on loopback, with a bootstrap Store server in the parent.

#include <functional>
#include <string>

#include "transports/bootstrap/secret.h"

namespace chaosbed::cli {

// Whether the benchmark's transports use shared memory (--bench_shm; UcxOptions::shared_memory).
bool benchSharedMemory();

// Forks `ranks` children, then starts the Store server and hands each child its address through a pipe:
// the children are forked while the parent has a single thread, so none inherits a lock (malloc's, say)
// held by the server's thread. Each child runs rank_main(rank, store_address, secret) (the run's secret, made before the fork) and exits with its result,
// dying with the parent (PR_SET_PDEATHSIG). When a rank fails, the others are killed (they would only wait
// for their deadlines). Returns kExitPass when every rank passed, else kExitInfrastructure; `who` prefixes
// the parent's own error messages.
int runRanks(const char* who, int ranks, const std::function<int(int rank, const std::string& store_address, const Secret& secret)>& rank_main);

}  // namespace chaosbed::cli
