// The trace's bounded ring of events (xrtio/trace.hpp): any thread records,
// without a lock or an allocation; the oldest events are overwritten.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "xrtio/trace.hpp"

namespace xrtio::detail {

class trace_ring {
 public:
  using clock = std::chrono::steady_clock;

  /// Allocates `capacity` (> 0) slots, once.
  explicit trace_ring(std::size_t capacity);

  /// One event. A ticket from one fetch_add picks the slot; the writer then
  /// claims it with a compare-and-swap and publishes it seqlock-style, so a
  /// reader never takes a half-written event. If the slot is still being
  /// written by the writer of an older lap, or already holds a newer event,
  /// this event is dropped (counted) rather than waited for.
  void record(trace_event_kind k, std::uint64_t run, clock::time_point t, std::uint8_t detail = 0) noexcept {
    const std::uint64_t i = head_.fetch_add(1, std::memory_order_relaxed);
    slot& s = slots_[i % capacity_];
    std::uint64_t seen = s.seq.load(std::memory_order_relaxed);
    if ((seen & busy) || seen > i ||
        !s.seq.compare_exchange_strong(seen, busy | i, std::memory_order_acquire, std::memory_order_relaxed)) {
      lost_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    std::atomic_thread_fence(std::memory_order_release);  // the claim is seen before the fields change
    s.run.store(run, std::memory_order_relaxed);
    s.time.store(t.time_since_epoch().count(), std::memory_order_relaxed);
    s.meta.store(static_cast<std::uint64_t>(k) | std::uint64_t(detail) << 8 | std::uint64_t(this_thread()) << 32,
                 std::memory_order_relaxed);
    s.seq.store(i + 1, std::memory_order_release);
  }

  std::size_t capacity() const noexcept { return capacity_; }
  trace_stats stats() const noexcept;
  /// The events in the ring, by sequence (those being written are left out).
  std::vector<trace_event> snapshot() const;

 private:
  static constexpr std::uint64_t busy = std::uint64_t(1) << 63;
  // seq: 0 = never written; busy | ticket = being written; ticket + 1 = holds
  // the event of that ticket. Every field is an atomic, so a reader racing a
  // writer reads stale values, never undefined ones, and discards them.
  struct slot {
    std::atomic<std::uint64_t> seq{0};
    std::atomic<std::uint64_t> run{0};
    std::atomic<std::int64_t> time{0};
    std::atomic<std::uint64_t> meta{0};  // kind | detail << 8 | thread << 32
  };
  static std::uint32_t this_thread() noexcept;

  std::size_t capacity_;
  std::unique_ptr<slot[]> slots_;
  alignas(64) std::atomic<std::uint64_t> head_{0};  // tickets handed out = events recorded
  std::atomic<std::uint64_t> lost_{0};
};

}  // namespace xrtio::detail
