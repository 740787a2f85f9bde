// `chaosbed bench p2p [--json] [--bench_p2p_max_bytes N]`: point-to-point performance of the UCX transport
// between two ranks in separate processes on loopback (forked; the store server runs in the parent, see bench_ranks.h).
// For each size (8 B, then 4 KiB..max in powers of 4) it reports
//   bw_gbps: streaming bandwidth, rank 0 -> rank 1, a window of kWindow sends in flight (GB/s = 1e9 B/s),
//            timed at the sender up to a 1-byte acknowledgement of the last message (like ucx_perftest tag_bw);
//   lat_us:  half the round-trip time of a ping-pong of that size (like ucx_perftest tag_lat).
// --json prints one object per size: {"bytes":N,"bw_gbps":X,"lat_us":Y}; otherwise a table.

#include <gflags/gflags.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "experiments/cli/bench_ranks.h"
#include "experiments/cli/cli.h"
#include "transports/bootstrap/store.h"
#include "transports/ucx/transport.h"

DEFINE_uint64(bench_p2p_max_bytes, 64ull << 20, "largest message size (bytes; sizes go up in powers of 4 from 4 KiB)");
DECLARE_bool(json);

namespace chaosbed::cli {
namespace {

using std::chrono::seconds;

constexpr int kWindow = 16;
constexpr Tag kDataTag = 1, kAckTag = 2, kPingTag = 3, kPongTag = 4;
constexpr auto kOpTimeout = seconds(60);

struct Row {
  size_t bytes;
  double bw_gbps;
  double lat_us;
};

// Streams `iters` messages of `bytes` from rank 0 to rank 1; returns the seconds rank 0 measured.
Result<double> streamOnce(Transport& t, std::vector<std::byte>& buf, size_t bytes, int iters) {
  std::span<std::byte> msg(buf.data(), bytes);
  std::byte ack{};
  const int peer = 1 - t.rank();
  auto start = SteadyClock::now();
  for (int done = 0; done < iters;) {
    int n = std::min(kWindow, iters - done);
    std::vector<RequestPtr> reqs;
    for (int i = 0; i < n; ++i)
      reqs.push_back(t.rank() == 0 ? t.isend(peer, kDataTag, msg) : t.irecv(peer, kDataTag, msg));
    CHAOSBED_RETURN_IF_ERROR(waitAll(t, reqs, deadlineIn(kOpTimeout)));
    done += n;
  }
  if (t.rank() == 0) {
    CHAOSBED_RETURN_IF_ERROR(recv(t, peer, kAckTag, std::span(&ack, 1), deadlineIn(kOpTimeout)));
  } else {
    CHAOSBED_RETURN_IF_ERROR(send(t, peer, kAckTag, std::span(&ack, 1), deadlineIn(kOpTimeout)));
  }
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// `rounds` ping-pongs of `bytes`; returns the seconds of all rounds.
Result<double> pingPong(Transport& t, std::vector<std::byte>& buf, size_t bytes, int rounds) {
  std::span<std::byte> msg(buf.data(), bytes);
  const int peer = 1 - t.rank();
  auto start = SteadyClock::now();
  for (int i = 0; i < rounds; ++i) {
    if (t.rank() == 0) {
      RequestPtr pong = t.irecv(peer, kPongTag, msg);
      CHAOSBED_RETURN_IF_ERROR(send(t, peer, kPingTag, msg, deadlineIn(kOpTimeout)));
      CHAOSBED_RETURN_IF_ERROR(wait(t, pong, deadlineIn(kOpTimeout)));
    } else {
      CHAOSBED_RETURN_IF_ERROR(recv(t, peer, kPingTag, msg, deadlineIn(kOpTimeout)));
      CHAOSBED_RETURN_IF_ERROR(send(t, peer, kPongTag, msg, deadlineIn(kOpTimeout)));
    }
  }
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

Result<std::vector<Row>> measure(Transport& t, const std::vector<size_t>& sizes) {
  std::vector<Row> rows;
  std::vector<std::byte> buf(sizes.back(), std::byte{1});
  for (size_t bytes : sizes) {
    // About 1 GiB streamed (at least 32 and at most 20000 messages) and 128 MiB ping-ponged per size.
    int iters = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / bytes, 32, 20000));
    int rounds = static_cast<int>(std::clamp<size_t>((size_t{128} << 20) / bytes, 8, 20000));
    CHAOSBED_RETURN_IF_ERROR(streamOnce(t, buf, bytes, std::max(iters / 10, kWindow)).status());  // warm-up
    CHAOSBED_ASSIGN_OR_RETURN(double stream_s, streamOnce(t, buf, bytes, iters));
    CHAOSBED_RETURN_IF_ERROR(pingPong(t, buf, bytes, std::max(rounds / 10, 4)).status());  // warm-up
    CHAOSBED_ASSIGN_OR_RETURN(double pingpong_s, pingPong(t, buf, bytes, rounds));
    rows.push_back({bytes, static_cast<double>(bytes) * iters / stream_s / 1e9, pingpong_s / rounds / 2 * 1e6});
  }
  return rows;
}

// One rank, in a forked child: returns the process exit code. Rank 0 prints the results.
int runRank(int rank, const std::string& store_address, const Secret& secret, const std::vector<size_t>& sizes) {
  auto store = connectStore(store_address, secret, deadlineIn(seconds(10)));
  if (!store.isOk()) {
    std::fprintf(stderr, "chaosbed bench p2p: rank %d: %s\n", rank, store.status().message().c_str());
    return kExitInfrastructure;
  }
  UcxOptions options;
  options.rank = rank;
  options.size = 2;
  options.secret = secret;
  options.prefix = "bench-p2p";
  options.shared_memory = benchSharedMemory();
  auto transport = createUcxTransport(**store, options);
  if (!transport.isOk()) {
    std::fprintf(stderr, "chaosbed bench p2p: rank %d: %s\n", rank, transport.status().message().c_str());
    return kExitInfrastructure;
  }
  auto rows = measure(**transport, sizes);
  if (!rows.isOk()) {
    std::fprintf(stderr, "chaosbed bench p2p: rank %d: %s\n", rank, rows.status().message().c_str());
    return kExitInfrastructure;
  }
  if (rank != 0) return kExitPass;
  if (!FLAGS_json) {
    std::printf("chaosbed bench p2p: %s, 2 ranks in separate processes on loopback\n", (*transport)->name().c_str());
    std::printf("%12s %12s %12s\n", "bytes", "bw GB/s", "lat us");
  }
  for (const Row& r : *rows) {
    if (FLAGS_json) {
      nlohmann::json j{{"bytes", r.bytes}, {"bw_gbps", r.bw_gbps}, {"lat_us", r.lat_us}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%12zu %12.3f %12.3f\n", r.bytes, r.bw_gbps, r.lat_us);
    }
  }
  std::fflush(stdout);
  return kExitPass;
}

}  // namespace

int runBenchP2p(int argc, char** argv) {
  if (argc != 1) {
    std::fprintf(stderr, "chaosbed bench p2p: unexpected argument '%s'\n", argv[1]);
    return kExitUsage;
  }
  if (FLAGS_bench_p2p_max_bytes < 4096 || FLAGS_bench_p2p_max_bytes > (size_t{1} << 30)) {
    std::fprintf(stderr, "chaosbed bench p2p: --bench_p2p_max_bytes=%llu: must be in 4096..2^30\n",
                 static_cast<unsigned long long>(FLAGS_bench_p2p_max_bytes));
    return kExitUsage;
  }
  std::vector<size_t> sizes{8};
  for (size_t s = 4096; s <= FLAGS_bench_p2p_max_bytes; s *= 4) sizes.push_back(s);

  return runRanks("chaosbed bench p2p", 2, [&](int rank, const std::string& address, const Secret& secret) { return runRank(rank, address, secret, sizes); });
}

}  // namespace chaosbed::cli
