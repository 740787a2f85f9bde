// The base library's Status helpers: errno texts as every layer reports a failed system call.

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "transports/base/status.h"

namespace chaosbed {
namespace {

TEST(BaseStatus, ErrnoTextIsTheSystemsMessageForThatValue) {
  EXPECT_EQ(errnoText(ENOENT), std::string(std::strerror(ENOENT)));
  EXPECT_EQ(errnoText(ENOSPC), std::string(std::strerror(ENOSPC)));
  EXPECT_NE(errnoText(ENOENT), errnoText(EACCES));
}

TEST(BaseStatus, ErrnoTextOfACallNamesTheCallAndTheCurrentErrno) {
  errno = EBADF;
  EXPECT_EQ(errnoText("close"), "close: " + std::string(std::strerror(EBADF)));
}

TEST(BaseStatus, FromErrnoIsAnIoErrorNamingTheCallAndTheErrno) {
  errno = ENOSPC;
  const Status s = Status::fromErrno("/tmp/x: write failed");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "/tmp/x: write failed: " + std::string(std::strerror(ENOSPC)));
  EXPECT_EQ(Status::fromErrno("open", EACCES).message(), "open: " + std::string(std::strerror(EACCES)));
}

TEST(BaseStatus, WithContextPrependsAndKeepsCodeAndPeer) {
  const Status s = Status::peerLost(3, "connection reset").withContext("allreduce");
  EXPECT_EQ(s.code(), StatusCode::kPeerLost);
  EXPECT_EQ(s.peer(), 3);
  EXPECT_EQ(s.message(), "allreduce: connection reset");
  EXPECT_TRUE(Status::ok().withContext("x").isOk());
}

}  // namespace
}  // namespace chaosbed
