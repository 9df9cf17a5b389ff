// Run-time estimates per kernel and the reactor's timer lateness (see
// completion_predictor.hpp).
#include "completion_predictor.hpp"

#include <algorithm>

namespace xrtio::detail {

unsigned completion_predictor::slot_of(const void* kernel) noexcept {
  auto a = reinterpret_cast<std::uintptr_t>(kernel);
  return static_cast<unsigned>((a >> 4) ^ (a >> 12)) & (slots - 1);
}

completion_predictor::clock::time_point completion_predictor::predict(const void* kernel, clock::time_point submitted,
                                                                      std::uint64_t in_flight) const noexcept {
  if (!opts_.predict_completions || in_flight > opts_.predict_max_in_flight) return clock::time_point::max();
  auto& e = estimates_[slot_of(kernel)];
  if (e.kernel != kernel || e.ns <= 0 || e.ns > opts_.predict_max_run_time.count()) return clock::time_point::max();
  return submitted + std::chrono::nanoseconds(std::max<std::int64_t>(e.ns - e.dev, 0));
}

std::chrono::nanoseconds completion_predictor::spread(const void* kernel) const noexcept {
  auto& e = estimates_[slot_of(kernel)];
  return std::chrono::nanoseconds(e.kernel == kernel ? 2 * e.dev : 0);
}

// The prediction is the mean less the mean deviation: early enough for most
// runs, as TCP's RTO estimator does the other way round. The mean falls
// faster than it rises (1/2 against 1/8): a prediction that comes late is
// worth nothing, so one slow run (a loaded host) must not spoil the next
// ones for long.
void completion_predictor::learn(const void* kernel, std::int64_t ns) noexcept {
  if (!opts_.predict_completions || ns <= 0) return;
  auto& e = estimates_[slot_of(kernel)];
  if (e.kernel != kernel) {
    e = {kernel, ns, ns / 4};
    return;
  }
  auto err = ns - e.ns;
  e.ns += err < 0 ? err / 2 : err / 8;
  e.dev += ((err < 0 ? -err : err) - e.dev) / 4;
}

void completion_predictor::wake_was_late(std::int64_t late_ns) noexcept {
  if (late_ns < 0) return;
  late_ns = std::min(late_ns, max_wake_lateness_sample_ns);
  wake_lateness_ns_ += (late_ns - wake_lateness_ns_) / 8;
}

}  // namespace xrtio::detail
