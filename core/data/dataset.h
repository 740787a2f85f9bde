#pragma once
// Dataset: a labelled set of fixed-size samples, and the ways to get one: IDX files (MNIST / Fashion-MNIST,
// gzip or raw), or a deterministic synthetic set of Gaussian clusters for tests.
//
// Contract
// - A sample is `dims` values; copySamples() hands them out as floats. They are held either as floats
//   (`images`: synthetic sets, tests) or as the IDX file's bytes (`pixels`), scaled from 0..255 to [0, 1]
//   on the way out.
// - labels[i] < num_classes for every sample (the loaders check this).
// - Loaders return a Status naming the file and the fault; they never throw or abort on bad input.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::data {

// Where byte samples live: in memory (a decompressed gzip file), or in a raw IDX file read on demand. Read
// on demand, the page cache holds one copy for every node of the machine and a node's memory is its own
// state. (Mapping the file would share the pages too, but each node's RSS would count them, and the
// kernel's fault-around maps most of the file within one epoch of scattered samples.) Thread-safe.
class PixelSource {
 public:
  static std::shared_ptr<const PixelSource> inMemory(std::vector<uint8_t> bytes);
  // The `size` bytes at `offset` of the file at path, which must hold exactly offset + size bytes.
  static Result<std::shared_ptr<const PixelSource>> inFile(const std::string& path, size_t offset, size_t size);
  PixelSource(const PixelSource&) = delete;
  PixelSource& operator=(const PixelSource&) = delete;
  ~PixelSource();

  size_t size() const { return size_; }
  bool inMemory() const { return fd_ < 0; }
  // Copies bytes [first, first + n) to out. DataLoss when the file no longer holds them, IoError on a failed
  // read.
  Status read(size_t first, size_t n, uint8_t* out) const;

 private:
  PixelSource() = default;
  std::vector<uint8_t> memory_;
  int fd_ = -1;
  size_t file_offset_ = 0;
  size_t size_ = 0;
  std::string path_;
};

struct Dataset {
  std::vector<float> images;                 // float samples, row-major; empty when `pixels` holds them
  std::shared_ptr<const PixelSource> pixels;  // byte samples, row-major, each byte / 255
  std::vector<uint8_t> labels;
  size_t dims = 0;
  int num_classes = 10;

  size_t size() const { return labels.size(); }
  // Writes samples [first, first + count) as count x dims floats to out. An error only from a file source.
  [[nodiscard]] Status copySamples(size_t first, size_t count, float* out) const;
  [[nodiscard]] Status copySample(size_t i, float* out) const { return copySamples(i, 1, out); }
};

struct DatasetSplits {
  Dataset train;
  Dataset test;
};

// Reads an IDX image file (magic 0x00000803: unsigned bytes, 3 dimensions N x rows x cols) as N samples of
// rows*cols pixels. A gzip-compressed file is decompressed into memory; a raw one is read on demand.
// Errors: NotFound (missing file), InvalidArgument (bad magic number, empty dimension), DataLoss (truncated
// or trailing bytes), IoError (unreadable file or corrupt gzip stream).
Result<Dataset> readIdxImages(const std::string& path);
// Reads an IDX label file (magic 0x00000801: unsigned bytes, 1 dimension N). Same errors.
Result<std::vector<uint8_t>> readIdxLabels(const std::string& path);
// Both files of one split: checks that the counts agree and that every label is below num_classes.
Result<Dataset> loadIdxDataset(const std::string& images_path, const std::string& labels_path,
                               int num_classes = 10);

// Default location of the Debian package dataset-fashion-mnist.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-... from dir, each as NAME or, failing that, NAME.gz
// (the layout shared by MNIST and Fashion-MNIST). A missing file is NotFound naming the .gz path tried.
// Raw files are read on demand: writeRawMnistLayout() makes the copy that every node of a run shares.
Result<DatasetSplits> loadMnistLayout(const std::string& dir);
// One split of that layout: "train" or "t10k".
Result<Dataset> loadMnistSplit(const std::string& dir, const std::string& split);
// Writes the layout of `from` (gzip or raw) to the directory `to` (which must exist and be private to this
// process) as raw files, checked by loading them back: the form that nodes share. Files are written
// under a temporary name and renamed, never through a link.
Status writeRawMnistLayout(const std::string& from, const std::string& to);

// Separable Gaussian clusters: class c has a centre drawn from N(0, separation^2) per dimension, and each
// sample is its class centre plus N(0, noise^2) per dimension. Classes are assigned round-robin, so every
// class is present in equal measure. Fully determined by the options (see core/data/random.h).
struct SyntheticOptions {
  size_t dims = 784;
  int num_classes = 10;
  size_t train_size = 6000;
  size_t test_size = 1000;
  float separation = 1.0f;
  float noise = 4.0f;
  uint64_t seed = 1;
};
// InvalidArgument for zero dims, sizes or classes, num_classes > 256, or a non-positive noise/separation.
Result<DatasetSplits> makeSynthetic(const SyntheticOptions& options);

}  // namespace chaosbed::data
