#include "core/checkpoint/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

namespace chaosbed {
namespace {

static_assert(std::endian::native == std::endian::little, "the checkpoint format is little-endian");

constexpr char kMagic[8] = {'C', 'H', 'B', 'D', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 64;
constexpr size_t kDirectWrite = 1 << 16;  // chunks at least this big skip the staging buffer
constexpr const char* kTmpMarker = ".tmp-";

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t step;
  uint64_t epoch;
  uint64_t samples;
  uint64_t payload_bytes;
  uint32_t payload_crc;
  uint32_t reserved0;
  uint32_t reserved1;
  uint32_t header_crc;  // over the 60 bytes before it
};
static_assert(sizeof(Header) == kHeaderBytes);

uint32_t crc(uint32_t running, const void* data, size_t n) {
  if (n == 0) return running;  // zlib treats a null buffer (an empty vector's data()) as "start over"
  return static_cast<uint32_t>(crc32_z(running, static_cast<const Bytef*>(data), n));
}

uint32_t headerCrc(const Header& h) { return crc(0, &h, offsetof(Header, header_crc)); }


// Writes the payload through a staging buffer, keeping its CRC and length.
class PayloadWriter {
 public:
  PayloadWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) { buf_.reserve(kDirectWrite); }

  Status append(const void* data, size_t n) {
    crc_ = crc(crc_, data, n);
    bytes_ += n;
    if (n >= kDirectWrite) {
      CHAOSBED_RETURN_IF_ERROR(flush());
      return writeAll(static_cast<const char*>(data), n);
    }
    if (buf_.size() + n > kDirectWrite) CHAOSBED_RETURN_IF_ERROR(flush());
    buf_.insert(buf_.end(), static_cast<const char*>(data), static_cast<const char*>(data) + n);
    return Status::ok();
  }
  template <class T>
  Status put(T v) { return append(&v, sizeof v); }

  Status flush() {
    Status s = writeAll(buf_.data(), buf_.size());
    buf_.clear();
    return s;
  }
  uint32_t crc32() const { return crc_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Status writeAll(const char* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        return Status::fromErrno("checkpoint: write " + path_, err);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::ok();
  }

  int fd_;
  std::string path_;
  std::vector<char> buf_;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

Status writePayload(PayloadWriter& w, const TrainingState& s) {
  CHAOSBED_RETURN_IF_ERROR(w.put<uint64_t>(s.params.size()));
  CHAOSBED_RETURN_IF_ERROR(w.append(s.params.data(), s.params.size() * sizeof(float)));
  CHAOSBED_RETURN_IF_ERROR(w.put<uint32_t>(static_cast<uint32_t>(s.optimizer.size())));
  for (const auto& buf : s.optimizer) {
    CHAOSBED_RETURN_IF_ERROR(w.put<uint64_t>(buf.size()));
    CHAOSBED_RETURN_IF_ERROR(w.append(buf.data(), buf.size() * sizeof(float)));
  }
  CHAOSBED_RETURN_IF_ERROR(w.put<uint32_t>(static_cast<uint32_t>(s.metadata.size())));
  for (const auto& [k, v] : s.metadata) {
    CHAOSBED_RETURN_IF_ERROR(w.put<uint32_t>(static_cast<uint32_t>(k.size())));
    CHAOSBED_RETURN_IF_ERROR(w.append(k.data(), k.size()));
    CHAOSBED_RETURN_IF_ERROR(w.put<uint32_t>(static_cast<uint32_t>(v.size())));
    CHAOSBED_RETURN_IF_ERROR(w.append(v.data(), v.size()));
  }
  return w.flush();
}

Status fsyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return Status::fromErrno("checkpoint: open dir " + dir, err);
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::fromErrno("checkpoint: fsync dir " + dir, err);
  return Status::ok();
}

std::string parentDir(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

// Bounds-checked reading of the verified payload.
class PayloadReader {
 public:
  PayloadReader(const char* p, size_t n, const std::string& path) : p_(p), end_(p + n), path_(path) {}

  template <class T>
  Status get(T& v, const char* what) {
    if (static_cast<size_t>(end_ - p_) < sizeof v) return short_(what);
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return Status::ok();
  }
  Status floats(std::vector<float>& out, uint64_t n, const char* what) {
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(float)) return short_(what);
    out.resize(n);
    std::memcpy(out.data(), p_, n * sizeof(float));
    p_ += n * sizeof(float);
    return Status::ok();
  }
  Status string(std::string& out, const char* what) {
    uint32_t n = 0;
    CHAOSBED_RETURN_IF_ERROR(get(n, what));
    if (n > static_cast<size_t>(end_ - p_)) return short_(what);
    out.assign(p_, n);
    p_ += n;
    return Status::ok();
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  Status short_(const char* what) const {
    return Status::dataLoss("checkpoint: " + path_ + ": payload ends inside " + what);
  }
  const char* p_;
  const char* end_;
  const std::string& path_;
};

bool parseStepName(const std::string& name, uint64_t& step) {
  // ckpt-<20 digits>.chk
  if (name.size() != 5 + 20 + 4 || name.compare(0, 5, "ckpt-") != 0 || name.compare(25, 4, ".chk") != 0)
    return false;
  step = 0;
  for (size_t i = 5; i < 25; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    step = step * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  return true;
}

}  // namespace

Status saveCheckpoint(const std::string& path, const TrainingState& state) {
  if (state.optimizer.size() > UINT32_MAX || state.metadata.size() > UINT32_MAX)
    return Status::invalidArgument("checkpoint: " + path + ": too many optimizer buffers or metadata entries");
  for (const auto& [k, v] : state.metadata)
    if (k.size() > UINT32_MAX || v.size() > UINT32_MAX)
      return Status::invalidArgument("checkpoint: " + path + ": metadata entry '" + k.substr(0, 64) + "' too long");
  static std::atomic<uint64_t> seq{0};
  const std::string tmp = path + kTmpMarker + std::to_string(::getpid()) + "-" + std::to_string(seq++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int err = errno;
    return Status::fromErrno("checkpoint: create " + tmp, err);
  }
  auto fail = [&](const Status& s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  // The header goes last, once the payload's size and CRC are known.
  if (::lseek(fd, kHeaderBytes, SEEK_SET) < 0) {
    int err = errno;
    return fail(Status::fromErrno("checkpoint: seek " + tmp, err));
  }
  PayloadWriter w(fd, tmp);
  if (Status s = writePayload(w, state); !s.isOk()) return fail(s);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.step = state.step;
  h.epoch = state.epoch;
  h.samples = state.samples;
  h.payload_bytes = w.bytes();
  h.payload_crc = w.crc32();
  h.header_crc = headerCrc(h);
  if (::pwrite(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    int err = errno;
    return fail(Status::fromErrno("checkpoint: write header of " + tmp, err));
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    return fail(Status::fromErrno("checkpoint: fsync " + tmp, err));
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::fromErrno("checkpoint: close " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return Status::fromErrno("checkpoint: rename " + tmp + " to " + path, err);
  }
  return fsyncDir(parentDir(path));
}

Result<TrainingState> loadCheckpoint(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return Status::notFound("checkpoint: " + path + " does not exist");
    return Status::fromErrno("checkpoint: open " + path, err);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::fromErrno("checkpoint: stat " + path, err);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::vector<char> data(size);
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd, data.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return Status::ioError("checkpoint: read " + path + ": " + (n == 0 ? "unexpected end" : errnoText(err)));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);

  if (size < kHeaderBytes)
    return Status::dataLoss("checkpoint: " + path + ": truncated: " + std::to_string(size) +
                            " bytes, shorter than the " + std::to_string(kHeaderBytes) + "-byte header");
  Header h;
  std::memcpy(&h, data.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0)
    return Status::dataLoss("checkpoint: " + path + ": not a chaosbed checkpoint (bad magic)");
  if (headerCrc(h) != h.header_crc)
    return Status::dataLoss("checkpoint: " + path + ": header checksum mismatch (corrupt header)");
  if (h.version != kVersion)
    return Status::invalidArgument("checkpoint: " + path + ": format version " + std::to_string(h.version) +
                                   " not supported (this build reads " + std::to_string(kVersion) + ")");
  if (h.header_bytes != kHeaderBytes)
    return Status::dataLoss("checkpoint: " + path + ": header size " + std::to_string(h.header_bytes));
  if (size != kHeaderBytes + h.payload_bytes)
    return Status::dataLoss("checkpoint: " + path + ": " + (size < kHeaderBytes + h.payload_bytes ? "truncated" : "trailing bytes") +
                            ": file has " + std::to_string(size) + " bytes, header says " +
                            std::to_string(kHeaderBytes + h.payload_bytes));
  const char* payload = data.data() + kHeaderBytes;
  if (crc(0, payload, h.payload_bytes) != h.payload_crc)
    return Status::dataLoss("checkpoint: " + path + ": payload checksum mismatch (corrupt data)");

  TrainingState s;
  s.step = h.step;
  s.epoch = h.epoch;
  s.samples = h.samples;
  PayloadReader r(payload, h.payload_bytes, path);
  uint64_t n = 0;
  CHAOSBED_RETURN_IF_ERROR(r.get(n, "the parameter count"));
  CHAOSBED_RETURN_IF_ERROR(r.floats(s.params, n, "the parameters"));
  uint32_t buffers = 0;
  CHAOSBED_RETURN_IF_ERROR(r.get(buffers, "the optimizer buffer count"));
  for (uint32_t i = 0; i < buffers; ++i) {
    CHAOSBED_RETURN_IF_ERROR(r.get(n, "an optimizer buffer size"));
    s.optimizer.emplace_back();
    CHAOSBED_RETURN_IF_ERROR(r.floats(s.optimizer.back(), n, "an optimizer buffer"));
  }
  uint32_t entries = 0;
  CHAOSBED_RETURN_IF_ERROR(r.get(entries, "the metadata count"));
  for (uint32_t i = 0; i < entries; ++i) {
    std::string k, v;
    CHAOSBED_RETURN_IF_ERROR(r.string(k, "a metadata key"));
    CHAOSBED_RETURN_IF_ERROR(r.string(v, "a metadata value"));
    s.metadata.emplace(std::move(k), std::move(v));
  }
  if (r.left() != 0)
    return Status::dataLoss("checkpoint: " + path + ": " + std::to_string(r.left()) + " unparsed payload bytes");
  return s;
}

Result<CheckpointDir> CheckpointDir::open(const std::string& dir, int keep) {
  if (keep < 1) return Status::invalidArgument("checkpoint: keep=" + std::to_string(keep) + " for " + dir + ": want >= 1");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::ioError("checkpoint: create dir " + dir + ": " + ec.message());
  // Temporary files are only ever left by a writer that crashed: one directory has one writing process.
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && name.find(kTmpMarker) != std::string::npos) {
      std::filesystem::remove(entry.path(), ec);
      if (ec) return Status::ioError("checkpoint: remove stale " + entry.path().string() + ": " + ec.message());
    }
  }
  if (ec) return Status::ioError("checkpoint: list " + dir + ": " + ec.message());
  return CheckpointDir(dir, keep);
}

std::string CheckpointDir::pathForStep(uint64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%020" PRIu64 ".chk", step);
  return dir_ + "/" + name;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<uint64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    uint64_t step = 0;
    if (parseStepName(entry.path().filename().string(), step)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

Status CheckpointDir::save(const TrainingState& state) {
  CHAOSBED_RETURN_IF_ERROR(saveCheckpoint(pathForStep(state.step), state));
  std::vector<std::string> all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) {
    if (::unlink(all[i].c_str()) != 0 && errno != ENOENT) {
      int err = errno;
      return Status::fromErrno("checkpoint: remove old " + all[i], err);
    }
  }
  return Status::ok();
}

Result<LoadedCheckpoint> CheckpointDir::loadLatestGood() const {
  std::vector<std::string> all = list();
  if (all.empty()) return Status::notFound("checkpoint: no checkpoint in " + dir_);
  LoadedCheckpoint out;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto loaded = loadCheckpoint(*it);
    if (loaded.isOk()) {
      out.state = std::move(loaded).value();
      out.path = *it;
      if (!out.skipped.empty())
        LOG(WARNING) << "checkpoint: loaded " << out.path << " after skipping " << out.skipped.size()
                     << " newer one(s): " << out.skipped.front();
      return out;
    }
    out.skipped.push_back(loaded.status().toString());
  }
  std::string why;
  for (const std::string& s : out.skipped) why += "; " + s;
  return Status::dataLoss("checkpoint: none of the " + std::to_string(all.size()) + " checkpoints in " + dir_ +
                          " loads" + why);
}

AsyncCheckpointWriter::AsyncCheckpointWriter(CheckpointDir dir) : dir_(std::move(dir)) {
  thread_ = std::thread([this] { loop(); });
}

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!error_.isOk()) LOG(ERROR) << "checkpoint: background save failed: " << error_.toString();
}

void AsyncCheckpointWriter::submit(TrainingState state) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_) ++superseded_;
    pending_ = std::move(state);
  }
  cv_.notify_all();
}

Status AsyncCheckpointWriter::flush(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline, [&] { return !pending_ && !busy_; }))
    return Status::timeout("checkpoint: background save into " + dir_.dir() + " still running at the deadline");
  Status s = error_;
  error_ = Status::ok();
  return s;
}

std::vector<AsyncCheckpointWriter::Completed> AsyncCheckpointWriter::takeCompleted() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(completed_, {});
}

uint64_t AsyncCheckpointWriter::saved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return saved_;
}

uint64_t AsyncCheckpointWriter::superseded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return superseded_;
}

void AsyncCheckpointWriter::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return pending_ || stop_; });
    if (!pending_) return;  // stop_ and nothing left to save
    TrainingState state = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();
    Status s = dir_.save(state);
    lock.lock();
    busy_ = false;
    completed_.push_back({state.step, s});
    if (s.isOk()) {
      ++saved_;
    } else if (error_.isOk()) {
      error_ = s;
    }
    cv_.notify_all();
  }
}

}  // namespace chaosbed
