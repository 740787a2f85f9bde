// The UCX transport's control mesh (transports/ucx/control.h): a peer's exit reads as orderly only when its
// goodbye proves the run's secret. The forged case writes the frames by hand, from the wire format the
// header documents, over an authenticated connection.

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "transports/bootstrap/net.h"
#include "transports/bootstrap/secret.h"
#include "transports/ucx/control.h"

namespace chaosbed::ucx {
namespace {

struct Loss {
  int rank;
  uint64_t incarnation;
  bool orderly;
};

// A mesh for rank 0 (incarnation 1) whose first reported loss fulfils `lost`.
std::unique_ptr<ControlMesh> listeningMesh(const Secret& secret, std::promise<Loss>& lost) {
  auto mesh = ControlMesh::start(0, 1, "127.0.0.1", secret, [&lost, reported = false](int rank, uint64_t inc,
                                                                                     bool orderly) mutable {
    if (!std::exchange(reported, true)) lost.set_value({rank, inc, orderly});
  });
  EXPECT_TRUE(mesh.isOk()) << mesh.status().toString();
  return mesh.isOk() ? std::move(mesh).value() : nullptr;
}

std::string identity(int rank, uint64_t incarnation) {
  std::string out;
  net::appendU32(out, uint32_t(rank));
  net::appendU64(out, incarnation);
  return out;
}

Status writeBytes(int fd, const std::string& bytes) {
  return net::writeAll(fd, std::as_bytes(std::span(bytes)), deadlineIn(std::chrono::seconds(2)));
}

TEST(UcxControlMesh, AGoodbyeFromThePeerMakesItsExitOrderly) {
  auto secret = Secret::generate();
  ASSERT_TRUE(secret.isOk());
  std::promise<Loss> lost;
  auto a = listeningMesh(*secret, lost);
  ASSERT_NE(a, nullptr);
  {
    auto b = ControlMesh::start(1, 7, "127.0.0.1", *secret, [](int, uint64_t, bool) {});
    ASSERT_TRUE(b.isOk()) << b.status().toString();
    ASSERT_TRUE((*b)->dial(0, 1, a->address(), deadlineIn(std::chrono::seconds(2))).isOk());
    (*b)->sayGoodbye();
  }  // b closes its connections
  auto got = lost.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Loss loss = got.get();
  EXPECT_EQ(loss.rank, 1);
  EXPECT_EQ(loss.incarnation, 7u);
  EXPECT_TRUE(loss.orderly);
}

TEST(UcxControlMesh, AGoodbyeWithoutTheSecretLeavesTheExitACrash) {
  auto secret = Secret::generate();
  auto other = Secret::generate();
  ASSERT_TRUE(secret.isOk() && other.isOk());
  std::promise<Loss> lost;
  auto a = listeningMesh(*secret, lost);
  ASSERT_NE(a, nullptr);
  {
    auto fd = net::connectTcp(a->address(), deadlineIn(std::chrono::seconds(2)), /*retry=*/false);
    ASSERT_TRUE(fd.isOk()) << fd.status().toString();
    // hello {rank 1, incarnation 7, nonce, HMAC(secret, label, nonce | dialler | acceptor)}: a valid one.
    const std::string nonce = Secret::nonce(16);
    const auto hello_mac = secret->mac("chaosbed mesh hello", nonce + identity(1, 7) + identity(0, 1));
    std::string hello = identity(1, 7) + nonce;
    hello.append(reinterpret_cast<const char*>(hello_mac.data()), hello_mac.size());
    ASSERT_TRUE(writeBytes(fd->get(), hello).isOk());
    // The goodbye's layout, keyed with another secret.
    const auto bye = other->mac("chaosbed mesh goodbye", nonce + identity(1, 7) + identity(0, 1));
    ASSERT_TRUE(writeBytes(fd->get(), std::string(reinterpret_cast<const char*>(bye.data()), bye.size())).isOk());
  }  // the socket closes
  auto got = lost.get_future();
  ASSERT_EQ(got.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const Loss loss = got.get();
  EXPECT_EQ(loss.rank, 1) << "the hello was valid: the connection was rank 1's";
  EXPECT_EQ(loss.incarnation, 7u);
  EXPECT_FALSE(loss.orderly) << "a goodbye that does not prove the secret must not make the exit routine";
}

}  // namespace
}  // namespace chaosbed::ucx
