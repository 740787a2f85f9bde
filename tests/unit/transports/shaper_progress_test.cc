// LinkShaper::progress over an inner transport that behaves like UCX: a small send completes inside isend,
// and progress() sleeps until the *next* completion or its deadline. A send that the shaper releases from
// progress() must end that progress() call; before this was so, a mirrored step whose last message left a
// shaped link sat out the whole collective timeout (#12's slow-link stall).

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "transports/shaper/link_shaper.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;

class DoneRequest final : public Request {
 public:
  explicit DoneRequest(int peer) : peer_(peer) {}
  bool isComplete() const override { return true; }
  Status status() const override { return Status::ok(); }
  int peer() const override { return peer_; }
  int source() const override { return peer_; }
  size_t receivedBytes() const override { return 0; }
  void cancel() override {}

 private:
  int peer_;
};

// Every send completes at once, nothing else ever completes: progress() sleeps out its deadline.
class InlineCompletionTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "inline"; }
  RequestPtr isend(int peer, Tag, std::span<const std::byte>) override { return std::make_unique<DoneRequest>(peer); }
  RequestPtr irecv(int peer, Tag, std::span<std::byte>) override { return std::make_unique<DoneRequest>(peer); }
  void progress(Deadline until) override { std::this_thread::sleep_until(until); }
  Status peerStatus(int) const override { return Status::ok(); }
  uint64_t failureCount() const override { return 0; }
  void failPeer(int, const Status&) override {}
  Status reconnect(int, Deadline) override { return Status::ok(); }
};

TEST(LinkShaperProgress, ASendReleasedInsideProgressEndsThatCall) {
  LinkShaper shaper(std::make_unique<InlineCompletionTransport>());
  constexpr auto kLatency = 5ms;
  LinkParams p;
  p.latency = kLatency;
  ASSERT_TRUE(shaper.setLink(1, p).isOk());
  std::array<std::byte, 32> header{};
  const auto posted = SteadyClock::now();
  RequestPtr send = shaper.isend(1, 7, header);
  EXPECT_FALSE(send->isComplete()) << "a send on a 5 ms link left at once";
  // Let the send fall due before anyone drives progress, as it does when the caller was busy receiving:
  // the first pump() of the next progress() call then releases it.
  while (SteadyClock::now() < posted + kLatency) std::this_thread::sleep_for(1ms);
  const Deadline deadline = deadlineIn(5s);
  ASSERT_TRUE(wait(shaper, send, deadline).isOk());
  EXPECT_LT(SteadyClock::now(), deadline) << "the wait slept out its deadline with its send complete";
}

TEST(LinkShaperProgress, AHeldSendWaitsOutItsLatencyThenLeaves) {
  LinkShaper shaper(std::make_unique<InlineCompletionTransport>());
  LinkParams p;
  p.latency = 20ms;
  ASSERT_TRUE(shaper.setLink(1, p).isOk());
  std::array<std::byte, 32> header{};
  const auto posted = SteadyClock::now();
  RequestPtr send = shaper.isend(1, 7, header);
  const Deadline deadline = deadlineIn(5s);
  ASSERT_TRUE(wait(shaper, send, deadline).isOk());
  EXPECT_GE(SteadyClock::now() - posted, 20ms);
  EXPECT_LT(SteadyClock::now(), deadline);
  EXPECT_EQ(shaper.heldCount(), 0u);
}

}  // namespace
}  // namespace chaosbed
