// Checkpoints: round trip, corruption (bit flips, truncation, trailing bytes) -> DataLoss, atomic replacement
// (readers never see a partial file; a writer killed mid-write leaves the old checkpoint and a temp file that
// the next open removes), keep-last-K and falling back over a corrupt newest checkpoint.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "core/checkpoint/checkpoint.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TrainingState makeState(uint64_t step, size_t params, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  TrainingState s;
  s.params.resize(params);
  for (float& p : s.params) p = dist(rng);
  s.optimizer = {std::vector<float>(params / 2 + 1, 0.5f), std::vector<float>(3, -1.0f)};
  s.step = step;
  s.epoch = step / 10;
  s.samples = step * 64;
  s.metadata = {{"strategy", "mirrored"}, {"seed", std::to_string(seed)}, {"empty", ""}};
  return s;
}

void flipBit(const fs::path& p, uint64_t offset, int bit) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  c = static_cast<char>(c ^ (1 << bit));
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(c);
}

std::vector<std::string> tempFiles(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().string());
  return out;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("chaosbed-ckpt-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTrip) {
  TrainingState s = makeState(1234, 100000, 1);
  std::string path = (dir_ / "a.chk").string();
  ASSERT_TRUE(saveCheckpoint(path, s).isOk());
  auto back = loadCheckpoint(path);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(*back, s);
  EXPECT_TRUE(tempFiles(dir_).empty());

  TrainingState empty;
  ASSERT_TRUE(saveCheckpoint(path, empty).isOk());  // replaces
  EXPECT_EQ(loadCheckpoint(path).value(), empty);
  EXPECT_EQ(loadCheckpoint((dir_ / "missing.chk").string()).status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, AnyBitFlipIsDataLoss) {
  TrainingState s = makeState(7, 1000, 2);
  fs::path path = dir_ / "b.chk";
  ASSERT_TRUE(saveCheckpoint(path.string(), s).isOk());
  const uint64_t size = fs::file_size(path);
  // The header (magic, step, sizes, CRCs), the parameters, the optimizer state and the metadata at the end.
  for (uint64_t offset : {uint64_t{0}, uint64_t{16}, uint64_t{40}, uint64_t{48}, uint64_t{61}, uint64_t{64},
                          uint64_t{500}, size / 2, size - 30, size - 1}) {
    ASSERT_TRUE(saveCheckpoint(path.string(), s).isOk());
    flipBit(path, offset, static_cast<int>(offset % 8));
    auto r = loadCheckpoint(path.string());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "flip at " << offset << ": " << r.status().toString();
    EXPECT_NE(r.status().message().find(path.string()), std::string::npos);
  }
}

TEST_F(CheckpointTest, TruncatedOrExtendedIsDataLoss) {
  TrainingState s = makeState(9, 5000, 3);
  fs::path path = dir_ / "c.chk";
  ASSERT_TRUE(saveCheckpoint(path.string(), s).isOk());
  const uint64_t size = fs::file_size(path);
  for (uint64_t keep : {uint64_t{0}, uint64_t{10}, uint64_t{63}, uint64_t{64}, size / 2, size - 1}) {
    ASSERT_TRUE(saveCheckpoint(path.string(), s).isOk());
    fs::resize_file(path, keep);
    auto r = loadCheckpoint(path.string());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "kept " << keep;
    EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  }
  ASSERT_TRUE(saveCheckpoint(path.string(), s).isOk());
  std::ofstream(path, std::ios::app | std::ios::binary) << "extra";
  auto r = loadCheckpoint(path.string());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("trailing bytes"), std::string::npos) << r.status().message();
}

TEST_F(CheckpointTest, NotACheckpoint) {
  fs::path path = dir_ / "d.chk";
  std::ofstream(path) << std::string(100, 'x');
  auto r = loadCheckpoint(path.string());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos);
}

TEST_F(CheckpointTest, ReadersNeverSeeAPartialFile) {
  std::string path = (dir_ / "e.chk").string();
  TrainingState old_state = makeState(1, 1 << 20, 4), new_state = makeState(2, 1 << 20, 5);
  ASSERT_TRUE(saveCheckpoint(path, old_state).isOk());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(saveCheckpoint(path, i % 2 ? old_state : new_state).isOk());
    done = true;
  });
  int loads = 0;
  while (!done || loads == 0) {
    auto r = loadCheckpoint(path);
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    EXPECT_TRUE(r->step == 1 || r->step == 2);
    EXPECT_EQ(*r, r->step == 1 ? old_state : new_state);
    ++loads;
  }
  writer.join();
  EXPECT_TRUE(tempFiles(dir_).empty());
}

TEST_F(CheckpointTest, WriterKilledMidWriteLeavesTheOldCheckpoint) {
  auto dir = CheckpointDir::open(dir_.string(), 2);
  ASSERT_TRUE(dir.isOk());
  TrainingState old_state = makeState(5, 1000, 6);
  ASSERT_TRUE(dir->save(old_state).isOk());
  TrainingState big = makeState(5, 4 << 20, 7);  // 24 MiB with the optimizer state: long enough to be caught in the middle
  pid_t child = ::fork();
  if (child == 0) {
    for (;;) (void)saveCheckpoint(dir->pathForStep(5), big);
  }
  // Kill it once its temporary file exists (it is then writing), as a crash would.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (tempFiles(dir_).empty() && std::chrono::steady_clock::now() < deadline) {
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  auto r = loadCheckpoint(dir->pathForStep(5));
  ASSERT_TRUE(r.isOk()) << r.status().toString();  // the old one, or a complete new one: never partial
  EXPECT_TRUE(*r == old_state || *r == big);
  // A fresh open (the restarted node) clears the leftovers.
  auto reopened = CheckpointDir::open(dir_.string(), 2);
  ASSERT_TRUE(reopened.isOk());
  EXPECT_TRUE(tempFiles(dir_).empty());
}

TEST_F(CheckpointTest, DirKeepsTheLastK) {
  auto dir = CheckpointDir::open(dir_.string(), 3);
  ASSERT_TRUE(dir.isOk()) << dir.status().toString();
  for (uint64_t step : {10, 20, 30, 40, 50}) ASSERT_TRUE(dir->save(makeState(step, 100, 8)).isOk());
  std::vector<std::string> expected = {dir->pathForStep(30), dir->pathForStep(40), dir->pathForStep(50)};
  EXPECT_EQ(dir->list(), expected);
  EXPECT_EQ(fs::path(dir->pathForStep(30)).filename().string(), "ckpt-00000000000000000030.chk");
  auto latest = dir->loadLatestGood();
  ASSERT_TRUE(latest.isOk());
  EXPECT_EQ(latest->state.step, 50u);
  EXPECT_TRUE(latest->skipped.empty());
  EXPECT_EQ(CheckpointDir::open(dir_.string(), 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, NewestCorruptFallsBackToThePreviousGood) {
  auto dir = CheckpointDir::open(dir_.string(), 3);
  ASSERT_TRUE(dir.isOk());
  EXPECT_EQ(dir->loadLatestGood().status().code(), StatusCode::kNotFound);
  for (uint64_t step : {1, 2, 3}) ASSERT_TRUE(dir->save(makeState(step, 1000, 9)).isOk());
  flipBit(dir->pathForStep(3), 100, 3);
  auto latest = dir->loadLatestGood();
  ASSERT_TRUE(latest.isOk()) << latest.status().toString();
  EXPECT_EQ(latest->state, makeState(2, 1000, 9));
  EXPECT_EQ(latest->path, dir->pathForStep(2));
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find(dir->pathForStep(3)), std::string::npos) << latest->skipped[0];
  EXPECT_NE(latest->skipped[0].find("DataLoss"), std::string::npos) << latest->skipped[0];

  fs::resize_file(dir->pathForStep(2), 70);
  flipBit(dir->pathForStep(1), 0, 0);
  auto none = dir->loadLatestGood();
  EXPECT_EQ(none.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(none.status().message().find("none of the 3 checkpoints"), std::string::npos) << none.status().message();
}

TEST_F(CheckpointTest, AsyncWriterSavesTheNewestState) {
  auto dir = CheckpointDir::open(dir_.string(), 5);
  ASSERT_TRUE(dir.isOk());
  TrainingState last;
  {
    AsyncCheckpointWriter writer(*dir);
    for (uint64_t step = 1; step <= 6; ++step) {
      last = makeState(step, 50000, 10);
      writer.submit(last);
    }
    ASSERT_TRUE(writer.flush(deadlineIn(30s)).isOk());
    EXPECT_EQ(writer.saved() + writer.superseded(), 6u);
    EXPECT_GE(writer.saved(), 1u);
    // Each finished save is handed over once, oldest first, ending with the newest state.
    auto completed = writer.takeCompleted();
    ASSERT_EQ(completed.size(), writer.saved());
    for (size_t i = 0; i < completed.size(); ++i) {
      EXPECT_TRUE(completed[i].status.isOk()) << completed[i].status.toString();
      if (i > 0) {
        EXPECT_GT(completed[i].step, completed[i - 1].step);
      }
    }
    EXPECT_EQ(completed.back().step, 6u);
    EXPECT_TRUE(writer.takeCompleted().empty());
  }
  auto latest = dir->loadLatestGood();
  ASSERT_TRUE(latest.isOk());
  EXPECT_EQ(latest->state, last);

  // A failing save surfaces at flush.
  auto gone = CheckpointDir::open((dir_ / "sub").string(), 1);
  ASSERT_TRUE(gone.isOk());
  fs::remove_all(dir_ / "sub");
  AsyncCheckpointWriter writer(*gone);
  writer.submit(makeState(1, 10, 11));
  Status s = writer.flush(deadlineIn(30s));
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("sub"), std::string::npos) << s.message();
  EXPECT_TRUE(writer.flush(deadlineIn(1s)).isOk());  // reported once
  auto completed = writer.takeCompleted();  // a failed save is never handed over as a saved one
  ASSERT_EQ(completed.size(), 1u);
  EXPECT_EQ(completed[0].step, 1u);
  EXPECT_EQ(completed[0].status.code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace chaosbed
