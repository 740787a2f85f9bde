// The loopback transport (tests/testing) honours the Transport contract that the collectives, the shaper
// and the faulty decorator are tested against.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/testing/loopback_transport.h"

namespace chaosbed::testing {
namespace {

using namespace std::chrono_literals;

std::span<std::byte> bytesOf(std::vector<int>& v) { return std::as_writable_bytes(std::span(v)); }

TEST(LoopbackTransport, MatchesPerSourceAndTagInOrder) {
  LoopbackHub hub(3);
  auto t = hub.transports();
  std::vector<int> a1{1}, a2{2}, b1{10}, c1{100};
  ASSERT_TRUE(send(*t[1], 0, 7, bytesOf(a1), deadlineIn(1s)).isOk());
  ASSERT_TRUE(send(*t[1], 0, 7, bytesOf(a2), deadlineIn(1s)).isOk());
  ASSERT_TRUE(send(*t[2], 0, 7, bytesOf(b1), deadlineIn(1s)).isOk());
  ASSERT_TRUE(send(*t[1], 0, 8, bytesOf(c1), deadlineIn(1s)).isOk());

  std::vector<int> got(1);
  ASSERT_TRUE(recv(*t[0], 1, 8, bytesOf(got), deadlineIn(1s)).isOk());
  EXPECT_EQ(got[0], 100);
  ASSERT_TRUE(recv(*t[0], 2, 7, bytesOf(got), deadlineIn(1s)).isOk());
  EXPECT_EQ(got[0], 10);
  ASSERT_TRUE(recv(*t[0], 1, 7, bytesOf(got), deadlineIn(1s)).isOk());
  EXPECT_EQ(got[0], 1);
  auto any = t[0]->irecv(kAnyPeer, 7, bytesOf(got));
  ASSERT_TRUE(wait(*t[0], any, deadlineIn(1s)).isOk());
  EXPECT_EQ(got[0], 2);
  EXPECT_EQ(any->source(), 1);
  EXPECT_EQ(any->receivedBytes(), sizeof(int));
}

TEST(LoopbackTransport, PostedReceivesMatchInPostingOrder) {
  LoopbackHub hub(2);
  auto t = hub.transports();
  std::vector<int> x(1), y(1), v1{5}, v2{6};
  auto r1 = t[0]->irecv(1, 3, bytesOf(x));
  auto r2 = t[0]->irecv(kAnyPeer, 3, bytesOf(y));
  EXPECT_FALSE(r1->isComplete());
  ASSERT_TRUE(send(*t[1], 0, 3, bytesOf(v1), deadlineIn(1s)).isOk());
  ASSERT_TRUE(send(*t[1], 0, 3, bytesOf(v2), deadlineIn(1s)).isOk());
  std::vector<RequestPtr> both;
  both.push_back(std::move(r1));
  both.push_back(std::move(r2));
  ASSERT_TRUE(waitAll(*t[0], both, deadlineIn(1s)).isOk());
  EXPECT_EQ(x[0], 5);
  EXPECT_EQ(y[0], 6);
}

TEST(LoopbackTransport, LargeSendsCompleteOnlyWhenReceived) {
  LoopbackHub hub(2, {.eager_limit = 16});
  auto t = hub.transports();
  std::vector<int> big(100, 7), small{1}, into(100);
  auto s_big = t[0]->isend(1, 1, bytesOf(big));
  auto s_small = t[0]->isend(1, 2, bytesOf(small));
  EXPECT_FALSE(s_big->isComplete());
  EXPECT_TRUE(s_small->isComplete());
  ASSERT_TRUE(recv(*t[1], 0, 1, bytesOf(into), deadlineIn(1s)).isOk());
  EXPECT_TRUE(s_big->isComplete());
  EXPECT_EQ(into, big);
}

TEST(LoopbackTransport, TooLongMessageFailsTheReceive) {
  LoopbackHub hub(2);
  auto t = hub.transports();
  std::vector<int> msg(4), into(2);
  ASSERT_TRUE(send(*t[0], 1, 1, bytesOf(msg), deadlineIn(1s)).isOk());
  Status s = recv(*t[1], 0, 1, bytesOf(into), deadlineIn(1s));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("exceeds the receive buffer"), std::string::npos) << s.toString();
}

TEST(LoopbackTransport, FailPeerIsStickyUntilReconnect) {
  LoopbackHub hub(3);
  auto t = hub.transports();
  std::vector<int> buf(1);
  auto pending = t[0]->irecv(1, 1, bytesOf(buf));
  const uint64_t before = t[0]->failureCount();
  t[0]->failPeer(1, Status::peerLost(1, "heartbeat missed"));
  t[0]->failPeer(1, Status::peerLost(1, "again"));  // idempotent
  EXPECT_EQ(t[0]->failureCount(), before + 1);
  ASSERT_TRUE(pending->isComplete());
  EXPECT_EQ(pending->status().code(), StatusCode::kPeerLost);
  EXPECT_EQ(pending->status().peer(), 1);
  EXPECT_EQ(send(*t[0], 1, 1, bytesOf(buf), deadlineIn(1s)).message(), "heartbeat missed");
  EXPECT_EQ(t[0]->peerStatus(1).code(), StatusCode::kPeerLost);
  EXPECT_TRUE(t[0]->peerStatus(2).isOk());
  ASSERT_TRUE(t[0]->reconnect(1, deadlineIn(1s)).isOk());
  EXPECT_TRUE(t[0]->peerStatus(1).isOk());
  std::vector<int> v{9};
  ASSERT_TRUE(send(*t[1], 0, 1, bytesOf(v), deadlineIn(1s)).isOk());
  ASSERT_TRUE(recv(*t[0], 1, 1, bytesOf(buf), deadlineIn(1s)).isOk());
  EXPECT_EQ(buf[0], 9);
}

TEST(LoopbackTransport, KillFailsEveryoneElsesOperationsWithThatRank) {
  LoopbackHub hub(3, {.eager_limit = 0});
  auto t = hub.transports();
  std::vector<int> buf(1), v{1};
  auto r = t[0]->irecv(2, 1, bytesOf(buf));
  auto s = t[1]->isend(2, 1, bytesOf(v));  // rendezvous: pending at the victim
  auto own = t[2]->irecv(0, 5, bytesOf(buf));
  hub.kill(2, "loopback: SIGKILL");
  EXPECT_EQ(r->status().code(), StatusCode::kPeerLost);
  EXPECT_EQ(r->status().peer(), 2);
  EXPECT_EQ(s->status().code(), StatusCode::kPeerLost);
  EXPECT_EQ(own->status().code(), StatusCode::kCancelled);
  EXPECT_EQ(t[1]->peerStatus(2).message(), "loopback: SIGKILL");
  EXPECT_EQ(t[0]->reconnect(2, deadlineIn(1s)).code(), StatusCode::kPeerLost);
  hub.restart(2);
  ASSERT_TRUE(t[0]->reconnect(2, deadlineIn(1s)).isOk());
  auto r2 = t[0]->irecv(2, 1, bytesOf(buf));  // rendezvous (eager_limit 0): post the receive first
  ASSERT_TRUE(send(*t[2], 0, 1, bytesOf(v), deadlineIn(1s)).isOk());
  ASSERT_TRUE(wait(*t[0], r2, deadlineIn(1s)).isOk());
  EXPECT_EQ(buf[0], 1);
}

TEST(LoopbackTransport, WaitWatchingAMemberAbortsWhenItDies) {
  LoopbackHub hub(3);
  auto t = hub.transports();
  std::vector<int> buf(1);
  std::thread killer;
  RequestPtr r = t[0]->irecv(1, 1, bytesOf(buf));
  const std::vector<int> watch{0, 1, 2};
  killer = std::thread([&] { hub.kill(2); });
  Status s = waitAll(*t[0], std::span<const RequestPtr>(&r, 1), deadlineIn(5s), watch);
  killer.join();
  EXPECT_EQ(s.code(), StatusCode::kPeerLost);
  EXPECT_EQ(s.peer(), 2);
  EXPECT_TRUE(r->isComplete());  // cancelled by waitAll
}

TEST(LoopbackTransport, CancelReleasesTheBuffer) {
  LoopbackHub hub(2, {.eager_limit = 0});
  auto t = hub.transports();
  std::vector<int> buf(1, -1), v{3};
  auto r = t[0]->irecv(1, 1, bytesOf(buf));
  r->cancel();
  EXPECT_EQ(r->status().code(), StatusCode::kCancelled);
  auto s = t[1]->isend(0, 1, bytesOf(v));
  s->cancel();
  EXPECT_EQ(s->status().code(), StatusCode::kCancelled);
  // Neither the cancelled receive nor the cancelled send takes part in matching any more.
  std::vector<int> v2{8}, other(1);
  auto s2 = t[1]->isend(0, 1, bytesOf(v2));
  ASSERT_TRUE(recv(*t[0], 1, 1, bytesOf(other), deadlineIn(1s)).isOk());
  EXPECT_EQ(other[0], 8);
  EXPECT_TRUE(s2->isComplete());
  EXPECT_EQ(buf[0], -1);
}

TEST(LoopbackTransport, ProgressWakesOnCompletionAndHonoursTheDeadline) {
  LoopbackHub hub(2);
  auto t = hub.transports();
  std::vector<int> buf(1), v{4};
  auto r = t[0]->irecv(1, 1, bytesOf(buf));
  t[0]->progress(SteadyClock::now());  // consume anything earlier
  auto start = SteadyClock::now();
  t[0]->progress(start + 20ms);
  EXPECT_GE(SteadyClock::now() - start, 20ms);
  std::thread sender([&] { ASSERT_TRUE(send(*t[1], 0, 1, bytesOf(v), deadlineIn(5s)).isOk()); });
  ASSERT_TRUE(wait(*t[0], r, deadlineIn(5s)).isOk());
  sender.join();
  EXPECT_EQ(buf[0], 4);
}

TEST(LoopbackTransport, RejectsBadArguments) {
  LoopbackHub hub(2);
  auto t = hub.transports();
  std::vector<int> buf(1);
  EXPECT_EQ(send(*t[0], 5, 1, bytesOf(buf), deadlineIn(1s)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(send(*t[0], 1, kMaxUserTag + 1, bytesOf(buf), deadlineIn(1s)).code(), StatusCode::kInvalidArgument);
  Status s = recv(*t[0], 1, 1, bytesOf(buf), deadlineIn(10ms));
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.toString();
}

}  // namespace
}  // namespace chaosbed::testing
