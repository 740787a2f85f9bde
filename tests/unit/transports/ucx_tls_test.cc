// UCX_TLS without shared memory: the user's choice of transports is kept, the shared-memory ones (mm FIFOs
// a killed sender can wedge, CMA that aborts with a dead partner) are taken out.
// UCX_NET_DEVICES: the transport's option (loopback by default) wins over the environment.

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "transports/ucx/transport.h"

namespace chaosbed {
namespace {

TEST(UcxTlsWithoutSharedMemory, OffByDefault) { EXPECT_FALSE(UcxOptions{}.shared_memory); }

TEST(UcxTlsWithoutSharedMemory, UnsetOrAllExcludesEverySharedMemoryTransport) {
  EXPECT_EQ(tlsWithoutSharedMemory(""), "^sm");
  EXPECT_EQ(tlsWithoutSharedMemory("all"), "^sm");
}

TEST(UcxTlsWithoutSharedMemory, AnExclusionListGainsThemOnce) {
  EXPECT_EQ(tlsWithoutSharedMemory("^tcp"), "^tcp,sm");
  EXPECT_EQ(tlsWithoutSharedMemory("^cma,ud,sm"), "^ud,sm");
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

// The transports (tls/device) of every resource a real UCX context opens with UCX_TLS=`tls`.
std::vector<std::string> ucxResources(const std::string& tls) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return {"ucp_config_read failed"};
  if (ucp_config_modify(config, "TLS", tls.c_str()) != UCS_OK) {
    ucp_config_release(config);
    return {"ucp_config_modify failed"};
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  const ucs_status_t st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) return {"ucp_init failed"};
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  ucp_context_print_info(context, out);
  std::fclose(out);
  ucp_cleanup(context);
  std::vector<std::string> resources;  // lines "#      resource 1  :  md 1  dev 1  flags -- tcp/lo"
  std::istringstream lines(std::string(text, size));
  std::free(text);
  for (std::string line; std::getline(lines, line);)
    if (line.find("resource") != std::string::npos) resources.push_back(line.substr(line.rfind(' ') + 1));
  return resources;
}

bool namesSharedMemory(const std::vector<std::string>& resources) {
  for (const std::string& r : resources)
    for (const char* shm : {"posix/", "sysv/", "cma/", "xpmem/", "knem/"})
      if (r.rfind(shm, 0) == 0) return true;
  return false;
}

TEST(UcxTlsWithoutSharedMemory, RealUcxOpensNoSharedMemoryTransportButTcp) {
  ASSERT_TRUE(namesSharedMemory(ucxResources("all")));  // else this host proves nothing
  for (const std::string user : {"", "all", "^ud"}) {
    const std::vector<std::string> resources = ucxResources(tlsWithoutSharedMemory(user));
    EXPECT_FALSE(namesSharedMemory(resources)) << "UCX_TLS=" << tlsWithoutSharedMemory(user);
    EXPECT_TRUE(std::any_of(resources.begin(), resources.end(), [](auto& r) { return r.rfind("tcp/", 0) == 0; }))
        << "UCX_TLS=" << tlsWithoutSharedMemory(user);
  }
}

TEST(UcxTlsIncludesTcp, ByDefaultByNameAndUnlessExcluded) {
  EXPECT_TRUE(tlsIncludesTcp(""));
  EXPECT_TRUE(tlsIncludesTcp("all"));
  EXPECT_TRUE(tlsIncludesTcp("self,tcp"));
  EXPECT_TRUE(tlsIncludesTcp("^sm"));
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
