// NodeCgroup's file logic on fake hierarchies (plain directories standing in for v1 and v2 mounts), the
// quota overcommit warning, name validation, and one quick round trip on the real hierarchy when writable.
// The real-process checks (quota fidelity, freezing a running child) are in
// tests/integration/launcher_isolation_test.cc.

#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/isolation/cgroup.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

class FakeHierarchy : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("chaosbed-fake-cgroup-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "cpu");
    fs::create_directories(root_ / "freezer");
    fs::create_directories(root_ / "unified");
  }
  void TearDown() override { fs::remove_all(root_); }

  CgroupRoots v1() const {
    CgroupRoots r;
    r.version = 1;
    r.cpu_root = root_ / "cpu";
    r.freezer_root = root_ / "freezer";
    return r;
  }
  CgroupRoots v2() const {
    CgroupRoots r;
    r.version = 2;
    r.unified_root = root_ / "unified";
    return r;
  }

  fs::path root_;
};

TEST_F(FakeHierarchy, V1LayoutAndQuotaFiles) {
  auto cg = NodeCgroup::create("exp1", "worker-0", v1());
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  fs::path cpu = root_ / "cpu/chaosbed/exp1/worker-0", freezer = root_ / "freezer/chaosbed/exp1/worker-0";
  EXPECT_EQ(cg->paths(), (std::vector<std::string>{cpu.string(), freezer.string()}));
  EXPECT_EQ(cg->node(), "worker-0");
  EXPECT_EQ(cg->group(), "exp1");
  put(cpu / "cpu.cfs_period_us", "100000\n");
  put(cpu / "cpu.cfs_quota_us", "-1\n");
  EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 0.0);
  ASSERT_TRUE(cg->setCpuLimit(0.25).isOk());
  EXPECT_EQ(slurp(cpu / "cpu.cfs_quota_us"), "25000");
  EXPECT_EQ(slurp(cpu / "cpu.cfs_period_us"), "100000");
  EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 0.25);
  ASSERT_TRUE(cg->setCpuLimit(1.5).isOk());
  EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 1.5);
  ASSERT_TRUE(cg->setCpuLimit(0).isOk());
  EXPECT_EQ(slurp(cpu / "cpu.cfs_quota_us"), "-1");
  for (double bad : {-1.0, 0.001, std::nan("")}) {
    Status s = cg->setCpuLimit(bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("worker-0"), std::string::npos) << s.message();
  }

  put(freezer / "freezer.state", "THAWED\n");
  put(freezer / "cgroup.procs", "12\n34\n");
  EXPECT_FALSE(cg->isFrozen().value());
  EXPECT_EQ(cg->processes().value(), (std::vector<pid_t>{12, 34}));
  // A fake file keeps what was written, so FROZEN "arrives" at once.
  ASSERT_TRUE(cg->freeze().isOk());
  EXPECT_TRUE(cg->isFrozen().value());
  ASSERT_TRUE(cg->thaw().isOk());
  EXPECT_EQ(slurp(freezer / "freezer.state"), "THAWED");
  EXPECT_EQ(cg->cpuUsage().status().code(), StatusCode::kUnavailable);  // no cpuacct co-mounted
}

TEST_F(FakeHierarchy, V2LayoutQuotaAndFreezeTimeout) {
  put(root_ / "unified/cgroup.subtree_control", "memory\n");
  auto cg = NodeCgroup::create("exp2", "ps-0", v2());
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  fs::path dir = root_ / "unified/chaosbed/exp2/ps-0";
  EXPECT_EQ(cg->paths(), std::vector<std::string>{dir.string()});
  EXPECT_EQ(slurp(root_ / "unified/cgroup.subtree_control"), "+cpu");  // asked the root to delegate cpu

  Status no_cpu = cg->setCpuLimit(0.5);
  EXPECT_EQ(no_cpu.code(), StatusCode::kUnavailable);
  EXPECT_NE(no_cpu.message().find("cpu.max"), std::string::npos) << no_cpu.message();
  put(dir / "cpu.max", "max 100000\n");
  EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 0.0);
  ASSERT_TRUE(cg->setCpuLimit(0.5).isOk());
  EXPECT_EQ(slurp(dir / "cpu.max"), "50000 100000");
  EXPECT_DOUBLE_EQ(cg->cpuLimit().value(), 0.5);
  put(dir / "cpu.stat", "usage_usec 1234\nuser_usec 1000\n");
  EXPECT_EQ(cg->cpuUsage().value(), std::chrono::microseconds(1234));

  put(dir / "cgroup.freeze", "0\n");
  put(dir / "cgroup.events", "populated 1\nfrozen 0\n");
  Status late = cg->freeze(20ms);  // the kernel never reports frozen here
  EXPECT_EQ(late.code(), StatusCode::kTimeout);
  EXPECT_NE(late.message().find(dir.string()), std::string::npos) << late.message();
  EXPECT_EQ(slurp(dir / "cgroup.freeze"), "1");
  put(dir / "cgroup.events", "populated 1\nfrozen 1\n");
  EXPECT_TRUE(cg->isFrozen().value());
  ASSERT_TRUE(cg->freeze(20ms).isOk());
}

TEST_F(FakeHierarchy, ErrorsNameTheFileAndTheReason) {
  auto cg = NodeCgroup::create("exp", "w", v1());
  ASSERT_TRUE(cg.isOk());
  Status s = cg->setCpuLimit(0.5);  // the fake has no cpu.cfs_period_us
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("cpu.cfs_period_us"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();
  EXPECT_EQ(cg->addProcess(0).code(), StatusCode::kInvalidArgument);
}

TEST_F(FakeHierarchy, NamesAreValidated) {
  for (const char* bad : {"", ".", "..", "a/b", "a b", "x\n"}) {
    EXPECT_EQ(NodeCgroup::create(bad, "n", v1()).status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(NodeCgroup::create("g", bad, v1()).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(fs::exists(root_ / "cpu/chaosbed/g"));
  EXPECT_EQ(removeGroup("../etc", v1()).code(), StatusCode::kInvalidArgument);
}

TEST_F(FakeHierarchy, ListAndRemoveGroups) {
  ASSERT_TRUE(NodeCgroup::create("b-run", "w0", v1()).isOk());
  ASSERT_TRUE(NodeCgroup::create("a-run", "w0", v1()).isOk());
  // Fake cgroup dirs need a cgroup.procs to count as cgroups.
  for (const char* p : {"cpu/chaosbed/a-run", "cpu/chaosbed/b-run", "freezer/chaosbed/a-run",
                        "freezer/chaosbed/b-run", "cpu/chaosbed/a-run/w0", "freezer/chaosbed/a-run/w0"})
    put(root_ / p / "cgroup.procs", "");
  put(root_ / "freezer/chaosbed/a-run/w0/freezer.state", "THAWED\n");
  EXPECT_EQ(listGroups(v1()).value(), (std::vector<std::string>{"a-run", "b-run"}));
  // A fake directory holding files cannot be rmdir'ed: removeGroup reports which one.
  Status s = removeGroup("a-run", v1());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("a-run/w0"), std::string::npos) << s.message();
}

TEST(CpuQuotaOvercommit, WarnsWhenQuotasExceedTheCores) {
  std::vector<double> fits = {0.5, 0.5, 0.5, 0.5};
  EXPECT_FALSE(cpuQuotaOvercommit(fits, 2));
  std::vector<double> too_much = {1.0, 1.0, 0.5};
  auto w = cpuQuotaOvercommit(too_much, 2);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("2.5 cores"), std::string::npos) << *w;
  std::vector<double> unlimited = {0.5, 0};
  EXPECT_TRUE(cpuQuotaOvercommit(unlimited, 8));
  EXPECT_GE(availableCpus(), 1);
}

TEST(RealCgroup, CreateLimitFreezeDestroy) {
  CgroupSupport s = probeCgroups();
  if (!s.cpu || !s.freezer) GTEST_SKIP() << "cgroups not usable here: " << s.why_not;
  EXPECT_TRUE(s.version == 1 || s.version == 2);
  std::string group = "unit-" + std::to_string(::getpid());
  auto cg = NodeCgroup::create(group, "worker-0");
  ASSERT_TRUE(cg.isOk()) << cg.status().toString();
  ASSERT_TRUE(cg->setCpuLimit(0.3).isOk());
  EXPECT_NEAR(cg->cpuLimit().value(), 0.3, 1e-9);
  EXPECT_TRUE(cg->processes().value().empty());
  ASSERT_TRUE(cg->freeze().isOk());
  EXPECT_TRUE(cg->isFrozen().value());
  ASSERT_TRUE(cg->destroy().isOk());
  for (const auto& p : cg->paths()) EXPECT_FALSE(fs::exists(p)) << p;
  ASSERT_TRUE(removeGroup(group).isOk());
  auto groups = listGroups();
  ASSERT_TRUE(groups.isOk());
  EXPECT_EQ(std::find(groups->begin(), groups->end(), group), groups->end());
}

}  // namespace
}  // namespace chaosbed
