#include "chaos/clock.h"

#include <time.h>

#include <chrono>
#include <vector>

namespace chaosbed::chaos {
namespace {

int64_t readClock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

int64_t RealClock::monotonicNs() const { return readClock(CLOCK_MONOTONIC); }
int64_t RealClock::wallNs() const { return readClock(CLOCK_REALTIME); }

void RealClock::waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, so this deadline is exact.
  const int64_t left = deadline_ns - monotonicNs();
  if (left <= 0) return;
  cv.wait_until(lock, std::chrono::steady_clock::now() + std::chrono::nanoseconds(left));
}

RealClock& realClock() {
  static RealClock clock;
  return clock;
}

int64_t ManualClock::monotonicNs() const {
  std::lock_guard<std::mutex> l(mu_);
  return now_;
}

void ManualClock::waitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t deadline_ns) {
  if (monotonicNs() >= deadline_ns) return;
  cv.wait(lock);  // advance() notifies through the subscriber
}

int ManualClock::subscribe(std::function<void()> on_change) {
  std::lock_guard<std::mutex> l(mu_);
  subscribers_[next_id_] = std::move(on_change);
  return next_id_++;
}

void ManualClock::unsubscribe(int id) {
  std::lock_guard<std::mutex> l(mu_);
  subscribers_.erase(id);
}

void ManualClock::advance(int64_t ns) {
  std::vector<std::function<void()>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    now_ += ns;
    for (auto& [id, fn] : subscribers_) subs.push_back(fn);
  }
  for (auto& fn : subs) fn();
}

}  // namespace chaosbed::chaos
