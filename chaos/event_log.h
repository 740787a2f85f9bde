#pragma once
// EventLog: the chaos part of a run's events.jsonl. One JSON object per line, appended with a single
// write(2) on an O_APPEND descriptor, so lines from several writers (controller, agent, collector) never
// interleave and each line is on disk (in the page cache) as soon as append() returns.
//
// Lines written by the chaos controller ("type" field):
//   chaos.planned  {fault_id, name, kind, node, action, planned_s | trigger, params}   one per plan action
//   chaos.applied / chaos.escalated / chaos.reverted / chaos.replaced / chaos.skipped / chaos.failed
//                  {fault_id, name, kind, node, planned_s, planned_mono_ns, mono_ns, wall_ns, delay_ms,
//                   params, error?}                                                     what was done
//   chaos.healed   {node, op, by: stop|agent|cleanup, error?}                            crash-safety heals
// Every line carries mono_ns (CLOCK_MONOTONIC) and wall_ns (CLOCK_REALTIME) of when it was written
// unless the caller set them. Thread-safe.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "transports/base/status.h"

namespace chaosbed::chaos {

class EventLog {
 public:
  // Opens (creating) path for appending.
  static Result<std::unique_ptr<EventLog>> open(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends one event; fills mono_ns/wall_ns when absent.
  Status append(nlohmann::json event);
  // The same, best effort: a line the file does not take (a full disk) is logged, the first of a streak;
  // the run goes on.
  void record(nlohmann::json event);
  const std::string& path() const { return path_; }

 private:
  EventLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  std::mutex mu_;
  std::atomic<bool> streak_{false};
  int fd_;
  std::string path_;
};

}  // namespace chaosbed::chaos
