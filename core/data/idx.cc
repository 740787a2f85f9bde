// IDX readers (the MNIST file format): a big-endian header (magic: two zero bytes, a type byte, the number
// of dimensions; then one 32-bit size per dimension) followed by the data. zlib's gz* functions read
// gzip-compressed and raw files alike.

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/data/dataset.h"

namespace chaosbed::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
// Fashion-MNIST's largest file holds 47 MB; a header claiming more than this is corrupt, not big.
constexpr uint64_t kMaxElements = uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

class IdxFile {
 public:
  static Result<IdxFile> open(const std::string& path, int expected_dims) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Status::notFound(path + ": no such file");
    GzFile f(gzopen(path.c_str(), "rb"));
    if (!f) return Status::ioError(path + ": cannot open: " + std::strerror(errno));
    IdxFile idx(path, std::move(f));
    CHAOSBED_RETURN_IF_ERROR(idx.readHeader(expected_dims));
    return idx;
  }

  const std::vector<uint32_t>& shape() const { return shape_; }
  uint64_t elements() const {
    uint64_t n = 1;
    for (uint32_t d : shape_) n *= d;
    return n;
  }

  // Reads exactly `out.size()` payload bytes and checks that nothing follows them.
  Status readPayload(std::span<uint8_t> out) {
    size_t done = 0;
    while (done < out.size()) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(out.size() - done, 1u << 30));
      CHAOSBED_ASSIGN_OR_RETURN(size_t got, read(out.data() + done, chunk));
      if (got == 0) {
        return Status::dataLoss(path_ + ": truncated: header promises " + std::to_string(out.size()) +
                                " data bytes, file holds " + std::to_string(done));
      }
      done += got;
    }
    uint8_t extra[64];
    CHAOSBED_ASSIGN_OR_RETURN(size_t trailing, read(extra, sizeof extra));
    if (trailing != 0) {
      return Status::dataLoss(path_ + ": trailing bytes after the " + std::to_string(out.size()) +
                              " data bytes the header promises");
    }
    return Status::ok();
  }

 private:
  IdxFile(std::string path, GzFile f) : path_(std::move(path)), file_(std::move(f)) {}

  Result<size_t> read(uint8_t* dst, unsigned n) {
    const int got = gzread(file_.get(), dst, n);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(file_.get(), &errnum);
      return Status::ioError(path_ + ": read error: " + (errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    return static_cast<size_t>(got);
  }

  Status readExactHeader(uint8_t* dst, unsigned n, const char* what) {
    CHAOSBED_ASSIGN_OR_RETURN(size_t got, read(dst, n));
    if (got != n) return Status::dataLoss(path_ + ": truncated: file ends inside the header (" + what + ")");
    return Status::ok();
  }

  Status readHeader(int expected_dims) {
    std::array<uint8_t, 4> magic{};
    CHAOSBED_RETURN_IF_ERROR(readExactHeader(magic.data(), 4, "magic number"));
    char expected[16];
    std::snprintf(expected, sizeof expected, "0x%08x", 0x800u | static_cast<unsigned>(expected_dims));
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != kTypeUnsignedByte || magic[3] != expected_dims) {
      char got[16];
      std::snprintf(got, sizeof got, "0x%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
      return Status::invalidArgument(path_ + ": bad magic number " + got + ", expected " + expected +
                                     " (IDX, unsigned bytes, " + std::to_string(expected_dims) +
                                     " dimension" + (expected_dims == 1 ? ")" : "s)"));
    }
    uint64_t elements = 1;
    for (int d = 0; d < expected_dims; ++d) {
      std::array<uint8_t, 4> b{};
      CHAOSBED_RETURN_IF_ERROR(readExactHeader(b.data(), 4, "dimension sizes"));
      const uint32_t size = uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
      if (size == 0 && d > 0)
        return Status::invalidArgument(path_ + ": dimension " + std::to_string(d) + " has size 0");
      elements *= size;
      if (elements > kMaxElements)
        return Status::invalidArgument(path_ + ": header claims more than 2^32 elements");
      shape_.push_back(size);
    }
    return Status::ok();
  }

  std::string path_;
  GzFile file_;
  std::vector<uint32_t> shape_;
};

}  // namespace

Result<Dataset> readIdxImages(const std::string& path) {
  CHAOSBED_ASSIGN_OR_RETURN(IdxFile f, IdxFile::open(path, 3));
  std::vector<uint8_t> bytes(f.elements());
  CHAOSBED_RETURN_IF_ERROR(f.readPayload(bytes));
  Dataset d;
  d.dims = size_t{f.shape()[1]} * f.shape()[2];
  d.images.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) d.images[i] = static_cast<float>(bytes[i]) * (1.0f / 255.0f);
  d.labels.assign(f.shape()[0], 0);
  return d;
}

Result<std::vector<uint8_t>> readIdxLabels(const std::string& path) {
  CHAOSBED_ASSIGN_OR_RETURN(IdxFile f, IdxFile::open(path, 1));
  std::vector<uint8_t> labels(f.elements());
  CHAOSBED_RETURN_IF_ERROR(f.readPayload(labels));
  return labels;
}

Result<Dataset> loadIdxDataset(const std::string& images_path, const std::string& labels_path,
                               int num_classes) {
  if (num_classes < 1 || num_classes > 256)
    return Status::invalidArgument("num_classes must be in 1..256, got " + std::to_string(num_classes));
  CHAOSBED_ASSIGN_OR_RETURN(Dataset d, readIdxImages(images_path));
  CHAOSBED_ASSIGN_OR_RETURN(std::vector<uint8_t> labels, readIdxLabels(labels_path));
  if (labels.size() != d.size()) {
    return Status::invalidArgument("count mismatch: " + images_path + " holds " + std::to_string(d.size()) +
                                   " images but " + labels_path + " holds " + std::to_string(labels.size()) +
                                   " labels");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      return Status::invalidArgument(labels_path + ": label " + std::to_string(labels[i]) + " of sample " +
                                     std::to_string(i) + " is not below " + std::to_string(num_classes) +
                                     " classes");
    }
  }
  d.labels = std::move(labels);
  d.num_classes = num_classes;
  return d;
}

Result<DatasetSplits> loadMnistLayout(const std::string& dir) {
  auto pick = [&dir](const std::string& name) {
    const std::string gz = dir + "/" + name + ".gz";
    std::error_code ec;
    if (std::filesystem::exists(gz, ec) || !std::filesystem::exists(dir + "/" + name, ec)) return gz;
    return dir + "/" + name;
  };
  DatasetSplits s;
  CHAOSBED_ASSIGN_OR_RETURN(s.train, loadIdxDataset(pick("train-images-idx3-ubyte"), pick("train-labels-idx1-ubyte")));
  CHAOSBED_ASSIGN_OR_RETURN(s.test, loadIdxDataset(pick("t10k-images-idx3-ubyte"), pick("t10k-labels-idx1-ubyte")));
  if (s.train.dims != s.test.dims) {
    return Status::invalidArgument(dir + ": train images have " + std::to_string(s.train.dims) +
                                   " pixels but test images " + std::to_string(s.test.dims));
  }
  return s;
}

}  // namespace chaosbed::data
