#pragma once
// Checkpoints of a training state: parameters, optimizer state, progress counters and a small metadata map.
//
// File format (version 1, little-endian): a 64-byte header {magic "CHBDCKPT", version, header size, step,
// epoch, samples, payload size, payload CRC32, header CRC32} followed by the payload {u64 n, n floats of
// parameters; u32 m, then m times {u64 n, n floats} of optimizer buffers; u32 k, then k times {u32 len, key,
// u32 len, value}}. Both CRCs are zlib crc32.
//
// Contract
// - saveCheckpoint() is atomic: it writes a temporary file in the target's directory, fsyncs it, renames it
//   over the target and fsyncs the directory. A crash at any point leaves either the old file or the new one,
//   never a partial target; only a `*.tmp-*` file may be left behind (CheckpointDir::open removes those).
// - loadCheckpoint() verifies size and both checksums: DataLoss, with the path and what is wrong, for a
//   corrupt, partial or truncated file; NotFound when it does not exist.
// - Cost: a save writes the state once through the page cache (memcpy speed) with a CRC over it (~1 GB/s
//   with zlib's crc32), then fsync waits for the disk (ms on SSD, 10s of ms for 100 MB). Training stalls
//   for all of it when saving inline; AsyncCheckpointWriter stalls it only for the copy of the state that
//   the caller hands over (moving the buffers costs nothing).
// - Thread safety: free functions are reentrant; a CheckpointDir may be used from one thread at a time
//   (AsyncCheckpointWriter serialises its own use), and one directory has one writing process.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

struct TrainingState {
  std::vector<float> params;
  std::vector<std::vector<float>> optimizer;  // e.g. momentum, Adam's m and v; same meaning at load
  uint64_t step = 0;
  uint64_t epoch = 0;
  uint64_t samples = 0;
  std::map<std::string, std::string> metadata;  // strategy, model, seed, ...: small strings

  bool operator==(const TrainingState&) const = default;
};

Status saveCheckpoint(const std::string& path, const TrainingState& state);
Result<TrainingState> loadCheckpoint(const std::string& path);

// What loadLatestGood() found.
struct LoadedCheckpoint {
  TrainingState state;
  std::string path;
  // Newer checkpoints that failed to load, newest first: "path: DataLoss: ..." (empty when the newest was good).
  std::vector<std::string> skipped;
};

// A directory of checkpoints named by step (ckpt-<20-digit step>.chk), keeping the newest `keep`.
class CheckpointDir {
 public:
  // Creates the directory if needed and removes temporary files left by a crashed writer. keep >= 1.
  static Result<CheckpointDir> open(const std::string& dir, int keep);

  // Saves state as the checkpoint of state.step (replacing one of the same step), then deletes the oldest
  // checkpoints beyond `keep`.
  Status save(const TrainingState& state);
  // The newest checkpoint that loads; falls back over corrupt ones and says which it skipped. NotFound when
  // the directory has no checkpoint, DataLoss when none of them loads.
  Result<LoadedCheckpoint> loadLatestGood() const;
  // Checkpoint paths, oldest step first.
  std::vector<std::string> list() const;
  std::string pathForStep(uint64_t step) const;
  const std::string& dir() const { return dir_; }

 private:
  CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {}
  std::string dir_;
  int keep_;
};

// Saves into a CheckpointDir on a background thread. submit() takes the state by value (move the buffers in,
// or pay one copy). When a save is still running, the newly submitted state waits; a later submit replaces a
// waiting one (the newest state wins, counted in superseded()). The destructor finishes the pending saves.
// takeCompleted() hands the caller each finished save once: only a save on disk may be announced as one.
class AsyncCheckpointWriter {
 public:
  explicit AsyncCheckpointWriter(CheckpointDir dir);
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // One finished save: the state's step, and how the save ended.
  struct Completed {
    uint64_t step = 0;
    Status status;
  };

  void submit(TrainingState state);
  // The saves finished since the last call, oldest first.
  std::vector<Completed> takeCompleted();
  // Waits until every submitted state is saved or superseded; returns the first save error since the last
  // flush (then clears it), or Timeout at the deadline.
  Status flush(Deadline deadline);
  uint64_t saved() const;
  uint64_t superseded() const;

 private:
  void loop();

  CheckpointDir dir_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<TrainingState> pending_;  // guarded by mu_
  bool busy_ = false;                     // guarded by mu_
  bool stop_ = false;                     // guarded by mu_
  Status error_;                          // guarded by mu_
  std::vector<Completed> completed_;      // guarded by mu_
  uint64_t saved_ = 0;                    // guarded by mu_
  uint64_t superseded_ = 0;               // guarded by mu_
  std::thread thread_;
};

}  // namespace chaosbed
