// Collectives over the loopback transport: results against a serial reference for awkward sizes and member
// counts, failure of any member aborting every survivor with its rank, rebuilding from the survivors.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "tests/testing/loopback_transport.h"
#include "transports/collective.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using testing::LoopbackHub;

// Runs fn(rank, transport) on one thread per rank and returns each rank's status.
std::vector<Status> runRanks(LoopbackHub& hub, const std::function<Status(int, Transport&)>& fn) {
  auto transports = hub.transports();
  std::vector<Status> out(transports.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < transports.size(); ++r)
    threads.emplace_back([&, r] { out[r] = fn(static_cast<int>(r), *transports[r]); });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<float> randomVector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

void checkAllreduce(int ranks, size_t elements, CollectiveOptions options) {
  LoopbackHub hub(ranks, {.eager_limit = 4096});
  std::vector<std::vector<float>> data(static_cast<size_t>(ranks));
  std::vector<double> expected(elements, 0.0);
  for (int r = 0; r < ranks; ++r) {
    data[static_cast<size_t>(r)] = randomVector(elements, static_cast<uint32_t>(r * 7919 + elements));
    for (size_t i = 0; i < elements; ++i) expected[i] += data[static_cast<size_t>(r)][i];
  }
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    return allreduce(comm, data[static_cast<size_t>(r)], deadlineIn(10s), options);
  });
  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(statuses[static_cast<size_t>(r)].isOk()) << "rank " << r << ": " << statuses[r].toString();
    for (size_t i = 0; i < elements; ++i)
      ASSERT_NEAR(data[static_cast<size_t>(r)][i], expected[i], 1e-5 * ranks)
          << "rank " << r << " element " << i << " of " << elements << " with " << ranks << " ranks";
  }
  // Every rank holds bit-identical sums (both algorithms reduce each element in one place).
  for (int r = 1; r < ranks; ++r) EXPECT_EQ(data[static_cast<size_t>(r)], data[0]) << "rank " << r;
}

constexpr AllreduceAlgorithm kAlgorithms[] = {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
                                               AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kDirect};

const char* nameOf(AllreduceAlgorithm a) {
  switch (a) {
    case AllreduceAlgorithm::kRing: return "ring";
    case AllreduceAlgorithm::kHalvingDoubling: return "halving_doubling";
    case AllreduceAlgorithm::kRecursiveDoubling: return "recursive_doubling";
    case AllreduceAlgorithm::kDirect: return "direct";
    default: return "auto";
  }
}

}  // namespace
// gtest prints a parameter through PrintTo, found beside its type: the algorithm's name, not its bytes.
static void PrintTo(AllreduceAlgorithm a, std::ostream* os) { *os << nameOf(a); }
namespace {

// Every member count from 1 to 9 (powers of two, and the others that fold members in), sizes smaller than
// the member count and not divisible by it.
TEST(Allreduce, MatchesSerialSumForAwkwardSizes) {
  for (AllreduceAlgorithm algorithm : kAlgorithms) {
    const CollectiveOptions small_chunks{.chunk_bytes = 64, .window = 3, .algorithm = algorithm};
    for (int ranks = 1; ranks <= 9; ++ranks) {
      for (size_t elements : {size_t{1}, size_t{2}, size_t{3}, size_t{5}, size_t{17}, size_t{100}, size_t{1001}}) {
        SCOPED_TRACE(std::string(nameOf(algorithm)) + " ranks " + std::to_string(ranks) + " elements " +
                     std::to_string(elements));
        checkAllreduce(ranks, elements, small_chunks);
      }
    }
  }
}

// A buffer larger than a ring slice goes round in slices (the last one shorter), each its own operation.
TEST(Allreduce, RingInSlicesMatchesSerialSum) {
  for (size_t slice_bytes : {size_t{4}, size_t{40}, size_t{400}}) {
    const CollectiveOptions sliced{
        .chunk_bytes = 64, .window = 2, .algorithm = AllreduceAlgorithm::kRing, .ring_slice_bytes = slice_bytes};
    for (int ranks : {2, 3, 5}) {
      for (size_t elements : {size_t{1}, size_t{9}, size_t{101}, size_t{1001}}) {
        SCOPED_TRACE("slice " + std::to_string(slice_bytes) + " ranks " + std::to_string(ranks) + " elements " +
                     std::to_string(elements));
        checkAllreduce(ranks, elements, sliced);
      }
    }
  }
}

TEST(Allreduce, LargeBufferWithDefaultChunks) {
  for (AllreduceAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(nameOf(algorithm));
    checkAllreduce(4, 1'000'003, {.algorithm = algorithm});
    checkAllreduce(6, 300'007, {.algorithm = algorithm});
  }
}

TEST(Allreduce, SingleChunkWindow) { checkAllreduce(3, 4099, {.chunk_bytes = 1000, .window = 1}); }

TEST(Allreduce, AutoOverSocketsChoosesFewLargeMessages) {
  const CollectiveOptions options{.halving_from_bytes = 32 << 10, .direct_below_bytes = 1 << 20, .direct_max_members = 4};
  constexpr bool kSockets = false;
  EXPECT_EQ(chooseAllreduce(4 << 10, 4, kSockets, options), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce((32 << 10) - 4, 5, kSockets, options), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(32 << 10, 4, kSockets, options), AllreduceAlgorithm::kDirect);
  EXPECT_EQ(chooseAllreduce((1 << 20) - 4, 3, kSockets, options), AllreduceAlgorithm::kDirect);
  EXPECT_EQ(chooseAllreduce(32 << 10, 5, kSockets, options), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(1 << 20, 4, kSockets, options), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(64 << 20, 5, kSockets, options), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(64 << 10, 1, kSockets, options), AllreduceAlgorithm::kRing);
  EXPECT_EQ(chooseAllreduce(64 << 10, 4, kSockets, {.algorithm = AllreduceAlgorithm::kRing}), AllreduceAlgorithm::kRing);
}

TEST(Allreduce, AutoOverSharedMemoryChoosesDirectThenTheRing) {
  const CollectiveOptions options{.halving_from_bytes = 32 << 10, .direct_below_bytes = 1 << 20, .direct_max_members = 8};
  constexpr bool kSharedMemory = true;
  EXPECT_EQ(chooseAllreduce(4 << 10, 2, kSharedMemory, options), AllreduceAlgorithm::kDirect);
  EXPECT_EQ(chooseAllreduce((1 << 20) - 4, 8, kSharedMemory, options), AllreduceAlgorithm::kDirect);
  EXPECT_EQ(chooseAllreduce(1 << 20, 8, kSharedMemory, options), AllreduceAlgorithm::kRing);
  EXPECT_EQ(chooseAllreduce(4 << 10, 9, kSharedMemory, options), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(512 << 10, 9, kSharedMemory, options), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(1 << 20, 9, kSharedMemory, options), AllreduceAlgorithm::kRing);
  EXPECT_EQ(chooseAllreduce(4 << 10, 4, kSharedMemory, {.algorithm = AllreduceAlgorithm::kHalvingDoubling}),
            AllreduceAlgorithm::kHalvingDoubling);
}

TEST(Allreduce, EmptyBufferIsANoOp) {
  LoopbackHub hub(3);
  auto statuses = runRanks(hub, [&](int, Transport& t) -> Status {
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    std::vector<float> none;
    return allreduce(comm, none, deadlineIn(1s));
  });
  for (auto& s : statuses) EXPECT_TRUE(s.isOk()) << s.toString();
}

class AllreduceByAlgorithm : public ::testing::TestWithParam<AllreduceAlgorithm> {};
INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceByAlgorithm, ::testing::ValuesIn(kAlgorithms),
                         [](const auto& info) { return std::string(nameOf(info.param)); });

TEST_P(AllreduceByAlgorithm, MismatchedSizesAreReportedNotHung) {
  LoopbackHub hub(2);
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    std::vector<float> v(r == 0 ? 100 : 60, 1.0f);
    return allreduce(comm, v, deadlineIn(2s), {.algorithm = GetParam()});
  });
  EXPECT_FALSE(statuses[0].isOk() && statuses[1].isOk());
  bool named = false;
  for (auto& s : statuses)
    named |= s.code() == StatusCode::kInvalidArgument && s.message().find("expected") != std::string::npos;
  EXPECT_TRUE(named) << statuses[0].toString() << " / " << statuses[1].toString();
}

TEST(Collectives, SubsetCommunicatorLeavesOthersAlone) {
  LoopbackHub hub(5);
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    if (r == 1 || r == 3) return Status::ok();  // not members
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, makeCommunicator(&t, {4, 0, 2}, 7));
    std::vector<float> v(10, static_cast<float>(r));
    CHAOSBED_RETURN_IF_ERROR(allreduce(comm, v, deadlineIn(5s)));
    for (float x : v)
      if (x != 6.0f) return Status::internal("rank " + std::to_string(r) + " got " + std::to_string(x));
    return Status::ok();
  });
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].isOk()) << r << ": " << statuses[r].toString();
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (int ranks : {1, 2, 4, 5}) {
    for (size_t bytes : {size_t{1}, size_t{7}, size_t{1000}, size_t{300'001}}) {
      LoopbackHub hub(ranks);
      auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
        CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
        for (int root = 0; root < ranks; ++root) {
          std::vector<std::byte> buf(bytes, std::byte{0});
          if (r == root)
            for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<std::byte>((i * 31 + root) & 0xff);
          CHAOSBED_RETURN_IF_ERROR(broadcast(comm, buf, root, deadlineIn(5s), {.chunk_bytes = 4096, .window = 2}));
          for (size_t i = 0; i < bytes; ++i)
            if (buf[i] != static_cast<std::byte>((i * 31 + root) & 0xff))
              return Status::internal("rank " + std::to_string(r) + " root " + std::to_string(root) +
                                      " byte " + std::to_string(i));
        }
        return Status::ok();
      });
      for (size_t r = 0; r < statuses.size(); ++r)
        EXPECT_TRUE(statuses[r].isOk()) << "ranks " << ranks << " bytes " << bytes << ": " << statuses[r].toString();
    }
  }
}

TEST(Collectives, BroadcastRejectsNonMemberRoot) {
  LoopbackHub hub(3);
  auto t = hub.transport(0);
  auto comm = makeCommunicator(t.get(), {0, 1}, 0);
  ASSERT_TRUE(comm.isOk());
  std::vector<std::byte> buf(4);
  Status s = broadcast(*comm, buf, 2, deadlineIn(1s));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("root 2"), std::string::npos) << s.toString();
}

TEST(Collectives, AllgatherInMemberOrder) {
  for (int ranks : {1, 2, 3, 6}) {
    LoopbackHub hub(ranks);
    const size_t block = 1237;
    auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
      CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
      std::vector<std::byte> in(block, static_cast<std::byte>(r + 1));
      std::vector<std::byte> out(block * static_cast<size_t>(ranks));
      CHAOSBED_RETURN_IF_ERROR(allgather(comm, in, out, deadlineIn(5s), {.chunk_bytes = 200, .window = 2}));
      for (size_t i = 0; i < out.size(); ++i)
        if (out[i] != static_cast<std::byte>(i / block + 1))
          return Status::internal("rank " + std::to_string(r) + " byte " + std::to_string(i));
      return Status::ok();
    });
    for (auto& s : statuses) EXPECT_TRUE(s.isOk()) << s.toString();
  }
}

TEST(Collectives, AllgatherChecksTheOutputSize) {
  LoopbackHub hub(2);
  auto t = hub.transport(0);
  auto comm = worldCommunicator(t.get());
  ASSERT_TRUE(comm.isOk());
  std::vector<std::byte> in(4), out(7);
  EXPECT_EQ(allgather(*comm, in, out, deadlineIn(1s)).code(), StatusCode::kInvalidArgument);
}

TEST(Collectives, BarrierWaitsForTheLastMember) {
  for (int ranks : {2, 3, 5, 8}) {
    LoopbackHub hub(ranks);
    std::atomic<int> entered{0};
    std::atomic<bool> early{false};
    auto statuses = runRanks(hub, [&](int, Transport& t) -> Status {
      CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
      for (int round = 0; round < 3; ++round) {
        entered.fetch_add(1);
        CHAOSBED_RETURN_IF_ERROR(barrier(comm, deadlineIn(5s)));
        if (entered.load() < ranks * (round + 1)) early = true;
        CHAOSBED_RETURN_IF_ERROR(barrier(comm, deadlineIn(5s)));  // nobody enters the next round early
      }
      return Status::ok();
    });
    for (auto& s : statuses) EXPECT_TRUE(s.isOk()) << s.toString();
    EXPECT_FALSE(early) << ranks << " ranks";
  }
}

TEST(Collectives, CommunicatorValidation) {
  LoopbackHub hub(3);
  auto t = hub.transport(1);
  EXPECT_EQ(makeCommunicator(t.get(), {0, 2}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(makeCommunicator(t.get(), {1, 1}, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(makeCommunicator(t.get(), {1, 3}, 0).status().code(), StatusCode::kInvalidArgument);
  auto comm = makeCommunicator(t.get(), {2, 1}, 4);
  ASSERT_TRUE(comm.isOk());
  EXPECT_EQ(comm->members, (std::vector<int>{1, 2}));
  EXPECT_EQ(comm->myIndex(), 0);
  EXPECT_EQ(comm->indexOf(2), 1);
  EXPECT_EQ(comm->indexOf(0), -1);
}

TEST(Collectives, TagsAreReservedAndDistinct) {
  EXPECT_TRUE(isCollectiveTag(collectiveTag(0, 0, 0)));
  EXPECT_FALSE(isCollectiveTag(kMaxP2pTag));
  EXPECT_LE(collectiveTag(0xffffffff, ~uint64_t{0}, 0xffffffff), kMaxUserTag);
  EXPECT_NE(collectiveTag(1, 5, 2), collectiveTag(2, 5, 2));
  EXPECT_NE(collectiveTag(1, 5, 2), collectiveTag(1, 6, 2));
  EXPECT_NE(collectiveTag(1, 5, 2), collectiveTag(1, 5, 3));
}

// A member dying mid-allreduce aborts every survivor, all naming it, whether or not it is their neighbour.
TEST_P(AllreduceByAlgorithm, MemberDeathAbortsEverySurvivorNamingIt) {
  const int ranks = 5, victim = 2;
  LoopbackHub hub(ranks);
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    std::vector<float> v(100'000, 1.0f);
    CHAOSBED_RETURN_IF_ERROR(allreduce(comm, v, deadlineIn(10s)));
    if (r == victim) {  // dies between two allreduces, before, during or after the others enter the second
      hub.kill(victim, "loopback: SIGKILL");
      return Status::cancelled("killed");
    }
    auto start = SteadyClock::now();
    Status s = allreduce(comm, v, deadlineIn(10s), {.chunk_bytes = 4096, .window = 2, .algorithm = GetParam()});
    if (SteadyClock::now() - start > 2s) return Status::internal("detection took over 2 s: " + s.toString());
    return s;
  });
  for (int r = 0; r < ranks; ++r) {
    if (r == victim) continue;
    const Status& s = statuses[static_cast<size_t>(r)];
    EXPECT_TRUE(s.code() == StatusCode::kPeerLost || s.code() == StatusCode::kAborted) << r << ": " << s.toString();
    EXPECT_EQ(s.peer(), victim) << r << ": " << s.toString();
    EXPECT_NE(s.message().find("allreduce(epoch 0, op "), std::string::npos) << s.toString();
  }
}

// A member that never shows up trips the deadline on the others (a paused process looks like this).
TEST_P(AllreduceByAlgorithm, AbsentMemberTripsTheDeadline) {
  LoopbackHub hub(3);
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    if (r == 1) return Status::ok();
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    std::vector<float> v(1000, 1.0f);
    auto start = SteadyClock::now();
    Status s = allreduce(comm, v, start + 100ms, {.algorithm = GetParam()});
    if (SteadyClock::now() - start > 1s) return Status::internal("deadline overshot: " + s.toString());
    return s;
  });
  EXPECT_EQ(statuses[0].code(), StatusCode::kTimeout) << statuses[0].toString();
  EXPECT_EQ(statuses[2].code(), StatusCode::kTimeout) << statuses[2].toString();
}

// After a member dies the survivors rebuild with epoch+1 over the same transport and get correct sums, even
// though the aborted call left messages behind.
TEST_P(AllreduceByAlgorithm, RebuiltCommunicatorWorksOverTheSameTransport) {
  const int ranks = 4, victim = 3;
  LoopbackHub hub(ranks);
  auto statuses = runRanks(hub, [&](int r, Transport& t) -> Status {
    CHAOSBED_ASSIGN_OR_RETURN(Communicator comm, worldCommunicator(&t));
    std::vector<float> v(5000, 1.0f);
    if (r == victim) {
      hub.kill(victim);
      return Status::ok();
    }
    Status first = allreduce(comm, v, deadlineIn(5s), {.chunk_bytes = 1024, .algorithm = GetParam()});
    if (first.code() != StatusCode::kPeerLost || first.peer() != victim)
      return Status::internal("expected PeerLost(3), got " + first.toString());
    CHAOSBED_ASSIGN_OR_RETURN(Communicator rebuilt, rebuildCommunicator(&t, {0, 1, 2}, comm.epoch + 1, deadlineIn(5s)));
    for (int round = 0; round < 3; ++round) {
      std::vector<float> w(5001, static_cast<float>(r + round));
      CHAOSBED_RETURN_IF_ERROR(allreduce(rebuilt, w, deadlineIn(5s), {.chunk_bytes = 1024, .algorithm = GetParam()}));
      const float want = static_cast<float>(0 + 1 + 2 + 3 * round);
      for (float x : w)
        if (x != want) return Status::internal("got " + std::to_string(x) + " want " + std::to_string(want));
    }
    return barrier(rebuilt, deadlineIn(5s));
  });
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_TRUE(statuses[r].isOk()) << r << ": " << statuses[r].toString();
}

}  // namespace
}  // namespace chaosbed
