// core/control/failure_detector: a node is lost after timeout_s without a changing heartbeat, not before,
// once, and only once it was armed.

#include "core/control/failure_detector.h"

#include <gtest/gtest.h>

namespace chaosbed::control {
namespace {

const NodeId kW0{Role::kWorker, 0};
const NodeId kW1{Role::kWorker, 1};

TEST(FailureDetector, ASilentNodeIsLostAfterTheTimeoutAndOnlyOnce) {
  FailureDetector d(5);
  for (double t = 0; t <= 3; t += 0.5) {
    d.observe(kW0, t, t);    // wall time growing: alive
    d.observe(kW1, 1.0, t);  // silent since its first heartbeat at t = 0
  }
  EXPECT_TRUE(d.expired(4.9).empty());
  d.observe(kW0, 5, 5);
  const auto lost = d.expired(5.0);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].node, kW1);
  EXPECT_DOUBLE_EQ(lost[0].silent_since_s, 0);
  EXPECT_TRUE(d.expired(6).empty()) << "reported twice";
  EXPECT_TRUE(d.expired(9.9).empty()) << "worker-0's last heartbeat changed at 5 s";
  EXPECT_EQ(d.expired(10).size(), 1u);
}

TEST(FailureDetector, ForgetReArmsAndUnarmedNodesAreNeverLost) {
  FailureDetector d(2);
  d.observe(kW0, 1, 0);
  d.forget(kW0);  // exited: its replacement's start-up is not silence
  EXPECT_TRUE(d.expired(100).empty());
  d.observe(kW0, 0.5, 100);  // the replacement's first heartbeat arms it afresh
  EXPECT_TRUE(d.expired(101.9).empty());
  EXPECT_EQ(d.expired(102).size(), 1u);
}

}  // namespace
}  // namespace chaosbed::control
