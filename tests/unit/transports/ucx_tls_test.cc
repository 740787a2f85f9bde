// UCX_TLS without cross-memory attach: the user's choice of transports is kept, CMA alone is taken out.

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

}  // namespace
}  // namespace chaosbed
