// IDX readers (the MNIST file format): a big-endian header (magic: two zero bytes, a type byte, the number
// of dimensions; then one 32-bit size per dimension) followed by the data. zlib's gz* functions read
// gzip-compressed and raw files alike.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
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

// Up to n bytes of f (0 at its end); IoError naming path and zlib's (or the system's) reason.
Result<size_t> gzReadSome(gzFile f, const std::string& path, uint8_t* dst, unsigned n) {
  const int got = gzread(f, dst, n);
  if (got < 0) {
    int errnum = 0;
    const char* msg = gzerror(f, &errnum);
    return Status::ioError(path + ": read error: " + (errnum == Z_ERRNO ? std::strerror(errno) : msg));
  }
  return static_cast<size_t>(got);
}

class IdxFile {
 public:
  static Result<IdxFile> open(const std::string& path, int expected_dims) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec))
      return Status::notFound(path + ": no such file");
    GzFile f(gzopen(path.c_str(), "rb"));
    if (!f) return Status::fromErrno(path + ": cannot open");
    IdxFile idx(path, std::move(f));
    CHAOSBED_RETURN_IF_ERROR(idx.readHeader(expected_dims));
    return idx;
  }

  const std::vector<uint32_t>& shape() const { return shape_; }
  // Whether the file is raw (zlib copies it through) rather than a gzip stream; known once the header is read.
  bool raw() const { return gzdirect(file_.get()) == 1; }
  size_t headerBytes() const { return 4 + 4 * shape_.size(); }
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

  Result<size_t> read(uint8_t* dst, unsigned n) { return gzReadSome(file_.get(), path_, dst, n); }

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

std::shared_ptr<const PixelSource> PixelSource::inMemory(std::vector<uint8_t> bytes) {
  std::shared_ptr<PixelSource> source(new PixelSource());
  source->size_ = bytes.size();
  source->memory_ = std::move(bytes);
  return source;
}

Result<std::shared_ptr<const PixelSource>> PixelSource::inFile(const std::string& path, size_t offset,
                                                              size_t size) {
  std::shared_ptr<PixelSource> source(new PixelSource());
  source->path_ = path;
  source->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd_ < 0) return Status::fromErrno(path + ": cannot open");
  struct stat st {};
  if (::fstat(source->fd_, &st) != 0 || !S_ISREG(st.st_mode)) return Status::ioError(path + ": not a regular file");
  const size_t file_bytes = size_t(st.st_size);
  if (file_bytes < offset + size)
    return Status::dataLoss(path + ": truncated: header promises " + std::to_string(size) + " data bytes, file holds " +
                            std::to_string(file_bytes > offset ? file_bytes - offset : 0));
  if (file_bytes > offset + size)
    return Status::dataLoss(path + ": trailing bytes after the " + std::to_string(size) +
                            " data bytes the header promises");
  source->file_offset_ = offset;
  source->size_ = size;
  return std::shared_ptr<const PixelSource>(std::move(source));
}

PixelSource::~PixelSource() {
  if (fd_ >= 0) ::close(fd_);
}

Status PixelSource::read(size_t first, size_t n, uint8_t* out) const {
  if (first > size_ || n > size_ - first)
    return Status::invalidArgument("pixels [" + std::to_string(first) + ", " + std::to_string(first + n) +
                                   ") beyond the " + std::to_string(size_) + " held");
  if (fd_ < 0) {
    std::memcpy(out, memory_.data() + first, n);
    return Status::ok();
  }
  for (size_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd_, out + done, n - done, off_t(file_offset_ + first + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::fromErrno(path_ + ": read failed");
    if (got == 0) return Status::dataLoss(path_ + ": shorter than when it was opened");
    done += size_t(got);
  }
  return Status::ok();
}

Status Dataset::copySamples(size_t first, size_t count, float* out) const {
  const size_t n = count * dims;
  if (!pixels) {
    std::memcpy(out, images.data() + first * dims, n * sizeof(float));
    return Status::ok();
  }
  uint8_t chunk[16384];
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(n - done, sizeof chunk);
    CHAOSBED_RETURN_IF_ERROR(pixels->read(first * dims + done, m, chunk));
    for (size_t i = 0; i < m; ++i) out[done + i] = float(chunk[i]) * (1.0f / 255.0f);
    done += m;
  }
  return Status::ok();
}

Result<Dataset> readIdxImages(const std::string& path) {
  CHAOSBED_ASSIGN_OR_RETURN(IdxFile f, IdxFile::open(path, 3));
  Dataset d;
  d.dims = size_t{f.shape()[1]} * f.shape()[2];
  const size_t bytes = f.elements();
  if (f.raw()) {
    CHAOSBED_ASSIGN_OR_RETURN(d.pixels, PixelSource::inFile(path, f.headerBytes(), bytes));
  } else {
    std::vector<uint8_t> buffer(bytes);
    CHAOSBED_RETURN_IF_ERROR(f.readPayload(buffer));
    d.pixels = PixelSource::inMemory(std::move(buffer));
  }
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

namespace {

constexpr const char* kSplitFiles[][2] = {{"train-images-idx3-ubyte", "train-labels-idx1-ubyte"},
                                          {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}};

// NAME when it exists (a raw file is read on demand, not held), else NAME.gz.
std::string pickFile(const std::string& dir, const std::string& name) {
  std::error_code ec;
  const std::string raw = dir + "/" + name;
  if (std::filesystem::exists(raw, ec)) return raw;
  return raw + ".gz";
}

}  // namespace

Result<Dataset> loadMnistSplit(const std::string& dir, const std::string& split) {
  for (const auto& files : kSplitFiles)
    if (std::string(files[0]).starts_with(split + "-"))
      return loadIdxDataset(pickFile(dir, files[0]), pickFile(dir, files[1]));
  return Status::invalidArgument("unknown split '" + split + "' (train or t10k)");
}

Result<DatasetSplits> loadMnistLayout(const std::string& dir) {
  DatasetSplits s;
  CHAOSBED_ASSIGN_OR_RETURN(s.train, loadMnistSplit(dir, "train"));
  CHAOSBED_ASSIGN_OR_RETURN(s.test, loadMnistSplit(dir, "t10k"));
  if (s.train.dims != s.test.dims) {
    return Status::invalidArgument(dir + ": train images have " + std::to_string(s.train.dims) +
                                   " pixels but test images " + std::to_string(s.test.dims));
  }
  return s;
}

Status writeRawMnistLayout(const std::string& from, const std::string& to) {
  for (const auto& files : kSplitFiles) {
    for (const char* name : files) {
      const std::string source = pickFile(from, name);
      std::error_code ec;
      if (!std::filesystem::exists(source, ec)) return Status::notFound(source + ": no such file");
      GzFile in(gzopen(source.c_str(), "rb"));
      if (!in) return Status::fromErrno(source + ": cannot open");
      const std::string target = to + "/" + name, temporary = target + ".partial";
      ::unlink(temporary.c_str());  // a leftover of an interrupted copy (unlink never follows a link)
      const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (fd < 0) return Status::fromErrno(temporary + ": cannot create");
      std::vector<uint8_t> chunk(1 << 20);
      Status status;
      for (;;) {
        Result<size_t> got = gzReadSome(in.get(), source, chunk.data(), unsigned(chunk.size()));
        if (!got.isOk()) {
          status = got.status();
          break;
        }
        if (*got == 0) break;
        if (::write(fd, chunk.data(), *got) != ssize_t(*got)) {
          status = Status::fromErrno(temporary + ": write failed");
          break;
        }
      }
      if (::close(fd) != 0 && status.isOk()) status = Status::fromErrno(temporary + ": close failed");
      if (status.isOk() && ::rename(temporary.c_str(), target.c_str()) != 0)
        status = Status::fromErrno(target + ": rename failed");
      if (!status.isOk()) {
        ::unlink(temporary.c_str());
        return status;
      }
    }
  }
  // The copy is what the nodes will load: load it once here, so that a bad source fails the run at its start.
  return loadMnistLayout(to).status();
}

}  // namespace chaosbed::data
