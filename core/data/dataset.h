#pragma once
// Dataset: a labelled set of fixed-size float samples held in memory, and the ways to get one: IDX files
// (MNIST / Fashion-MNIST, gzip or raw), or a deterministic synthetic set of Gaussian clusters for tests.
//
// Contract
// - images holds size() samples of `dims` floats each, row-major (sample i is images[i*dims, (i+1)*dims)).
//   IDX pixels are scaled from 0..255 to [0, 1].
// - labels[i] < num_classes for every sample (the loaders check this).
// - Loaders return a Status naming the file and the fault; they never throw or abort on bad input.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transports/status.h"

namespace chaosbed::data {

struct Dataset {
  std::vector<float> images;
  std::vector<uint8_t> labels;
  size_t dims = 0;
  int num_classes = 10;

  size_t size() const { return labels.size(); }
  std::span<const float> image(size_t i) const { return {images.data() + i * dims, dims}; }
};

struct DatasetSplits {
  Dataset train;
  Dataset test;
};

// Reads an IDX image file (magic 0x00000803: unsigned bytes, 3 dimensions N x rows x cols) into
// N x (rows*cols) floats in [0, 1]. gzip-compressed and raw files are both accepted.
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

// Loads train-{images-idx3,labels-idx1}-ubyte and t10k-... from dir, each as NAME.gz or, failing that, NAME
// (the layout shared by MNIST and Fashion-MNIST). A missing file is NotFound naming the path tried.
Result<DatasetSplits> loadMnistLayout(const std::string& dir);

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
