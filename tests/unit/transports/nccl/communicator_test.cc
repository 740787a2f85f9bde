// NCCL backend: the device probe (must be a clean "not viable" without a GPU), option checks, unique-id
// rendezvous through the bootstrap Store, single-rank allreduce/broadcast on device memory, sticky abort,
// bounded init, and a 2-process test (one rank per GPU) of the collectives, abort and the watchdog timeout.
// Tests that need a device GTEST_SKIP() with "no CUDA device: ..." on machines without one.

#include "transports/nccl/communicator.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "transports/bootstrap/store.h"

extern char** environ;

namespace chaosbed::nccl {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

#define CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE()                                         \
  do {                                                                              \
    if (Status viable = isViable(); !viable.isOk())                                 \
      GTEST_SKIP() << "no CUDA device: " << viable.message();                       \
  } while (0)

// count floats of device memory, freed on destruction; copies are synchronous.
class DeviceFloats {
 public:
  explicit DeviceFloats(size_t count) : count_(count) {
    void* p = nullptr;
    error_ = cudaMalloc(&p, count * sizeof(float));
    data_ = static_cast<float*>(p);
  }
  ~DeviceFloats() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  cudaError_t error() const { return error_; }
  float* data() const { return data_; }
  cudaError_t upload(const std::vector<float>& host) {
    return cudaMemcpy(data_, host.data(), count_ * sizeof(float), cudaMemcpyHostToDevice);
  }
  std::vector<float> download() const {
    std::vector<float> host(count_, -12345.0f);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  size_t count_;
  float* data_ = nullptr;
  cudaError_t error_;
};

std::vector<float> pattern(size_t count, float scale, float offset) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = scale * static_cast<float>(i % 1000) + offset;  // exact in float
  return v;
}

struct NcclStoreTest : ::testing::Test {
  void SetUp() override {
    auto server = startStoreServer("127.0.0.1:0", secret_);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    server_ = std::move(server).value();
    auto store = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
    job_ = std::string("test-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  CommunicatorOptions options(int rank, int size, uint64_t epoch = 1) const {
    CommunicatorOptions o;
    o.job = job_;
    o.epoch = epoch;
    o.rank = rank;
    o.size = size;
    return o;
  }
  std::unique_ptr<NcclCommunicator> singleRank(uint64_t epoch = 1) {
    auto comm = NcclCommunicator::create(*store_, options(0, 1, epoch), deadlineIn(seconds(30)));
    EXPECT_TRUE(comm.isOk()) << comm.status().toString();
    return comm.isOk() ? std::move(comm).value() : nullptr;
  }

  Secret secret_ = *Secret::generate();
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Store> store_;
  std::string job_;
};

TEST(NcclProbe, DeviceCountIsACleanAnswerWithOrWithoutAGpu) {
  const Result<int> count = cudaDeviceCount();
  if (count.isOk()) {
    EXPECT_GE(*count, 1);
    EXPECT_TRUE(isViable().isOk());
  } else {
    EXPECT_EQ(count.status().code(), StatusCode::kUnavailable) << count.status().toString();
    EXPECT_EQ(count.status().message().rfind("not viable: no CUDA device (", 0), 0u) << count.status().message();
    EXPECT_NE(count.status().message().find("cudaGetDeviceCount"), std::string::npos)
        << "the reason should carry CUDA's own words: " << count.status().message();
    EXPECT_EQ(isViable(), count.status());
  }
  // Cached: the second answer is the same (and costs no second fork).
  const Result<int> again = cudaDeviceCount();
  EXPECT_EQ(again.status(), count.status());
  if (count.isOk()) {
    EXPECT_EQ(*again, *count);
  }
}

TEST(NcclKeys, UniqueIdKeyNamesJobAndEpoch) {
  EXPECT_EQ(uniqueIdKey("exp7", 3), "exp7/nccl/epoch/3/unique_id");
  EXPECT_NE(uniqueIdKey("exp7", 3), uniqueIdKey("exp7", 4));
  EXPECT_NE(uniqueIdKey("exp7", 3), uniqueIdKey("exp8", 3));
}

TEST_F(NcclStoreTest, BadOptionsAreRejectedByName) {
  struct Case {
    CommunicatorOptions o;
    const char* field;
  };
  CommunicatorOptions empty_job = options(0, 1);
  empty_job.job.clear();
  CommunicatorOptions bad_device = options(0, 1);
  bad_device.device = -2;
  const Case cases[] = {
      {empty_job, "options.job"},   {options(0, 0), "options.size"},     {options(2, 2), "options.rank"},
      {options(-1, 2), "options.rank"}, {bad_device, "options.device"},
  };
  for (const Case& c : cases) {
    auto comm = NcclCommunicator::create(*store_, c.o, deadlineIn(seconds(1)));
    ASSERT_FALSE(comm.isOk()) << c.field;
    EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument) << comm.status().toString();
    EXPECT_NE(comm.status().message().find(c.field), std::string::npos) << comm.status().toString();
  }
}

TEST_F(NcclStoreTest, WithoutADeviceCreateIsUnavailableAndPublishesNothing) {
  if (isViable().isOk()) GTEST_SKIP() << "a CUDA device is present; this test covers machines without one";
  auto comm = NcclCommunicator::create(*store_, options(0, 2), deadlineIn(seconds(5)));
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable) << comm.status().toString();
  EXPECT_NE(comm.status().message().find("no CUDA device"), std::string::npos) << comm.status().toString();
  auto published = store_->contains(uniqueIdKey(job_, 1));
  ASSERT_TRUE(published.isOk()) << published.status().toString();
  EXPECT_FALSE(*published) << "rank 0 must not publish an id it cannot use";
}

TEST_F(NcclStoreTest, SingleRankAllreduceSumsInPlaceAndOutOfPlace) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = singleRank();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  const size_t n = (1 << 20) + 3;  // not a multiple of any chunk size
  const std::vector<float> input = pattern(n, 0.5f, 1.0f);
  DeviceFloats a(n), b(n);
  ASSERT_EQ(a.error(), cudaSuccess);
  ASSERT_EQ(b.error(), cudaSuccess);
  ASSERT_EQ(a.upload(input), cudaSuccess);
  ASSERT_EQ(b.upload(std::vector<float>(n, -1.0f)), cudaSuccess);

  Status s = comm->allreduce(a.data(), b.data(), n, deadlineIn(seconds(30)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(b.download(), input);  // the sum over one rank is the input itself

  s = comm->allreduce(a.data(), a.data(), n, deadlineIn(seconds(30)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(a.download(), input);
  EXPECT_TRUE(comm->allreduce(a.data(), a.data(), 0, deadlineIn(seconds(1))).isOk());
  EXPECT_TRUE(comm->status().isOk());
}

TEST_F(NcclStoreTest, SingleRankBroadcastCopiesTheRootsBuffer) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = singleRank();
  ASSERT_NE(comm, nullptr);
  const size_t n = 4099;
  const std::vector<float> input = pattern(n, 2.0f, -3.0f);
  DeviceFloats a(n), b(n);
  ASSERT_EQ(a.upload(input), cudaSuccess);
  ASSERT_EQ(b.upload(std::vector<float>(n, 0.0f)), cudaSuccess);
  Status s = comm->broadcast(a.data(), b.data(), n, /*root=*/0, deadlineIn(seconds(30)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(b.download(), input);
  s = comm->broadcast(b.data(), b.data(), n, 0, deadlineIn(seconds(30)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(b.download(), input);

  s = comm->broadcast(a.data(), b.data(), n, /*root=*/1, deadlineIn(seconds(1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("root 1"), std::string::npos) << s.toString();
  EXPECT_TRUE(comm->status().isOk()) << "a rejected argument must not break the communicator";
}

TEST_F(NcclStoreTest, HostBuffersAreRejectedAndTheCommunicatorStaysUsable) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = singleRank();
  ASSERT_NE(comm, nullptr);
  std::vector<float> host(64, 1.0f);
  Status s = comm->allreduce(host.data(), host.data(), host.size(), deadlineIn(seconds(1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("send buffer"), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("host memory"), std::string::npos) << s.toString();
  s = comm->allreduce(nullptr, nullptr, 1, deadlineIn(seconds(1)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();

  DeviceFloats a(64);
  ASSERT_EQ(a.upload(host), cudaSuccess);
  s = comm->allreduce(a.data(), a.data(), 64, deadlineIn(seconds(30)));
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(a.download(), host);
}

TEST_F(NcclStoreTest, AbortMakesEveryLaterCallReturnTheVerdict) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = singleRank();
  ASSERT_NE(comm, nullptr);
  DeviceFloats a(256);
  ASSERT_EQ(a.upload(pattern(256, 1.0f, 0.0f)), cudaSuccess);

  comm->abort(Status::peerLost(3, "launcher: node exited"));
  comm->abort(Status::timeout("a later verdict must not replace the first"));
  EXPECT_EQ(comm->status(), Status::peerLost(3, "launcher: node exited"));

  Status s = comm->allreduce(a.data(), a.data(), 256, deadlineIn(seconds(5)));
  EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s.toString();
  EXPECT_EQ(s.peer(), 3);
  EXPECT_EQ(s.message(), "nccl allreduce: launcher: node exited");
  s = comm->broadcast(a.data(), a.data(), 256, 0, deadlineIn(seconds(5)));
  EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s.toString();
  EXPECT_EQ(s.message(), "nccl broadcast: launcher: node exited");
}

TEST_F(NcclStoreTest, AbortWithOkStatusReadsAsAborted) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = singleRank();
  ASSERT_NE(comm, nullptr);
  comm->abort(Status::ok());
  EXPECT_EQ(comm->status().code(), StatusCode::kAborted);
}

TEST_F(NcclStoreTest, EachEpochPublishesAFreshUniqueId) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto first = singleRank(/*epoch=*/1);
  ASSERT_NE(first, nullptr);
  first.reset();
  auto second = singleRank(/*epoch=*/2);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->epoch(), 2u);
  auto id1 = store_->get(uniqueIdKey(job_, 1), deadlineIn(seconds(1)));
  auto id2 = store_->get(uniqueIdKey(job_, 2), deadlineIn(seconds(1)));
  ASSERT_TRUE(id1.isOk()) << id1.status().toString();
  ASSERT_TRUE(id2.isOk()) << id2.status().toString();
  EXPECT_EQ(id1->size(), sizeof(ncclUniqueId));
  EXPECT_NE(*id1, *id2);
}

TEST_F(NcclStoreTest, NonRootRanksWaitForTheUniqueIdOnlyUntilTheDeadline) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  auto comm = NcclCommunicator::create(*store_, options(1, 2), deadlineIn(milliseconds(200)));
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kTimeout) << comm.status().toString();
  EXPECT_NE(comm.status().message().find(uniqueIdKey(job_, 1)), std::string::npos) << comm.status().toString();

  ASSERT_TRUE(store_->set(uniqueIdKey(job_, 2), "short").isOk());
  comm = NcclCommunicator::create(*store_, options(1, 2, 2), deadlineIn(seconds(1)));
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kDataLoss) << comm.status().toString();

  CommunicatorOptions far = options(0, 1);
  far.device = 4096;
  comm = NcclCommunicator::create(*store_, far, deadlineIn(seconds(1)));
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument) << comm.status().toString();
}

TEST_F(NcclStoreTest, InitIsAbortedAtTheDeadlineWhenPeersNeverJoin) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  const auto start = SteadyClock::now();
  auto comm = NcclCommunicator::create(*store_, options(0, 2), deadlineIn(seconds(2)));
  const auto elapsed = SteadyClock::now() - start;
  ASSERT_FALSE(comm.isOk());
  EXPECT_EQ(comm.status().code(), StatusCode::kTimeout) << comm.status().toString();
  EXPECT_LT(elapsed, seconds(12)) << "init must give up at its deadline (plus the abort)";
  EXPECT_TRUE(*store_->contains(uniqueIdKey(job_, 1)));
}

// ---- Two ranks, two processes, one GPU each -------------------------------------------------------------
// The parent hosts the Store and re-executes this binary twice with the child test selected (a fresh
// process, so CUDA state is never inherited across fork). Children coordinate through the Store.

constexpr const char* kEnvRank = "CHAOSBED_NCCL_TEST_RANK";
constexpr const char* kEnvStore = "CHAOSBED_NCCL_TEST_STORE";
constexpr const char* kEnvJob = "CHAOSBED_NCCL_TEST_JOB";
constexpr const char* kEnvSecretFile = "CHAOSBED_NCCL_TEST_SECRET_FILE";  // a path: the secret is never in env

TEST(NcclTwoRankChild, Rank) {
  const char* rank_env = std::getenv(kEnvRank);
  if (rank_env == nullptr)
    GTEST_SKIP() << "helper process of NcclStoreTest.TwoRanksOnTwoDevices; runs only when that test starts it";
  const int rank = std::atoi(rank_env);
  const std::string job = std::getenv(kEnvJob);
  auto secret = Secret::readFile(std::getenv(kEnvSecretFile));
  ASSERT_TRUE(secret.isOk()) << secret.status().toString();
  auto store = connectStore(std::getenv(kEnvStore), *secret, deadlineIn(seconds(10)));
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  CommunicatorOptions o;
  o.job = job;
  o.epoch = 1;
  o.rank = rank;
  o.size = 2;
  auto comm = NcclCommunicator::create(**store, o, deadlineIn(seconds(30)));
  ASSERT_TRUE(comm.isOk()) << comm.status().toString();

  const size_t n = 100003;
  DeviceFloats a(n), b(n);
  ASSERT_EQ(a.upload(pattern(n, static_cast<float>(rank + 1), 0.0f)), cudaSuccess);
  Status s = (*comm)->allreduce(a.data(), a.data(), n, deadlineIn(seconds(20)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(a.download(), pattern(n, 3.0f, 0.0f));  // 1*x + 2*x

  ASSERT_EQ(a.upload(pattern(n, 1.0f, rank == 1 ? 7.0f : -100.0f)), cudaSuccess);
  s = (*comm)->broadcast(a.data(), b.data(), n, /*root=*/1, deadlineIn(seconds(20)));
  ASSERT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(b.download(), pattern(n, 1.0f, 7.0f));

  if (rank == 1) {
    // A collective that rank 0 never joins; the control plane's verdict must end the wait.
    std::thread verdict([&] {
      const Deadline give_up = deadlineIn(seconds(10));
      while (cudaStreamQuery((*comm)->stream()) != cudaErrorNotReady && SteadyClock::now() < give_up)
        std::this_thread::yield();
      (*comm)->abort(Status::peerLost(0, "test: rank 0 declared lost"));
    });
    const auto start = SteadyClock::now();
    s = (*comm)->allreduce(a.data(), a.data(), n, deadlineIn(seconds(60)));
    verdict.join();
    EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s.toString();
    EXPECT_EQ(s.peer(), 0);
    EXPECT_LT(SteadyClock::now() - start, seconds(15));
    ASSERT_TRUE((*store)->set(job + "/test/rank1_aborted", "1").isOk());
    EXPECT_TRUE((*store)->get(job + "/test/rank0_done", deadlineIn(seconds(30))).isOk());
  } else {
    ASSERT_TRUE((*store)->get(job + "/test/rank1_aborted", deadlineIn(seconds(30))).isOk());
    // Rank 1 is gone from the communicator: the watchdog must turn the wait into an error at the deadline.
    const auto start = SteadyClock::now();
    s = (*comm)->allreduce(a.data(), a.data(), n, deadlineIn(seconds(2)));
    const auto elapsed = SteadyClock::now() - start;
    EXPECT_TRUE(s.code() == StatusCode::kTimeout || s.code() == StatusCode::kAborted) << s.toString();
    EXPECT_LT(elapsed, seconds(12));
    EXPECT_EQ((*comm)->status().code(), s.code());
    EXPECT_TRUE((*store)->set(job + "/test/rank0_done", "1").isOk());
  }
}

// Waits for pid's exit until the deadline (pidfd, no polling loop); kills it on timeout. Returns the wait
// status, or -1 on timeout.
int waitChild(pid_t pid, Deadline deadline) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - SteadyClock::now());
    pollfd pfd{pidfd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    ::close(pidfd);
    if (ready == 0) ::kill(pid, SIGKILL);
  }
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  return wstatus;
}

TEST_F(NcclStoreTest, TwoRanksOnTwoDevices) {
  CHAOSBED_SKIP_WITHOUT_CUDA_DEVICE();
  if (*cudaDeviceCount() < 2)
    GTEST_SKIP() << "no CUDA device: needs 2 CUDA devices (NCCL runs one rank per GPU), found " << *cudaDeviceCount();
  const std::string filter = "--gtest_filter=NcclTwoRankChild.Rank";
  const std::string store_env = std::string(kEnvStore) + "=" + server_->address();
  const std::string job_env = std::string(kEnvJob) + "=" + job_;
  char dir_template[] = "/tmp/chaosbed-nccl-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string secret_file = std::string(dir_template) + "/secret";
  ASSERT_TRUE(secret_.writeFile(secret_file).isOk());
  const std::string secret_env = std::string(kEnvSecretFile) + "=" + secret_file;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    // Everything the child needs is built before fork: the parent runs the store's thread.
    const std::string rank_env = std::string(kEnvRank) + "=" + std::to_string(rank);
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
    env.push_back(const_cast<char*>(rank_env.c_str()));
    env.push_back(const_cast<char*>(store_env.c_str()));
    env.push_back(const_cast<char*>(job_env.c_str()));
    env.push_back(const_cast<char*>(secret_env.c_str()));
    env.push_back(nullptr);
    char* argv[] = {const_cast<char*>("/proc/self/exe"), const_cast<char*>(filter.c_str()), nullptr};
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << std::strerror(errno);
    if (pid == 0) {
      ::execve("/proc/self/exe", argv, env.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  const Deadline deadline = deadlineIn(seconds(50));
  for (size_t rank = 0; rank < pids.size(); ++rank) {
    const int wstatus = waitChild(pids[rank], deadline);
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        << "rank " << rank << " failed (wait status " << wstatus << "); its test output is above";
  }
  std::filesystem::remove_all(dir_template);
}

}  // namespace
}  // namespace chaosbed::nccl
