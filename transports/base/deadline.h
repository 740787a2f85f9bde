#pragma once
// Time as every layer waits on it: the monotonic clock, and a deadline as a point on it (a wait takes the
// instant it must give up at, not a duration, so that nested waits share one budget).

#include <chrono>

namespace chaosbed {

using SteadyClock = std::chrono::steady_clock;
using Deadline = SteadyClock::time_point;

inline Deadline deadlineIn(std::chrono::nanoseconds d) { return SteadyClock::now() + d; }

}  // namespace chaosbed
