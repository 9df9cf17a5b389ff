// Predicts when a run will finish from how long the same kernel's recent runs
// took, so the reactor can wake shortly before instead of paying a wake-up
// hop after the device's event (runtime_options::predict_completions), and
// learns how late its own timed sleeps end.
#pragma once

#include <chrono>
#include <cstdint>

#include "xrtio/runtime.hpp"

namespace xrtio::detail {

class completion_predictor {
 public:
  using clock = std::chrono::steady_clock;
  explicit completion_predictor(const runtime_options& o) noexcept : opts_(o) {}

  /// When a run of `kernel` submitted at `submitted` should finish, or max()
  /// when there is no usable estimate or `in_flight` is too high for
  /// predictions to be used (their bookkeeping would cost every scan).
  clock::time_point predict(const void* kernel, clock::time_point submitted, std::uint64_t in_flight) const noexcept;
  /// How far past a prediction a run may still finish (twice the deviation).
  std::chrono::nanoseconds spread(const void* kernel) const noexcept;
  /// A completed run of `kernel` took `ns` on the device.
  void learn(const void* kernel, std::int64_t ns) noexcept;

  /// How long before a prediction to stop sleeping: the measured lateness
  /// of timed sleeps plus prediction_margin.
  std::chrono::nanoseconds wake_lead() const noexcept {
    return std::chrono::nanoseconds(wake_lateness_ns_) + opts_.prediction_margin;
  }
  /// A timed sleep meant to end at its deadline ended `late_ns` after it.
  void wake_was_late(std::int64_t late_ns) noexcept;

 private:
  struct estimate {
    const void* kernel = nullptr;
    std::int64_t ns = 0;   // mean run time: falls by 1/2 of an error, rises by 1/8
    std::int64_t dev = 0;  // mean absolute deviation from it (moving average, 1/4)
  };
  // Direct-mapped by kernel address: a collision or a reused address only
  // costs one poor guess. 64 distinct kernels per runtime is plenty.
  static constexpr unsigned slots = 64;
  // Before any timed sleep was measured, assume one ends this late: the
  // order of a 2-core VM's timer lateness with a 1 us timer slack.
  static constexpr std::int64_t initial_wake_lateness_ns = 20'000;
  // One outlier sleep (a preempted thread) may not move the estimate by more
  // than this / 8.
  static constexpr std::int64_t max_wake_lateness_sample_ns = 1'000'000;

  static unsigned slot_of(const void* kernel) noexcept;

  const runtime_options& opts_;
  estimate estimates_[slots]{};
  std::int64_t wake_lateness_ns_ = initial_wake_lateness_ns;
};

}  // namespace xrtio::detail
