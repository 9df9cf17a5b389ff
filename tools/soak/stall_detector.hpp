// Notices when this process did not run for a while (stopped with SIGSTOP,
// or starved on a loaded host): a thread that should wake every few
// milliseconds counts the wake-ups that came later than a threshold.
// Retention is decided by the clock (an abort past abort_grace), so the
// soak checks retained == refused + overlong aborts exactly only in rounds
// without such a stall.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace soak {

class stall_detector {
 public:
  explicit stall_detector(std::chrono::nanoseconds threshold);
  ~stall_detector();
  stall_detector(const stall_detector&) = delete;
  stall_detector& operator=(const stall_detector&) = delete;
  /// Stalls seen so far.
  std::uint64_t stalls() const noexcept { return stalls_.load(); }
  /// The longest one.
  std::chrono::nanoseconds longest() const noexcept { return std::chrono::nanoseconds(longest_ns_.load()); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> stalls_{0};
  std::atomic<std::int64_t> longest_ns_{0};
  std::thread thread_;
};

}  // namespace soak
