// How long the reactor spins after posting completions with nothing left on
// the device, for the runs their handlers submit next (docs/DESIGN.md,
// "Adaptive spinning"). Caught, such a submission saves the submitting
// thread a wake-up of the reactor (an eventfd write) and the reactor a
// sleep; the spin pays only when runs are short enough that the reactor
// would not sleep during the next one anyway.
#pragma once

#include <chrono>
#include <cstdint>

#include "spin_policy.hpp"

namespace xrtio::detail {

class resubmit_policy {
 public:
  explicit resubmit_policy(std::chrono::nanoseconds window) noexcept : window_(window), spin_(window) {}

  /// A run took `ns` on the device (submitted -> completed).
  void learn(std::int64_t ns) noexcept { recent_ns_ += (ns - recent_ns_) / 8; }

  /// How long to spin, after the last activity, for the next submission:
  /// none while recent runs took the window or longer (the reactor sleeps
  /// during each of them), else the adaptive budget.
  std::chrono::nanoseconds budget() const noexcept {
    return short_runs() ? spin_.budget() : std::chrono::nanoseconds(0);
  }
  /// Whether recent runs took less than the window on the device.
  bool short_runs() const noexcept { return std::chrono::nanoseconds(recent_ns_) < window_; }
  /// The spin ran out before a submission came.
  void missed() noexcept { spin_.missed(); }
  /// Activity came `idle` after a pass that posted completions.
  void activity_after(std::chrono::nanoseconds idle) noexcept { spin_.activity_after(idle); }

 private:
  std::chrono::nanoseconds window_;
  spin_policy spin_;
  std::int64_t recent_ns_ = 0;  // moving average of device times, 1/8 per run
};

}  // namespace xrtio::detail
