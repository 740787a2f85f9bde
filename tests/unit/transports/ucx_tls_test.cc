// UCX_TLS without cross-memory attach: the user's choice of transports is kept, CMA alone is taken out.
// UCX_NET_DEVICES: the transport's option (loopback by default) wins over the environment.

#include <gtest/gtest.h>

#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

TEST(UcxTlsWithoutCma, UnsetOrAllExcludesOnlyCma) {
  EXPECT_EQ(tlsWithoutCma(""), "^cma");
  EXPECT_EQ(tlsWithoutCma("all"), "^cma");
}

TEST(UcxTlsWithoutCma, AnExclusionListGainsCmaOnce) {
  EXPECT_EQ(tlsWithoutCma("^tcp"), "^tcp,cma");
  EXPECT_EQ(tlsWithoutCma("^cma,tcp"), "^tcp,cma");
  EXPECT_EQ(tlsWithoutCma("^cma"), "^cma");
}

TEST(UcxTlsWithoutCma, AnInclusionListLosesCmaAndTheAliasesThatHoldIt) {
  EXPECT_EQ(tlsWithoutCma("tcp"), "tcp");
  EXPECT_EQ(tlsWithoutCma("posix,cma,tcp"), "posix,tcp");
  EXPECT_EQ(tlsWithoutCma("sm,self"), "mm,knem,xpmem,self");
  EXPECT_EQ(tlsWithoutCma("shm"), "mm,knem,xpmem");
}

TEST(UcxNetDevices, LoopbackByDefaultWhateverTheEnvironmentSays) {
  EXPECT_EQ(UcxOptions{}.net_devices, "lo");
  bool overridden = true;
  EXPECT_EQ(netDevicesFor(UcxOptions{}.net_devices, nullptr, &overridden), "lo");
  EXPECT_FALSE(overridden);
  EXPECT_EQ(netDevicesFor("lo", "lo", &overridden), "lo");
  EXPECT_FALSE(overridden);
  EXPECT_EQ(netDevicesFor("lo", "eth0,mlx5_0:1", &overridden), "lo");
  EXPECT_TRUE(overridden) << "an ignored UCX_NET_DEVICES is reported, so the transport can say so";
}

TEST(UcxNetDevices, AnEmptyOptionLeavesUcxConfigurationAlone) {
  bool overridden = true;
  EXPECT_EQ(netDevicesFor("", "eth0", &overridden), "");
  EXPECT_FALSE(overridden);
  EXPECT_EQ(netDevicesFor("", nullptr, &overridden), "");
}

}  // namespace
}  // namespace chaosbed
