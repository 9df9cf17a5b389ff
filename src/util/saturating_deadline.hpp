// A deadline `after` from `now` that saturates at time_point::max() instead
// of overflowing: a huge timeout (nanoseconds::max()) means "no deadline",
// never a signed overflow into one that has already passed.
#pragma once

#include <chrono>

namespace xrtio::detail {

template <class Clock, class Duration, class Rep, class Period>
std::chrono::time_point<Clock, Duration> saturating_deadline(std::chrono::time_point<Clock, Duration> now,
                                                             std::chrono::duration<Rep, Period> after) noexcept {
  using tp = std::chrono::time_point<Clock, Duration>;
  auto d = std::chrono::duration_cast<Duration>(after);
  if (d >= tp::max() - now) return tp::max();
  return now + d;
}

}  // namespace xrtio::detail
