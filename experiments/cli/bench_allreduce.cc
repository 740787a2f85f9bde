// `chaosbed bench allreduce [--ranks N] [--json] [--bench_allreduce_max_bytes B] [--bench_allreduce_chunk_bytes C]
// [--bench_allreduce_algorithm auto|ring|halving_doubling|recursive_doubling|direct]`: the all-reduce of transports/collective.h (float32 sum) over the UCX transport, N ranks as separate
// processes on loopback (forked; the store server runs in the parent, see bench_ranks.h). Sizes go from 4 KiB to the maximum
// (64 MiB) in powers of 4. Per size, after warm-up iterations, every rank times its iterations; the time is
// the largest per-iteration mean over the ranks (as nccl-tests), and
//   algbw = bytes / time,  busbw = algbw * 2(N-1)/N   (GB/s = 1e9 B/s).
// --json prints one object per size: {"bytes":..,"time_us":..,"algbw_gbps":..,"busbw_gbps":..}; otherwise a
// table. Before timing, one all-reduce per size is checked against the known sum; a wrong sum fails the run.

#include <gflags/gflags.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/cli/bench_ranks.h"
#include "experiments/cli/cli.h"
#include "transports/bootstrap/store.h"
#include "transports/collective.h"
#include "transports/ucx/transport.h"

DEFINE_int32(ranks, 4, "number of ranks (processes), 2..64");
DEFINE_uint64(bench_allreduce_max_bytes, 64ull << 20, "largest buffer in bytes (4 KiB..1 GiB)");
DEFINE_uint64(bench_allreduce_chunk_bytes, 0, "pipeline chunk in bytes (0: the library default)");
DEFINE_string(bench_allreduce_algorithm, "auto", "auto (by size, as training uses it), ring, halving_doubling, recursive_doubling or direct");
DECLARE_bool(json);

namespace chaosbed::cli {
namespace {

using std::chrono::seconds;
constexpr auto kOpTimeout = seconds(60);

std::optional<AllreduceAlgorithm> parseAlgorithm(const std::string& name) {
  if (name == "auto") return AllreduceAlgorithm::kAuto;
  if (name == "ring") return AllreduceAlgorithm::kRing;
  if (name == "halving_doubling") return AllreduceAlgorithm::kHalvingDoubling;
  if (name == "recursive_doubling") return AllreduceAlgorithm::kRecursiveDoubling;
  if (name == "direct") return AllreduceAlgorithm::kDirect;
  return std::nullopt;
}

struct Row {
  size_t bytes;
  double time_us;
};

Status checkSum(Communicator& comm, std::vector<float>& buf, size_t count, const CollectiveOptions& options) {
  std::span<float> data(buf.data(), count);
  const int me = comm.transport->rank();
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(me + 1) + static_cast<float>(i % 7);
  CHAOSBED_RETURN_IF_ERROR(allreduce(comm, data, deadlineIn(kOpTimeout), options));
  const double n = comm.size();
  for (size_t i = 0; i < count; ++i) {
    const double want = n * (n + 1) / 2 + n * static_cast<double>(i % 7);
    if (std::fabs(data[i] - want) > 1e-3 * want)
      return Status::internal("allreduce of " + std::to_string(count * sizeof(float)) + " bytes: element " +
                              std::to_string(i) + " is " + std::to_string(data[i]) + ", expected " +
                              std::to_string(want));
  }
  return Status::ok();
}

Result<std::vector<Row>> measure(Communicator& comm, const std::vector<size_t>& sizes,
                                 const CollectiveOptions& options) {
  std::vector<Row> rows;
  std::vector<float> buf(sizes.back() / sizeof(float));
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    CHAOSBED_RETURN_IF_ERROR(checkSum(comm, buf, count, options));
    std::fill(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(count), 0.0f);  // no overflow, no denormals
    std::span<float> data(buf.data(), count);
    // About 256 MiB reduced per size, between 5 and 1000 iterations.
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / bytes, 5, 1000));
    for (int i = 0; i < std::max(iters / 10, 2); ++i)
      CHAOSBED_RETURN_IF_ERROR(allreduce(comm, data, deadlineIn(kOpTimeout), options));
    CHAOSBED_RETURN_IF_ERROR(barrier(comm, deadlineIn(kOpTimeout)));
    const auto start = SteadyClock::now();
    for (int i = 0; i < iters; ++i) CHAOSBED_RETURN_IF_ERROR(allreduce(comm, data, deadlineIn(kOpTimeout), options));
    const double mean_us = std::chrono::duration<double, std::micro>(SteadyClock::now() - start).count() / iters;
    // The slowest rank's mean, gathered with the library's own allgather.
    std::vector<double> all(static_cast<size_t>(comm.size()));
    CHAOSBED_RETURN_IF_ERROR(allgather(comm, std::as_bytes(std::span(&mean_us, 1)),
                                       std::as_writable_bytes(std::span(all)), deadlineIn(kOpTimeout)));
    rows.push_back({bytes, *std::max_element(all.begin(), all.end())});
  }
  return rows;
}

void print(const std::vector<Row>& rows, int ranks, const std::string& transport_name) {
  const double factor = 2.0 * (ranks - 1) / ranks;
  if (!FLAGS_json) {
    std::printf("chaosbed bench allreduce: %s all-reduce, float32 sum, %d ranks in separate processes, %s\n",
                FLAGS_bench_allreduce_algorithm.c_str(), ranks, transport_name.c_str());
    std::printf("%12s %12s %12s %12s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  }
  for (const Row& r : rows) {
    const double algbw = static_cast<double>(r.bytes) / (r.time_us * 1e-6) / 1e9;
    if (FLAGS_json) {
      nlohmann::json j{{"bytes", r.bytes}, {"time_us", r.time_us}, {"algbw_gbps", algbw},
                       {"busbw_gbps", algbw * factor}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%12zu %12.1f %12.3f %12.3f\n", r.bytes, r.time_us, algbw, algbw * factor);
    }
  }
  std::fflush(stdout);
}

// One rank, in a forked child: returns the process exit code. Rank 0 prints the results.
int runRank(int rank, int ranks, const std::string& store_address, const Secret& secret, const std::vector<size_t>& sizes) {
  auto fail = [rank](const Status& s) {
    std::fprintf(stderr, "chaosbed bench allreduce: rank %d: %s\n", rank, s.message().c_str());
    return kExitInfrastructure;
  };
  auto store = connectStore(store_address, secret, deadlineIn(seconds(10)));
  if (!store.isOk()) return fail(store.status());
  UcxOptions ucx;
  ucx.rank = rank;
  ucx.size = ranks;
  ucx.secret = secret;
  ucx.prefix = "bench-allreduce";
  ucx.shared_memory = benchSharedMemory();
  auto transport = createUcxTransport(**store, ucx);
  if (!transport.isOk()) return fail(transport.status());
  auto comm = worldCommunicator(transport->get());
  if (!comm.isOk()) return fail(comm.status());
  CollectiveOptions options;
  if (FLAGS_bench_allreduce_chunk_bytes > 0) options.chunk_bytes = FLAGS_bench_allreduce_chunk_bytes;
  options.algorithm = *parseAlgorithm(FLAGS_bench_allreduce_algorithm);
  auto rows = measure(*comm, sizes, options);
  if (!rows.isOk()) return fail(rows.status());
  if (rank == 0) print(*rows, ranks, (*transport)->name());
  // Nobody closes its transport while a peer may still be inside the last allgather (to which an exited
  // rank looks dead): leave once every rank has said so in the store.
  if (Status s = (*store)->set("bench-allreduce/finished/" + std::to_string(rank), "1"); !s.isOk()) return fail(s);
  for (int r = 0; r < ranks; ++r)
    if (auto v = (*store)->get("bench-allreduce/finished/" + std::to_string(r), deadlineIn(kOpTimeout)); !v.isOk())
      return fail(v.status());
  return kExitPass;
}

}  // namespace

int runBenchAllreduce(int argc, char** argv) {
  if (argc != 1) {
    std::fprintf(stderr, "chaosbed bench allreduce: unexpected argument '%s'\n", argv[1]);
    return kExitUsage;
  }
  if (FLAGS_ranks < 2 || FLAGS_ranks > 64) {
    std::fprintf(stderr, "chaosbed bench allreduce: --ranks=%d: must be in 2..64\n", FLAGS_ranks);
    return kExitUsage;
  }
  if (FLAGS_bench_allreduce_max_bytes < 4096 || FLAGS_bench_allreduce_max_bytes > (size_t{1} << 30)) {
    std::fprintf(stderr, "chaosbed bench allreduce: --bench_allreduce_max_bytes=%llu: must be in 4096..2^30\n",
                 static_cast<unsigned long long>(FLAGS_bench_allreduce_max_bytes));
    return kExitUsage;
  }
  if (!parseAlgorithm(FLAGS_bench_allreduce_algorithm)) {
    std::fprintf(stderr, "chaosbed bench allreduce: --bench_allreduce_algorithm=%s: must be auto, ring, halving_doubling, recursive_doubling or direct\n",
                 FLAGS_bench_allreduce_algorithm.c_str());
    return kExitUsage;
  }
  const int ranks = FLAGS_ranks;
  std::vector<size_t> sizes;
  for (size_t s = 4096; s <= FLAGS_bench_allreduce_max_bytes; s *= 4) sizes.push_back(s);

  return runRanks("chaosbed bench allreduce", ranks, [&](int rank, const std::string& address, const Secret& secret) { return runRank(rank, ranks, address, secret, sizes); });
}

}  // namespace chaosbed::cli
