// Making a runtime's observer, and the handler side's report.
#include "run_observer.hpp"

namespace xrtio::detail {

std::unique_ptr<run_observer> run_observer::make(const runtime_options& o) {
  if (o.trace_capacity == 0 && !o.latency_histograms) return nullptr;
  return std::unique_ptr<run_observer>(new run_observer(o.trace_capacity, o.latency_histograms));
}

run_observer::run_observer(std::size_t trace_capacity, bool latency)
    : trace_(trace_capacity ? std::make_unique<trace_ring>(trace_capacity) : nullptr), latency_(latency) {}

void observe_resume(run_observer& o, std::uint64_t run_id, std::chrono::steady_clock::time_point observed) noexcept {
  auto now = std::chrono::steady_clock::now();
  if (o.trace_) o.trace_->record(trace_event_kind::resumed, run_id, now);
  if (o.latency_ && observed != std::chrono::steady_clock::time_point{}) o.resume_.add((now - observed).count());
}

}  // namespace xrtio::detail
