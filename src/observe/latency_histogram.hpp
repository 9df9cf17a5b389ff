// A histogram of durations with fixed buckets (powers of two from 1 us to 8.4 s),
// updated without a lock: by one writer with plain relaxed stores (the
// reactor's loop), or by any thread with atomic adds.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

namespace xrtio::detail {

class latency_histogram {
 public:
  /// Bucket k holds durations up to 2^k us (Prometheus' inclusive `le`), for
  /// k = 0 .. 23 (1 us to 8.4 s); one more bucket (+Inf) follows. Powers of
  /// two make the bucket a bit_width, with no search and no mispredicted
  /// branch: the reactor adds two samples per run.
  static constexpr std::size_t bounds = 24;
  static constexpr std::size_t buckets = bounds + 1;
  static constexpr std::int64_t bound_ns(std::size_t k) noexcept { return std::int64_t{1000} << k; }

  struct snapshot_t {
    std::array<std::uint64_t, buckets> counts{};  // per bucket, not cumulative
    std::int64_t sum_ns = 0;
  };

  /// Only one thread ever adds (no locked instruction).
  void add_single_writer(std::int64_t ns) noexcept {
    ns = std::max<std::int64_t>(ns, 0);
    auto& c = counts_[index(ns)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (ns) sum_ns_.store(sum_ns_.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
  }
  /// Any thread.
  void add(std::int64_t ns) noexcept {
    ns = std::max<std::int64_t>(ns, 0);
    counts_[index(ns)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  }

  snapshot_t snapshot() const noexcept {
    snapshot_t s;
    for (std::size_t i = 0; i < buckets; ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.sum_ns = sum_ns_.load(std::memory_order_relaxed);
    return s;
  }

 private:
  static std::size_t index(std::int64_t ns) noexcept {
    // ns in (1000 * 2^(k-1), 1000 * 2^k] -> k; up to 1000 -> 0.
    auto us_above = static_cast<std::uint64_t>(std::max<std::int64_t>(ns, 1) - 1) / 1000;
    return std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(us_above)), bounds);
  }
  std::array<std::atomic<std::uint64_t>, buckets> counts_{};
  std::atomic<std::int64_t> sum_ns_{0};
};

}  // namespace xrtio::detail
