// Gloo's ring all-reduce (gloo::AllreduceRing, float32 sum) over its TCP transport on loopback, for
// bench/allreduce_compare.sh, measured like `chaosbed bench allreduce`: per size, warm-up iterations, then
// timed iterations; time = the largest per-iteration mean over the ranks (reduced with a Gloo max).
// Rendezvous through gloo's FileStore in STORE_DIR (empty, shared by the ranks).
// Usage: gloo_allreduce RANK SIZE STORE_DIR [BYTES...]   (default: 1 MiB and 16 MiB)
// Rank 0 prints one line per size: "BYTES TIME_US".

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: gloo_allreduce RANK SIZE STORE_DIR [BYTES...]\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  std::vector<size_t> sizes;
  for (int i = 4; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {size_t{1} << 20, size_t{16} << 20};

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[3]);
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->connectFullMesh(store, device);

  for (size_t bytes : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> buf(static_cast<size_t>(count), 0.0f);
    gloo::AllreduceRing<float> allreduce(context, {buf.data()}, count);
    const long iters = std::clamp<long>(static_cast<long>((size_t{256} << 20) / bytes), 5, 1000);
    for (long i = 0; i < std::max(iters / 10, 2L); ++i) allreduce.run();
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) allreduce.run();
    double mean_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / iters;
    gloo::AllreduceRing<double> slowest(context, {&mean_us}, 1, gloo::ReductionFunction<double>::max);
    slowest.run();
    if (rank == 0) std::printf("%zu %.3f\n", bytes, mean_us);
    std::fflush(stdout);
  }
  return 0;
}
