// IDX reader on small files written by the test: raw and gzip, and each fault with its message.

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace chaosbed::data {
namespace {

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

std::vector<uint8_t> imageFile(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::vector<uint8_t> f = be32(magic);
  for (uint32_t d : {n, rows, cols}) {
    auto b = be32(d);
    f.insert(f.end(), b.begin(), b.end());
  }
  for (uint32_t i = 0; i < n * rows * cols; ++i) f.push_back(static_cast<uint8_t>(i * 37 % 256));
  return f;
}

std::vector<uint8_t> labelFile(uint32_t n, uint32_t magic = 0x801) {
  std::vector<uint8_t> f = be32(magic);
  auto b = be32(n);
  f.insert(f.end(), b.begin(), b.end());
  for (uint32_t i = 0; i < n; ++i) f.push_back(static_cast<uint8_t>(i % 10));
  return f;
}

std::vector<uint8_t> bytesOf(const Dataset& d) {
  std::vector<uint8_t> bytes(d.pixels->size());
  EXPECT_TRUE(d.pixels->read(0, bytes.size(), bytes.data()).isOk());
  return bytes;
}

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("idx_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string writeRaw(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
    return path;
  }
  std::string writeGz(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, ReadsRawImagesScaledToUnitInterval) {
  auto d = readIdxImages(writeRaw("img", imageFile(3, 2, 4)));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->size(), 3u);
  EXPECT_EQ(d->dims, 8u);
  ASSERT_EQ(d->pixels->size(), 24u);
  std::vector<float> values(24);
  ASSERT_TRUE(d->copySamples(0, 3, values.data()).isOk());
  for (size_t i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(values[i], static_cast<float>(i * 37 % 256) / 255.0f) << i;
  std::vector<float> second(8);
  ASSERT_TRUE(d->copySample(1, second.data()).isOk());
  EXPECT_EQ(second, std::vector<float>(values.begin() + 8, values.begin() + 16));
}

TEST_F(IdxTest, ReadsGzipLikeRaw) {
  auto raw = loadIdxDataset(writeRaw("img", imageFile(5, 3, 3)), writeRaw("lbl", labelFile(5)));
  auto gz = loadIdxDataset(writeGz("img.gz", imageFile(5, 3, 3)), writeGz("lbl.gz", labelFile(5)));
  ASSERT_TRUE(raw.isOk()) << raw.status().toString();
  ASSERT_TRUE(gz.isOk()) << gz.status().toString();
  EXPECT_FALSE(raw->pixels->inMemory());
  EXPECT_TRUE(gz->pixels->inMemory());
  EXPECT_EQ(bytesOf(*raw), bytesOf(*gz));
  EXPECT_EQ(gz->labels, (std::vector<uint8_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(gz->dims, 9u);
}

TEST_F(IdxTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = (dir_ / "absent.gz").string();
  auto d = readIdxImages(path);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find(path), std::string::npos) << d.status().message();
}

TEST_F(IdxTest, BadMagicNamesFileAndBothNumbers) {
  const std::string path = writeGz("img.gz", imageFile(2, 2, 2, 0x00000801 + 0x10000));
  auto d = readIdxImages(path);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = d.status().message();
  EXPECT_NE(m.find(path), std::string::npos) << m;
  EXPECT_NE(m.find("bad magic number 0x00010801"), std::string::npos) << m;
  EXPECT_NE(m.find("expected 0x00000803"), std::string::npos) << m;
  // A label file is not an image file either.
  auto swapped = readIdxImages(writeRaw("lbl", labelFile(4)));
  ASSERT_FALSE(swapped.isOk());
  EXPECT_NE(swapped.status().message().find("bad magic number 0x00000801"), std::string::npos);
}

TEST_F(IdxTest, TruncatedDataIsDataLoss) {
  std::vector<uint8_t> bytes = imageFile(4, 2, 2);
  bytes.resize(bytes.size() - 3);
  const std::string path = writeGz("img.gz", bytes);
  auto d = readIdxImages(path);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find(path + ": truncated"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("promises 16 data bytes, file holds 13"), std::string::npos)
      << d.status().message();
}

TEST_F(IdxTest, TruncatedHeaderIsDataLoss) {
  std::vector<uint8_t> bytes = labelFile(4);
  bytes.resize(6);
  auto d = readIdxLabels(writeRaw("lbl", bytes));
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("inside the header"), std::string::npos) << d.status().message();
}

TEST_F(IdxTest, TrailingBytesAreDataLoss) {
  std::vector<uint8_t> bytes = labelFile(4);
  bytes.push_back(7);
  auto d = readIdxLabels(writeRaw("lbl", bytes));
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("trailing bytes"), std::string::npos) << d.status().message();
}

TEST_F(IdxTest, CountMismatchNamesBothFilesAndCounts) {
  const std::string img = writeRaw("img", imageFile(5, 2, 2));
  const std::string lbl = writeRaw("lbl", labelFile(4));
  auto d = loadIdxDataset(img, lbl);
  ASSERT_FALSE(d.isOk());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = d.status().message();
  EXPECT_NE(m.find(img + " holds 5 images"), std::string::npos) << m;
  EXPECT_NE(m.find(lbl + " holds 4 labels"), std::string::npos) << m;
}

TEST_F(IdxTest, LabelOutOfRangeNamesSample) {
  std::vector<uint8_t> lbl = labelFile(3);
  lbl.back() = 12;
  auto d = loadIdxDataset(writeRaw("img", imageFile(3, 2, 2)), writeRaw("lbl", lbl));
  ASSERT_FALSE(d.isOk());
  EXPECT_NE(d.status().message().find("label 12 of sample 2"), std::string::npos) << d.status().message();
}

TEST_F(IdxTest, RawImagesOfTheWrongLengthAreDataLoss) {
  std::vector<uint8_t> bytes = imageFile(4, 2, 2);
  bytes.resize(bytes.size() - 3);
  auto truncated = readIdxImages(writeRaw("short", bytes));
  ASSERT_FALSE(truncated.isOk());
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("promises 16 data bytes, file holds 13"), std::string::npos)
      << truncated.status().message();
  bytes = imageFile(4, 2, 2);
  bytes.push_back(1);
  auto trailing = readIdxImages(writeRaw("long", bytes));
  ASSERT_FALSE(trailing.isOk());
  EXPECT_NE(trailing.status().message().find("trailing bytes"), std::string::npos) << trailing.status().message();
}

// A raw file is read on demand (the page cache holds it once for every node), not held: a file that shrinks
// under a run is an error at the next read, not a crash or garbage.
TEST_F(IdxTest, RawImagesAreReadOnDemandAndAShrunkFileIsDataLoss) {
  const std::string path = writeRaw("img", imageFile(4, 3, 3));
  auto d = readIdxImages(path);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  ASSERT_FALSE(d->pixels->inMemory());
  std::vector<float> last(9);
  ASSERT_TRUE(d->copySample(3, last.data()).isOk());
  EXPECT_FLOAT_EQ(last[8], static_cast<float>(35 * 37 % 256) / 255.0f);
  std::filesystem::resize_file(path, 16 + 2 * 9);
  const Status shrunk = d->copySample(3, last.data());
  EXPECT_EQ(shrunk.code(), StatusCode::kDataLoss) << shrunk.toString();
  EXPECT_NE(shrunk.message().find(path), std::string::npos) << shrunk.message();
  EXPECT_TRUE(d->copySample(1, last.data()).isOk());
}

TEST_F(IdxTest, MnistLayoutPrefersRawAndFallsBackToGz) {
  writeGz("train-images-idx3-ubyte.gz", imageFile(6, 2, 3));
  writeRaw("train-images-idx3-ubyte", imageFile(7, 2, 3));
  writeRaw("train-labels-idx1-ubyte", labelFile(7));
  writeGz("t10k-images-idx3-ubyte.gz", imageFile(2, 2, 3));
  writeGz("t10k-labels-idx1-ubyte.gz", labelFile(2));
  auto s = loadMnistLayout(dir_.string());
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  EXPECT_EQ(s->train.size(), 7u);
  EXPECT_EQ(s->test.size(), 2u);
  EXPECT_EQ(s->train.dims, 6u);
  auto test_only = loadMnistSplit(dir_.string(), "t10k");
  ASSERT_TRUE(test_only.isOk()) << test_only.status().toString();
  EXPECT_EQ(test_only->size(), 2u);
  EXPECT_FALSE(loadMnistSplit(dir_.string(), "validation").isOk());

  std::filesystem::remove(dir_ / "t10k-labels-idx1-ubyte.gz");
  auto missing = loadMnistLayout(dir_.string());
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("t10k-labels-idx1-ubyte.gz"), std::string::npos);
}

TEST_F(IdxTest, RawCopyOfALayoutLoadsLikeTheOriginalAndFollowsNoLink) {
  writeGz("train-images-idx3-ubyte.gz", imageFile(6, 2, 3));
  writeGz("train-labels-idx1-ubyte.gz", labelFile(6));
  writeGz("t10k-images-idx3-ubyte.gz", imageFile(2, 2, 3));
  writeRaw("t10k-labels-idx1-ubyte", labelFile(2));
  const std::filesystem::path copy = dir_ / "copy";
  std::filesystem::create_directories(copy);
  // A link planted where the copy writes its temporary file must be removed, not written through.
  const std::string victim = writeRaw("victim", {1, 2, 3});
  std::filesystem::create_symlink(victim, copy / "train-images-idx3-ubyte.partial");
  ASSERT_TRUE(writeRawMnistLayout(dir_.string(), copy.string()).isOk());
  EXPECT_EQ(std::filesystem::file_size(victim), 3u);

  auto original = loadMnistLayout(dir_.string());
  auto raw = loadMnistLayout(copy.string());
  ASSERT_TRUE(original.isOk() && raw.isOk());
  EXPECT_EQ(bytesOf(raw->train), bytesOf(original->train));
  EXPECT_EQ(bytesOf(raw->test), bytesOf(original->test));
  EXPECT_EQ(raw->train.labels, original->train.labels);
  EXPECT_EQ(raw->test.labels, original->test.labels);
  for (const auto& e : std::filesystem::directory_iterator(copy)) {
    EXPECT_FALSE(e.path().string().ends_with(".gz") || e.path().string().ends_with(".partial")) << e.path();
    EXPECT_EQ(std::filesystem::status(e.path()).permissions() & std::filesystem::perms::all,
              std::filesystem::perms::owner_read | std::filesystem::perms::owner_write) << e.path();
  }
  // A source that is not a dataset fails the copy, naming the file.
  writeGz("t10k-images-idx3-ubyte.gz", labelFile(2));
  const Status bad = writeRawMnistLayout(dir_.string(), copy.string());
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("t10k-images-idx3-ubyte"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace chaosbed::data
