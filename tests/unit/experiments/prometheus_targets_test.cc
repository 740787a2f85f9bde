// experiments/run/prometheus_targets: the file_sd announcement of a run's metrics endpoint.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chaos/host_state.h"
#include "experiments/run/prometheus_targets.h"
#include "tests/testing/command.h"

namespace chaosbed::run {
namespace {

namespace fs = std::filesystem;

TEST(PrometheusTargets, PublishesAReadableFileSdGroupAndRemovesItOnExit) {
  const std::string base = testing::makeTempDir("targets");
  ASSERT_FALSE(base.empty());
  const std::string dir = base + "/t";
  const std::string owner = *chaos::ownerName(::getpid());
  std::string path;
  {
    auto t = PrometheusTarget::publish(dir, owner, "127.0.0.1:4321", {{"run_id", "r1"}, {"seed", "7"}});
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    path = t->path();
    EXPECT_EQ(path, dir + "/" + owner + ".json");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u) << "Prometheus may run as another user";
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0755u);
    const auto j = nlohmann::json::parse(testing::readFile(path));
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["targets"], nlohmann::json::array({"127.0.0.1:4321"}));
    EXPECT_EQ(j[0]["labels"]["run_id"], "r1");
    EXPECT_EQ(j[0]["labels"]["seed"], "7");
    size_t entries = 0;
    for (const auto& e : fs::directory_iterator(dir)) entries += e.is_regular_file() ? 1 : 0;
    EXPECT_EQ(entries, 1u) << "a temporary file was left beside the target";
  }
  EXPECT_FALSE(fs::exists(path)) << "the target outlived its run";
  fs::remove_all(base);
}

TEST(PrometheusTargets, TheFilesOfDeadOwnersAreRemovedAndOthersKept) {
  const std::string dir = testing::makeTempDir("targets-stale");
  ASSERT_FALSE(dir.empty());
  ::chmod(dir.c_str(), 0755);
  const std::string live = *chaos::ownerName(::getpid()) + ".json";
  const std::string dead = std::to_string(::getpid()) + ".1.json";  // this pid, but another start time
  for (const std::string& name : {live, dead, std::string("notes.json")}) std::ofstream(dir + "/" + name) << "[]\n";
  EXPECT_EQ(removeStaleTargets(dir), 1);
  EXPECT_TRUE(fs::exists(dir + "/" + live));
  EXPECT_FALSE(fs::exists(dir + "/" + dead));
  EXPECT_TRUE(fs::exists(dir + "/notes.json")) << "a file that is not ours is left alone";
  fs::remove_all(dir);
}

TEST(PrometheusTargets, ASymlinkedOrSharedDirectoryIsRefused) {
  const std::string base = testing::makeTempDir("targets-unsafe");
  ASSERT_FALSE(base.empty());
  const std::string owner = *chaos::ownerName(::getpid());
  const std::string elsewhere = base + "/elsewhere";
  fs::create_directory(elsewhere);
  fs::create_directory_symlink(elsewhere, base + "/link");
  auto linked = PrometheusTarget::publish(base + "/link", owner, "127.0.0.1:1", {});
  ASSERT_FALSE(linked.isOk());
  EXPECT_NE(linked.status().message().find("symbolic link"), std::string::npos) << linked.status().toString();
  EXPECT_TRUE(fs::is_empty(elsewhere)) << "wrote through the link";
  const std::string shared = base + "/shared";
  fs::create_directory(shared);
  ::chmod(shared.c_str(), 0777);
  auto open = PrometheusTarget::publish(shared, owner, "127.0.0.1:1", {});
  ASSERT_FALSE(open.isOk());
  EXPECT_NE(open.status().message().find("writable by group or others"), std::string::npos) << open.status().toString();
  fs::remove_all(base);
}

}  // namespace
}  // namespace chaosbed::run
