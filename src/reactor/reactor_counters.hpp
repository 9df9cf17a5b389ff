// The reactor's statistics: written by the reactor thread alone (so a plain
// load + store, no locked read-modify-write), read from any thread by
// runtime::stats().
#pragma once

#include <atomic>
#include <cstdint>

#include "xrtio/runtime.hpp"

namespace xrtio::detail {

struct reactor_counters {
  using counter = std::atomic<std::uint64_t>;
  counter submitted{0}, completed{0}, failed{0}, timed_out{0}, cancelled{0}, retained{0}, in_flight{0}, polls{0},
      wakeups{0}, sleeps{0}, batches{0}, predicted_wakeups{0}, predictions_missed{0};

  /// Single writer: adds without a locked instruction.
  static void bump(counter& c, std::uint64_t by = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  static void drop(counter& c) noexcept { bump(c, std::uint64_t(-1)); }

  runtime_stats snapshot() const noexcept {
    runtime_stats s;
    s.submitted = submitted.load(std::memory_order_relaxed);
    s.completed = completed.load(std::memory_order_relaxed);
    s.failed = failed.load(std::memory_order_relaxed);
    s.timed_out = timed_out.load(std::memory_order_relaxed);
    s.cancelled = cancelled.load(std::memory_order_relaxed);
    s.retained = retained.load(std::memory_order_relaxed);
    s.in_flight = in_flight.load(std::memory_order_relaxed);
    s.polls = polls.load(std::memory_order_relaxed);
    s.wakeups = wakeups.load(std::memory_order_relaxed);
    s.sleeps = sleeps.load(std::memory_order_relaxed);
    s.batches = batches.load(std::memory_order_relaxed);
    s.predicted_wakeups = predicted_wakeups.load(std::memory_order_relaxed);
    s.predictions_missed = predictions_missed.load(std::memory_order_relaxed);
    return s;
  }
};

}  // namespace xrtio::detail
