#pragma once
// Clock: the controller's source of time, injected so that tests drive a plan without sleeping.
// monotonicNs() orders and times actions (CLOCK_MONOTONIC for the real clock, system-wide, so other
// processes can compare it); wallNs() only labels events. waitUntil() blocks the caller on `cv` (with
// `lock` held, as std::condition_variable does) until the clock reaches deadline_ns or cv is notified;
// spurious returns are allowed, callers loop. A ManualClock notifies its subscribers when advanced, so
// a controller waiting on it wakes up.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace chaosbed::chaos {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t monotonicNs() const = 0;
  virtual int64_t wallNs() const = 0;
  virtual void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) = 0;
  // Calls on_change (from the thread that changes the time) whenever the time jumps; returns an id for
  // unsubscribe(). Real clocks never jump.
  virtual int subscribe(std::function<void()> on_change) = 0;
  virtual void unsubscribe(int id) = 0;
};

// CLOCK_MONOTONIC and CLOCK_REALTIME.
class RealClock final : public Clock {
 public:
  int64_t monotonicNs() const override;
  int64_t wallNs() const override;
  void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) override;
  int subscribe(std::function<void()>) override { return 0; }
  void unsubscribe(int) override {}
};
RealClock& realClock();

// A clock that moves only when told. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  int64_t monotonicNs() const override;
  int64_t wallNs() const override { return monotonicNs(); }
  void waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) override;
  int subscribe(std::function<void()> on_change) override;
  void unsubscribe(int id) override;
  void advance(int64_t ns);
  void advanceSeconds(double s) { advance(static_cast<int64_t>(s * 1e9)); }

 private:
  mutable std::mutex mu_;
  int64_t now_;
  int next_id_ = 1;
  std::map<int, std::function<void()>> subscribers_;
};

}  // namespace chaosbed::chaos
