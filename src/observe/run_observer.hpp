// What a runtime records about its runs besides its counters: the always-kept
// histograms of device time and lease queueing (written by the reactor's
// loop from stamps it has anyway), and, only when enabled, the trace ring
// and the completion-to-resume histogram, which cost clock reads and atomics
// per run (runtime_options::trace_capacity, latency_histograms).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "latency_histogram.hpp"
#include "trace_ring.hpp"
#include "xrtio/detail/run_observer.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio::detail {

/// Written by the reactor's loop only.
struct run_metrics {
  latency_histogram device_time;     // started -> device completion (or observation)
  latency_histogram lease_queueing;  // waiting for leases (0: acquired at once)
};

/// Exists only when the runtime traces or keeps latency histograms.
class run_observer {
 public:
  /// Null when neither is enabled in `o`.
  static std::unique_ptr<run_observer> make(const runtime_options& o);

  trace_ring* trace() noexcept { return trace_.get(); }
  const trace_ring* trace() const noexcept { return trace_.get(); }
  bool latency() const noexcept { return latency_; }
  const latency_histogram& resume() const noexcept { return resume_; }

  /// Run ids for the trace, from 1.
  std::uint64_t next_run_id() noexcept { return next_run_id_.fetch_add(1, std::memory_order_relaxed) + 1; }

 private:
  friend void observe_resume(run_observer&, std::uint64_t, std::chrono::steady_clock::time_point) noexcept;
  run_observer(std::size_t trace_capacity, bool latency);

  std::unique_ptr<trace_ring> trace_;
  bool latency_;
  latency_histogram resume_;  // observed -> handler called
  std::atomic<std::uint64_t> next_run_id_{0};
};

}  // namespace xrtio::detail
