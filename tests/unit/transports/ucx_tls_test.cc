// UCX_TLS without shared memory: the user's choice of transports is kept, the shared-memory ones (mm FIFOs
// a killed sender can wedge, CMA that aborts with a dead partner) are taken out.
// UCX_NET_DEVICES: the transport's option (loopback by default) wins over the environment.

#include <gtest/gtest.h>

#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

TEST(UcxTlsWithoutSharedMemory, OffByDefault) { EXPECT_FALSE(UcxOptions{}.shared_memory); }

TEST(UcxTlsWithoutSharedMemory, UnsetOrAllExcludesEverySharedMemoryTransport) {
  EXPECT_EQ(tlsWithoutSharedMemory(""), "^posix,sysv,xpmem,knem,cma");
  EXPECT_EQ(tlsWithoutSharedMemory("all"), "^posix,sysv,xpmem,knem,cma");
}

TEST(UcxTlsWithoutSharedMemory, AnExclusionListGainsThemOnce) {
  EXPECT_EQ(tlsWithoutSharedMemory("^tcp"), "^tcp,posix,sysv,xpmem,knem,cma");
  EXPECT_EQ(tlsWithoutSharedMemory("^cma,ud,sm"), "^ud,posix,sysv,xpmem,knem,cma");
}

TEST(UcxTlsWithoutSharedMemory, AnInclusionListLosesThemAndTheirAliases) {
  EXPECT_EQ(tlsWithoutSharedMemory("tcp"), "tcp");
  EXPECT_EQ(tlsWithoutSharedMemory("posix,cma,tcp"), "tcp");
  EXPECT_EQ(tlsWithoutSharedMemory("sm,self,tcp"), "self,tcp");
  EXPECT_EQ(tlsWithoutSharedMemory("mm,rc,sysv"), "rc");
}

TEST(UcxTlsWithoutSharedMemory, NothingLeftIsEmptySoTheCallerCanRefuse) {
  EXPECT_EQ(tlsWithoutSharedMemory("shm"), "");
  EXPECT_EQ(tlsWithoutSharedMemory("posix,self"), "");
}

TEST(UcxTlsIncludesTcp, ByDefaultByNameAndUnlessExcluded) {
  EXPECT_TRUE(tlsIncludesTcp(""));
  EXPECT_TRUE(tlsIncludesTcp("all"));
  EXPECT_TRUE(tlsIncludesTcp("self,tcp"));
  EXPECT_TRUE(tlsIncludesTcp("^posix,sysv,xpmem,knem,cma"));
  EXPECT_FALSE(tlsIncludesTcp("^tcp,posix"));
  EXPECT_FALSE(tlsIncludesTcp("rc,ud"));
  EXPECT_FALSE(tlsIncludesTcp("tcpx"));
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
