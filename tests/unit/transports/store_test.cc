// Bootstrap store: set/get/add/contains, server-side blocking get with deadlines, concurrency through one
// client, and a dead server turning into Unavailable.

#include "transports/bootstrap/store.h"

#include <gtest/gtest.h>

#include <thread>

namespace chaosbed {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct StoreFixture : ::testing::Test {
  void SetUp() override {
    auto server = startStoreServer("127.0.0.1:0", secret_);
    ASSERT_TRUE(server.isOk()) << server.status().toString();
    server_ = std::move(server).value();
    auto store = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    store_ = std::move(store).value();
  }
  Secret secret_ = *Secret::generate();
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFixture, SetThenGetReturnsTheValueAndSetOverwrites) {
  ASSERT_TRUE(store_->set("a", "one").isOk());
  auto v = store_->get("a", deadlineIn(seconds(1)));
  ASSERT_TRUE(v.isOk()) << v.status().toString();
  EXPECT_EQ(*v, "one");
  ASSERT_TRUE(store_->set("a", "two").isOk());
  EXPECT_EQ(*store_->get("a", deadlineIn(seconds(1))), "two");
}

TEST_F(StoreFixture, ValuesAreArbitraryBytes) {
  std::string binary("\0\x01\xff zero\0", 9);
  std::string big(3 << 20, 'x');
  ASSERT_TRUE(store_->set(std::string("k\0ey", 4), binary).isOk());
  ASSERT_TRUE(store_->set("big", big).isOk());
  EXPECT_EQ(*store_->get(std::string("k\0ey", 4), deadlineIn(seconds(1))), binary);
  EXPECT_EQ(*store_->get("big", deadlineIn(seconds(1))), big);
}

TEST_F(StoreFixture, AddCountsFromZeroAndIsReadableAsText) {
  EXPECT_EQ(*store_->add("n", 1), 1);
  EXPECT_EQ(*store_->add("n", 5), 6);
  EXPECT_EQ(*store_->add("n", -7), -1);
  EXPECT_EQ(*store_->get("n", deadlineIn(seconds(1))), "-1");
  ASSERT_TRUE(store_->set("text", "abc").isOk());
  auto bad = store_->add("text", 1);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("text"), std::string::npos) << bad.status().toString();
}

TEST_F(StoreFixture, ContainsDoesNotBlock) {
  EXPECT_FALSE(*store_->contains("x"));
  ASSERT_TRUE(store_->set("x", "").isOk());
  EXPECT_TRUE(*store_->contains("x"));
}

TEST_F(StoreFixture, GetOfAMissingKeyTimesOutAtTheDeadline) {
  auto start = SteadyClock::now();
  auto v = store_->get("never", start + milliseconds(100));
  auto took = SteadyClock::now() - start;
  ASSERT_FALSE(v.isOk());
  EXPECT_EQ(v.status().code(), StatusCode::kTimeout);
  EXPECT_NE(v.status().message().find("never"), std::string::npos);
  EXPECT_GE(took, milliseconds(99));  // the server's clock rounds to milliseconds
  EXPECT_LT(took, milliseconds(5000));  // bounded, not a hang; generous for a loaded CI machine
  // The client stays usable after a timeout.
  EXPECT_TRUE(store_->set("after", "ok").isOk());
}

TEST_F(StoreFixture, BlockedGetIsAnsweredBySetFromAnotherThreadOfTheSameClient) {
  Result<std::string> got = Status::internal("not run");
  std::thread waiter([&] { got = store_->get("late", deadlineIn(seconds(10))); });
  // The waiter holds one connection while blocked; this set uses another and wakes it.
  ASSERT_TRUE(store_->set("late", "here").isOk());
  waiter.join();
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(*got, "here");
}

TEST_F(StoreFixture, ManyClientsCountConcurrently) {
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto c = connectStore(server_->address(), secret_, deadlineIn(seconds(5)));
      ASSERT_TRUE(c.isOk());
      for (int j = 0; j < kAdds; ++j) ASSERT_TRUE((*c)->add("shared", 1).isOk());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(*store_->add("shared", 0), kClients * kAdds);
}

TEST_F(StoreFixture, DeadServerIsUnavailableNotAHang) {
  server_.reset();
  auto start = SteadyClock::now();
  auto v = store_->get("k", deadlineIn(seconds(10)));
  ASSERT_FALSE(v.isOk());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable) << v.status().toString();
  EXPECT_LT(SteadyClock::now() - start, seconds(2));
  EXPECT_EQ(store_->set("k", "v").code(), StatusCode::kUnavailable);
}

TEST_F(StoreFixture, ServerStoppingWhileAGetIsBlockedIsUnavailable) {
  Result<std::string> got = Status::internal("not run");
  std::thread waiter([&] { got = store_->get("never", deadlineIn(seconds(30))); });
  // Whether the get is already parked on the server or not yet sent when the server stops, it must end in
  // Unavailable promptly rather than wait for its 30 s deadline.
  ASSERT_TRUE(store_->set("sync", "1").isOk());
  server_.reset();
  waiter.join();
  ASSERT_FALSE(got.isOk());
  EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().toString();
}

TEST(Store, BadAddressesAreNamed) {
  const Secret secret = *Secret::generate();
  auto s = startStoreServer("127.0.0.1", secret);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("127.0.0.1"), std::string::npos);
  auto c = connectStore("localhost:99999", secret, deadlineIn(milliseconds(100)));
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("99999"), std::string::npos);
}

TEST(Store, ConnectToNothingTimesOutAtTheDeadline) {
  // Find a free port by binding and releasing a server.
  const Secret secret = *Secret::generate();
  std::string address;
  {
    auto s = startStoreServer("127.0.0.1:0", secret);
    ASSERT_TRUE(s.isOk());
    address = (*s)->address();
  }
  auto start = SteadyClock::now();
  auto c = connectStore(address, secret, start + milliseconds(150));
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.status().code(), StatusCode::kTimeout) << c.status().toString();
  EXPECT_LT(SteadyClock::now() - start, seconds(2));
}

}  // namespace
}  // namespace chaosbed
