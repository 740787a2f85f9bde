// FaultyTransport over the loopback transport: exact, deterministic fault injection, and what the
// collectives make of each fault.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/testing/loopback_transport.h"
#include "transports/collective.h"
#include "transports/faulty/faulty_transport.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using testing::LoopbackHub;

std::span<std::byte> bytesOf(std::vector<int>& v) { return std::as_writable_bytes(std::span(v)); }

TEST(FaultyTransport, FailsExactlyTheNthSendToAPeer) {
  LoopbackHub hub(3);
  FaultyTransport f(hub.transport(0));
  auto r1 = hub.transport(1);
  ASSERT_TRUE(f.failNthSend(1, 3, Status::ioError("disk on fire")).isOk());
  std::vector<int> v{1};
  EXPECT_TRUE(send(f, 2, 1, bytesOf(v), deadlineIn(1s)).isOk());  // other peers don't count
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());
  Status third = send(f, 1, 1, bytesOf(v), deadlineIn(1s));
  EXPECT_EQ(third.code(), StatusCode::kIoError);
  EXPECT_EQ(third.message(), "disk on fire");
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());  // one-shot, and the peer stays usable
  EXPECT_TRUE(f.peerStatus(1).isOk());
  EXPECT_EQ(f.fired(), 1u);
  // Exactly three messages arrived at rank 1.
  std::vector<int> got(1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(recv(*r1, 0, 1, bytesOf(got), deadlineIn(1s)).isOk());
  EXPECT_EQ(recv(*r1, 0, 1, bytesOf(got), deadlineIn(10ms)).code(), StatusCode::kTimeout);
}

TEST(FaultyTransport, DroppedSendsSucceedButNeverArrive) {
  LoopbackHub hub(2);
  FaultyTransport f(hub.transport(0));
  auto r1 = hub.transport(1);
  auto id = f.dropSendsTo(1);
  ASSERT_TRUE(id.isOk());
  std::vector<int> v{5}, got(1);
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());
  EXPECT_EQ(recv(*r1, 0, 1, bytesOf(got), deadlineIn(10ms)).code(), StatusCode::kTimeout);
  EXPECT_EQ(f.fired(), 2u);
  f.removeRule(*id);
  EXPECT_TRUE(send(f, 1, 1, bytesOf(v), deadlineIn(1s)).isOk());
  EXPECT_TRUE(recv(*r1, 0, 1, bytesOf(got), deadlineIn(1s)).isOk());
  EXPECT_EQ(got[0], 5);
}

TEST(FaultyTransport, BrokenPeerFailsLikeUcxAndSticks) {
  LoopbackHub hub(2);
  FaultyTransport f(hub.transport(0));
  std::vector<int> buf(1);
  auto pending = f.irecv(1, 1, bytesOf(buf));
  const uint64_t before = f.failureCount();
  f.breakPeer(1);
  EXPECT_GT(f.failureCount(), before);
  ASSERT_TRUE(pending->isComplete());
  EXPECT_EQ(pending->status().code(), StatusCode::kPeerLost);
  EXPECT_EQ(pending->status().peer(), 1);
  Status later = send(f, 1, 1, bytesOf(buf), deadlineIn(1s));
  EXPECT_EQ(later.toString(), "PeerLost(rank 1): ucx: Connection reset by remote peer");
  EXPECT_EQ(recv(f, 1, 2, bytesOf(buf), deadlineIn(1s)).code(), StatusCode::kPeerLost);
  ASSERT_TRUE(f.reconnect(1, deadlineIn(1s)).isOk());
  EXPECT_TRUE(f.peerStatus(1).isOk());
}

TEST(FaultyTransport, RuleValidation) {
  LoopbackHub hub(2);
  FaultyTransport f(hub.transport(0));
  EXPECT_EQ(f.addRule({.op = FaultOp::kRecv, .action = FaultAction::kDrop}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.addRule({.peer = 9}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.addRule({.status = Status::ok()}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.failNthSend(1, 0, Status::ioError("x")).status().code(), StatusCode::kInvalidArgument);
}

TEST(FaultyTransport, ReceiveRulesAndSkipCounts) {
  LoopbackHub hub(2);
  FaultyTransport f(hub.transport(0));
  auto id = f.addRule({.op = FaultOp::kRecv, .peer = 1, .skip = 1, .times = 2, .status = Status::dataLoss("crc")});
  ASSERT_TRUE(id.isOk());
  std::vector<int> buf(1);
  auto r0 = f.irecv(1, 1, bytesOf(buf));
  EXPECT_FALSE(r0->isComplete());  // skipped: went to the inner transport
  auto r1 = f.irecv(1, 1, bytesOf(buf));
  auto r2 = f.irecv(kAnyPeer, 1, bytesOf(buf));  // kAnyPeer is not peer 1
  auto r3 = f.irecv(1, 1, bytesOf(buf));
  auto r4 = f.irecv(1, 1, bytesOf(buf));
  EXPECT_EQ(r1->status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(r2->isComplete());
  EXPECT_EQ(r3->status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(r4->isComplete());  // the rule retired after two
  EXPECT_EQ(f.fired(), 2u);
}

// A collective over faulty transports: failing one step on one rank makes that rank fail with the injected
// status at once; the others notice through their own deadline, and p2p traffic is untouched by the rule.
TEST(FaultyTransport, FailNextCollectiveStepHitsOnlyCollectives) {
  LoopbackHub hub(3);
  std::vector<std::unique_ptr<FaultyTransport>> f;
  for (int r = 0; r < 3; ++r) f.push_back(std::make_unique<FaultyTransport>(hub.transport(r)));
  ASSERT_TRUE(f[1]->failNextCollectiveStep().isOk());
  std::vector<int> v{1};
  ASSERT_TRUE(send(*f[1], 2, 77, bytesOf(v), deadlineIn(1s)).isOk());  // p2p: not a collective tag
  std::vector<Status> out(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto comm = worldCommunicator(f[static_cast<size_t>(r)].get());
      std::vector<float> x(100, 1.0f);
      out[static_cast<size_t>(r)] = comm.isOk() ? allreduce(*comm, x, deadlineIn(200ms)) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(out[1].code(), StatusCode::kAborted) << out[1].toString();
  EXPECT_NE(out[1].message().find("allreduce(epoch 0, op 0"), std::string::npos) << out[1].toString();
  EXPECT_FALSE(out[0].isOk());
  EXPECT_FALSE(out[2].isOk());
  EXPECT_EQ(f[1]->fired(), 1u);
}

// A broken peer in the middle of a ring: every member that watches it aborts naming it.
TEST(FaultyTransport, BrokenPeerAbortsAllreduceNamingIt) {
  LoopbackHub hub(4);
  std::vector<std::unique_ptr<FaultyTransport>> f;
  for (int r = 0; r < 4; ++r) f.push_back(std::make_unique<FaultyTransport>(hub.transport(r)));
  std::vector<Status> out(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {  // rank 3 never joins; the others learn it is gone from their backend
    threads.emplace_back([&, r] {
      auto comm = worldCommunicator(f[static_cast<size_t>(r)].get());
      std::vector<float> x(1000, 1.0f);
      f[static_cast<size_t>(r)]->breakPeer(3);
      out[static_cast<size_t>(r)] = comm.isOk() ? allreduce(*comm, x, deadlineIn(5s)) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)].code(), StatusCode::kPeerLost) << out[static_cast<size_t>(r)].toString();
    EXPECT_EQ(out[static_cast<size_t>(r)].peer(), 3) << out[static_cast<size_t>(r)].toString();
  }
}

}  // namespace
}  // namespace chaosbed
