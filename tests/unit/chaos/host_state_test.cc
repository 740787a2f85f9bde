// The host's register of runs (chaos/host_state.h) and the files the chaos layer writes, as root: never
// through a planted symlink, never in a register that someone else could have prepared.

#include "chaos/host_state.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "chaos/event_log.h"
#include "chaos/state.h"
#include "tests/testing/command.h"

namespace chaosbed::chaos {
namespace {

namespace fs = std::filesystem;


TEST(HostState, ARegisterThatIsALinkOrWritableByOthersIsRefused) {
  const std::string base = testing::makeTempDir("register");
  ASSERT_TRUE(prepareRoot(base + "/ok").isOk());
  struct stat st {};
  ASSERT_EQ(::lstat((base + "/ok").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  fs::create_directory_symlink(base + "/ok", base + "/link");
  Status link = prepareRoot(base + "/link");
  EXPECT_EQ(link.code(), StatusCode::kInvalidArgument) << link.toString();
  EXPECT_NE(link.message().find("symbolic link"), std::string::npos) << link.toString();
  fs::create_directory(base + "/open");
  fs::permissions(base + "/open", fs::perms::all);
  EXPECT_EQ(prepareRoot(base + "/open").code(), StatusCode::kInvalidArgument);
  fs::remove_all(base);
}

TEST(HostState, OwnersAreAliveOnlyWithTheSamePidAndStartTime) {
  const auto me = ownerName(::getpid());
  ASSERT_TRUE(me.has_value());
  EXPECT_TRUE(ownerAlive(*me));
  const std::string pid = me->substr(0, me->find('.'));
  EXPECT_FALSE(ownerAlive(pid + ".1")) << "a recycled pid with another start time is not the owner";
  EXPECT_FALSE(ownerAlive("not-an-owner"));
  EXPECT_FALSE(ownerAlive("0.0"));
}

TEST(HostState, AClaimIsRemovedWhenFinishedAndAliveClaimsAreNotHealed) {
  const std::string root = testing::makeTempDir("claims");
  {
    auto claim = RunClaim::create(root);
    ASSERT_TRUE(claim.isOk()) << claim.status().toString();
    ChaosState unfinished;
    unfinished.controller_pid = ::getpid();
    unfinished.entries.push_back({1, "f", "pause", "worker-0", {}});
    fs::create_directory(claim->stateDir("m"));
    ASSERT_TRUE(writeState(claim->stateDir("m"), unfinished).isOk());
    // Our own claim: alive, so the healer leaves it alone.
    const HealReport r = healDeadRuns(root);
    EXPECT_EQ(r.runs, 0);
    EXPECT_TRUE(fs::exists(claim->stateDir("m") + "/state.json"));
    unfinished.finished = true;
    ASSERT_TRUE(writeState(claim->stateDir("m"), unfinished).isOk());
  }
  EXPECT_TRUE(fs::is_empty(root)) << "a finished claim outlived its run";

  // A dead owner's claim (a pid that exists with another start time is as dead as one that does not).
  const std::string dead = root + "/" + std::to_string(::getpid()) + ".1";
  fs::create_directories(dead + "/m");
  ChaosState left;
  left.entries.push_back({1, "f", "pause", "worker-0", {}});
  ASSERT_TRUE(writeState(dead + "/m", left).isOk());
  const HealReport r = healDeadRuns(root);
  EXPECT_EQ(r.runs, 1);
  EXPECT_TRUE(r.errors.empty()) << r.errors.front();
  EXPECT_FALSE(fs::exists(dead));
  fs::remove_all(root);
}

// Seen from another PID namespace (a `chaos heal` in a container), a live run's pid names nobody or someone
// else: the owner's lock on owner.lock is what says it lives. Simulated here by a claim whose name is a dead
// pid while its lock is held, and one whose name is a live pid while nobody holds its lock.
TEST(HostState, TheOwnersLockNotItsPidSaysWhetherAClaimLives) {
  const std::string root = testing::makeTempDir("claims-lock");
  ChaosState left;
  left.entries.push_back({1, "f", "pause", "worker-0", {}});
  const std::string held = root + "/" + std::to_string(::getpid()) + ".1";  // this pid, another start time
  fs::create_directories(held + "/m");
  ASSERT_TRUE(writeState(held + "/m", left).isOk());
  const int fd = ::open((held + "/owner.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  EXPECT_TRUE(ownerAlive(std::to_string(::getpid()) + ".1", root));
  HealReport r = healDeadRuns(root);
  EXPECT_EQ(r.runs, 0) << "a run whose owner holds its lock was healed";
  EXPECT_TRUE(fs::exists(held + "/m/state.json"));
  ::close(fd);  // the owner is gone
  EXPECT_FALSE(ownerAlive(std::to_string(::getpid()) + ".1", root));
  r = healDeadRuns(root);
  EXPECT_EQ(r.runs, 1);
  EXPECT_FALSE(fs::exists(held));

  // A claim of ours, made by RunClaim, is alive by its lock; and reads as dead once the claim is gone.
  auto claim = RunClaim::create(root);
  ASSERT_TRUE(claim.isOk()) << claim.status().toString();
  EXPECT_TRUE(fs::exists(claim->dir() + "/owner.lock"));
  EXPECT_TRUE(ownerAlive(claim->owner(), root));
  fs::remove_all(root);
}

// A claim whose state cannot be read whole (truncated, or a planted link that is never followed) keeps its
// claim, with the error, instead of being removed as healed; a link's target is never acted on.
TEST(HostState, AClaimWhoseStateCannotBeReadIsKeptAndALinkIsNotFollowed) {
  const std::string root = testing::makeTempDir("claims-bad-state");
  const std::string dead = root + "/" + std::to_string(::getpid()) + ".1";
  fs::create_directories(dead + "/truncated");
  std::ofstream(dead + "/truncated/state.json") << R"({"agent_pid":0,"controller_pid":1,"entr)";
  const std::string elsewhere = testing::makeTempDir("elsewhere");
  ChaosState target;
  target.entries.push_back({1, "f", "pause", "worker-0", {}});
  ASSERT_TRUE(writeState(elsewhere, target).isOk());
  fs::create_directories(dead + "/linked");
  fs::create_symlink(elsewhere + "/state.json", dead + "/linked/state.json");
  auto via_link = readState(dead + "/linked");
  EXPECT_FALSE(via_link.isOk());
  EXPECT_NE(via_link.status().message().find("symbolic link"), std::string::npos) << via_link.status().toString();
  const HealReport r = healDeadRuns(root);
  EXPECT_EQ(r.runs, 0);
  EXPECT_EQ(r.errors.size(), 2u);
  EXPECT_TRUE(fs::exists(dead + "/truncated/state.json")) << "the claim of a state it could not read was removed";
  auto untouched = readState(elsewhere);
  ASSERT_TRUE(untouched.isOk());
  EXPECT_FALSE((*untouched)->finished) << "the link's target was healed and marked finished";
  fs::remove_all(root);
  fs::remove_all(elsewhere);
}

TEST(HostState, StateAndEventFilesAreNeverWrittenThroughAPlantedSymlink) {
  const std::string dir = testing::makeTempDir("planted");
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, dir + "/state.json");
  ASSERT_TRUE(writeState(dir, ChaosState{}).isOk());
  EXPECT_EQ(testing::readFile(victim), "precious\n") << "the state was written through the link";
  EXPECT_FALSE(fs::is_symlink(dir + "/state.json")) << "the link was replaced, not followed";

  fs::create_symlink(victim, dir + "/events.jsonl");
  auto log = EventLog::open(dir + "/events.jsonl");
  EXPECT_FALSE(log.isOk()) << "an event log opened through a planted symlink";
  EXPECT_EQ(testing::readFile(victim), "precious\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed::chaos
