// The transport contract (transports/transport.h), one suite for every transport: UCX (each rank its own
// process, as nodes run), the in-process loopback that unit tests use, and each decorator (faulty, shaper)
// over both. A new transport or decorator joins by adding a row to kTransports; what the rows share is the
// behaviour the collectives and the strategies rely on. (NCCL is not a Transport: its communicator has its
// own tests, which need a GPU.)

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/loopback_transport.h"
#include "tests/testing/multiprocess.h"
#include "transports/faulty/faulty_transport.h"
#include "transports/shaper/link_shaper.h"
#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

using std::chrono::seconds;

enum class Base { kLoopback, kUcx };
enum class Decorator { kNone, kFaulty, kShaper };
struct TransportKind {
  const char* name;
  Base base;
  Decorator decorator;
};
const TransportKind kTransports[] = {
    {"loopback", Base::kLoopback, Decorator::kNone}, {"faulty_loopback", Base::kLoopback, Decorator::kFaulty},
    {"shaper_loopback", Base::kLoopback, Decorator::kShaper}, {"ucx", Base::kUcx, Decorator::kNone},
    {"faulty_ucx", Base::kUcx, Decorator::kFaulty}, {"shaper_ucx", Base::kUcx, Decorator::kShaper},
};

// gtest prints a parameter with this, not as raw bytes.
void PrintTo(const TransportKind& kind, std::ostream* os) { *os << kind.name; }

// Decorators with nothing to do (no rule, no shaped link) must keep the contract of what they wrap.
std::unique_ptr<Transport> decorate(std::unique_ptr<Transport> t, Decorator d) {
  switch (d) {
    case Decorator::kNone: return t;
    case Decorator::kFaulty: return std::make_unique<FaultyTransport>(std::move(t));
    case Decorator::kShaper: return std::make_unique<LinkShaper>(std::move(t));
  }
  return t;
}

// One rank's side of a two-rank case: OK, or what broke the contract.
using Side = std::function<Status(Transport&)>;

Status check(bool ok, const std::string& what) { return ok ? Status::ok() : Status::internal(what); }

// Runs `side` on both ranks of a fresh pair. A rank that returns is gone, as a node process that exits: UCX
// ranks are forked processes that exit; a loopback rank (a thread) is killed at its hub.
void runPair(const TransportKind& kind, const Side& side) {
  if (kind.base == Base::kUcx) {
    testing::MultiProcess mp;
    ASSERT_TRUE(mp.spawnAll(2, [&](testing::ChildContext& c) {
      auto decorated = decorate(testing::ucxTransport(c, "contract"), kind.decorator);
      Status s = side(*decorated);
      return s.isOk() ? 0 : c.fail(s.toString());
    }).isOk());
    std::vector<int> codes;
    ASSERT_TRUE(mp.waitAllExit(deadlineIn(seconds(60)), &codes).isOk());
    for (int r = 0; r < 2; ++r) {
      std::string log;
      for (const auto& line : mp.reports(r)) log += "\n  " + line;
      EXPECT_EQ(codes[size_t(r)], 0) << "rank " << r << ":" << log;
    }
    return;
  }
  testing::LoopbackHub hub(2);
  Status result[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      auto t = decorate(hub.transport(r), kind.decorator);
      result[r] = side(*t);
      hub.kill(r, "loopback: rank " + std::to_string(r) + " returned");
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(result[r].isOk()) << "rank " << r << ": " << result[r].toString();
}

constexpr Tag kByeTag = 1000;

// Both ranks exchange one message: neither leaves before the other has taken everything sent to it.
Status goodbye(Transport& t) {
  const int other = 1 - t.rank();
  char mine = char('a' + t.rank()), theirs = 0;
  RequestPtr r = t.irecv(other, kByeTag, asWritableBytes(std::span(&theirs, 1)));
  CHAOSBED_RETURN_IF_ERROR(send(t, other, kByeTag, asBytes(std::span(&mine, 1)), deadlineIn(seconds(20))));
  CHAOSBED_RETURN_IF_ERROR(wait(t, r, deadlineIn(seconds(20))));
  return check(theirs == char('a' + other), "goodbye carried the wrong byte");
}

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  uint32_t x = seed * 2654435761u + uint32_t(n);
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = std::byte(x >> 24);
  }
  return v;
}

class TransportContract : public ::testing::TestWithParam<TransportKind> {};

// Eager and rendezvous sizes alike: the receive completes with the sender's bytes, their count and source.
TEST_P(TransportContract, MessagesArriveWholeWithTheirSizeAndSource) {
  runPair(GetParam(), [](Transport& t) -> Status {
    const size_t sizes[] = {0, 1, 8, 4096, 65537, size_t(1) << 20};
    Tag tag = 1;
    for (size_t n : sizes) {
      const auto expected = pattern(n, uint32_t(tag));
      if (t.rank() == 0) {
        CHAOSBED_RETURN_IF_ERROR(send(t, 1, tag, expected, deadlineIn(seconds(20))));
      } else {
        std::vector<std::byte> got(n + 16, std::byte{0x5a});
        RequestPtr r = t.irecv(0, tag, got);
        CHAOSBED_RETURN_IF_ERROR(wait(t, r, deadlineIn(seconds(20))));
        CHAOSBED_RETURN_IF_ERROR(check(r->receivedBytes() == n, std::to_string(n) + " bytes sent, " +
                                                                    std::to_string(r->receivedBytes()) + " received"));
        CHAOSBED_RETURN_IF_ERROR(check(r->source() == 0, "source " + std::to_string(r->source())));
        CHAOSBED_RETURN_IF_ERROR(check(std::equal(expected.begin(), expected.end(), got.begin()),
                                       "the content of " + std::to_string(n) + " bytes differs"));
        CHAOSBED_RETURN_IF_ERROR(check(got[n] == std::byte{0x5a}, "written past the message"));
      }
      ++tag;
    }
    return goodbye(t);
  });
}

// Receives posted in advance match one peer's messages on one tag in the order they were sent, whatever
// their sizes (small ones go eagerly, large ones by rendezvous).
TEST_P(TransportContract, OnePeersMessagesOnOneTagMatchInTheOrderSent) {
  runPair(GetParam(), [](Transport& t) -> Status {
    constexpr int kMessages = 24;
    auto size = [](int i) { return i % 3 == 2 ? size_t(100000) : size_t(4 + i); };
    if (t.rank() == 0) {
      std::vector<std::vector<std::byte>> out;
      std::vector<RequestPtr> sends;
      for (int i = 0; i < kMessages; ++i) out.push_back(pattern(size(i), uint32_t(i)));
      for (int i = 0; i < kMessages; ++i) sends.push_back(t.isend(1, 3, out[size_t(i)]));
      CHAOSBED_RETURN_IF_ERROR(waitAll(t, sends, deadlineIn(seconds(20))));
    } else {
      std::vector<std::vector<std::byte>> in(kMessages, std::vector<std::byte>(100000));
      std::vector<RequestPtr> recvs;
      for (int i = 0; i < kMessages; ++i) recvs.push_back(t.irecv(0, 3, in[size_t(i)]));
      CHAOSBED_RETURN_IF_ERROR(waitAll(t, recvs, deadlineIn(seconds(20))));
      for (int i = 0; i < kMessages; ++i) {
        const auto expected = pattern(size(i), uint32_t(i));
        CHAOSBED_RETURN_IF_ERROR(check(recvs[size_t(i)]->receivedBytes() == expected.size() &&
                                           std::equal(expected.begin(), expected.end(), in[size_t(i)].begin()),
                                       "receive " + std::to_string(i) + " did not get message " + std::to_string(i)));
      }
    }
    return goodbye(t);
  });
}

// A receive takes only its own tag: a message on another tag waits for its receive, and one from any peer
// names its source.
TEST_P(TransportContract, TagsSelectMessagesAndAWildcardReceiveNamesTheSource) {
  runPair(GetParam(), [](Transport& t) -> Status {
    if (t.rank() == 0) {
      int two = 2, one = 1;
      CHAOSBED_RETURN_IF_ERROR(send(t, 1, 12, asBytes(std::span(&two, 1)), deadlineIn(seconds(20))));
      CHAOSBED_RETURN_IF_ERROR(send(t, 1, 11, asBytes(std::span(&one, 1)), deadlineIn(seconds(20))));
    } else {
      int first = 0, second = 0;
      RequestPtr r1 = t.irecv(kAnyPeer, 11, asWritableBytes(std::span(&first, 1)));
      CHAOSBED_RETURN_IF_ERROR(wait(t, r1, deadlineIn(seconds(20))));
      CHAOSBED_RETURN_IF_ERROR(check(first == 1, "tag 11 received " + std::to_string(first)));
      CHAOSBED_RETURN_IF_ERROR(check(r1->source() == 0, "a wildcard receive named source " + std::to_string(r1->source())));
      RequestPtr r2 = t.irecv(0, 12, asWritableBytes(std::span(&second, 1)));
      CHAOSBED_RETURN_IF_ERROR(wait(t, r2, deadlineIn(seconds(20))));
      CHAOSBED_RETURN_IF_ERROR(check(second == 2, "tag 12 received " + std::to_string(second)));
    }
    return goodbye(t);
  });
}

// What is wrong with one operation fails that operation, at once where it can be known at once, and the pair
// works on afterwards: a peer out of range, a tag beyond the user's bits, a message longer than its buffer.
TEST_P(TransportContract, BadArgumentsAndTruncationFailOnlyTheirOperation) {
  runPair(GetParam(), [](Transport& t) -> Status {
    std::vector<std::byte> small(10);
    RequestPtr bad_peer = t.isend(2, 1, small);
    CHAOSBED_RETURN_IF_ERROR(check(bad_peer->isComplete() && bad_peer->status().code() == StatusCode::kInvalidArgument,
                                   "a send to rank 2 of 2 gave " + bad_peer->status().toString()));
    RequestPtr bad_tag = t.irecv(1 - t.rank(), kMaxUserTag + 1, small);
    CHAOSBED_RETURN_IF_ERROR(check(bad_tag->isComplete() && bad_tag->status().code() == StatusCode::kInvalidArgument,
                                   "a tag beyond kMaxUserTag gave " + bad_tag->status().toString()));
    if (t.rank() == 0) {
      const auto big = pattern(100, 9);
      CHAOSBED_RETURN_IF_ERROR(send(t, 1, 9, big, deadlineIn(seconds(20))));
    } else {
      Status s = recv(t, 0, 9, small, deadlineIn(seconds(20)));
      CHAOSBED_RETURN_IF_ERROR(check(s.code() == StatusCode::kInvalidArgument,
                                     "100 bytes into a 10-byte buffer gave " + s.toString()));
    }
    return goodbye(t);
  });
}

// cancel() completes a pending receive with an error, after which its buffer is the caller's again.
TEST_P(TransportContract, ACancelledReceiveCompletesAndReleasesItsBuffer) {
  runPair(GetParam(), [](Transport& t) -> Status {
    if (t.rank() == 1) {
      std::vector<std::byte> buf(64);
      RequestPtr r = t.irecv(0, 5, buf);  // nobody sends on tag 5
      r->cancel();
      const Deadline d = deadlineIn(seconds(20));
      while (!r->isComplete() && SteadyClock::now() < d) t.progress(d);
      CHAOSBED_RETURN_IF_ERROR(check(r->isComplete(), "a cancelled receive never completed"));
      CHAOSBED_RETURN_IF_ERROR(check(!r->status().isOk(), "a cancelled receive completed OK"));
      CHAOSBED_RETURN_IF_ERROR(check(!r->bufferInUse(), "a cancelled receive still holds its buffer"));
    }
    return goodbye(t);
  });
}

// failPeer (the control plane's verdict) fails the peer's pending and later operations with the verdict,
// counts as a failure, and sticks in peerStatus; the peer, once this rank is gone, sees its own pending
// receive fail too (not time out).
TEST_P(TransportContract, AVerdictFailsThePeersPendingAndLaterOperationsAndItsExitFailsTheOther) {
  runPair(GetParam(), [](Transport& t) -> Status {
    if (t.rank() == 0) {
      int never = 0;
      RequestPtr r = t.irecv(1, 8, asWritableBytes(std::span(&never, 1)));
      Status s = wait(t, r, deadlineIn(seconds(30)));
      return check(!s.isOk() && s.code() != StatusCode::kTimeout,
                   "a receive from a rank that left ended with " + s.toString());
    }
    int never = 0, v = 1;
    RequestPtr pending = t.irecv(0, 7, asWritableBytes(std::span(&never, 1)));
    const uint64_t failures = t.failureCount();
    t.failPeer(0, Status::peerLost(0, "the contract's verdict"));
    auto isVerdict = [](const Status& s) {
      return s.code() == StatusCode::kPeerLost && s.message().find("the contract's verdict") != std::string::npos;
    };
    Status s = wait(t, pending, deadlineIn(seconds(20)));
    CHAOSBED_RETURN_IF_ERROR(check(isVerdict(s), "the pending receive ended with " + s.toString()));
    CHAOSBED_RETURN_IF_ERROR(check(isVerdict(t.peerStatus(0)), "peerStatus(0) is " + t.peerStatus(0).toString()));
    CHAOSBED_RETURN_IF_ERROR(check(t.failureCount() > failures, "failureCount did not grow"));
    s = send(t, 0, 7, asBytes(std::span(&v, 1)), deadlineIn(seconds(20)));
    return check(isVerdict(s), "a later send ended with " + s.toString());
  });
}

INSTANTIATE_TEST_SUITE_P(EveryTransport, TransportContract, ::testing::ValuesIn(kTransports),
                         [](const ::testing::TestParamInfo<TransportKind>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace chaosbed
