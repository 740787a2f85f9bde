// net::isLoopbackHost / isLoopbackAddress: what counts as loopback when deciding whether a listener stays
// on this host (the metrics endpoint's guard, the spec's metrics.listen check).

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "transports/bootstrap/net.h"

namespace chaosbed::net {
namespace {

TEST(NetLoopback, LiteralsAndLocalhostAreLoopback) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]", "::ffff:127.0.0.1", "[::ffff:127.0.0.2]"})
    EXPECT_TRUE(isLoopbackHost(host)) << host;
}

TEST(NetLoopback, WildcardsOtherAddressesAndOtherNamesAreNot) {
  for (const char* host : {"0.0.0.0", "::", "[::]", "192.0.2.2", "10.0.0.1", "128.0.0.1", "fd00::2", "[fe80::1]",
                           "::ffff:10.0.0.1", "example.com", "localhost.example.com", "", "[]", "127.0.0.1.nip.io"})
    EXPECT_FALSE(isLoopbackHost(host)) << host;
}

TEST(NetLoopback, ResolvedAddresses) {
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  ASSERT_EQ(inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr), 1);
  EXPECT_TRUE(isLoopbackAddress(reinterpret_cast<sockaddr*>(&v4)));
  ASSERT_EQ(inet_pton(AF_INET, "0.0.0.0", &v4.sin_addr), 1);
  EXPECT_FALSE(isLoopbackAddress(reinterpret_cast<sockaddr*>(&v4)));
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_addr = in6addr_loopback;
  EXPECT_TRUE(isLoopbackAddress(reinterpret_cast<sockaddr*>(&v6)));
  v6.sin6_addr = in6addr_any;
  EXPECT_FALSE(isLoopbackAddress(reinterpret_cast<sockaddr*>(&v6)));
  EXPECT_FALSE(isLoopbackAddress(nullptr));
}

}  // namespace
}  // namespace chaosbed::net
