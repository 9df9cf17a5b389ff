// A histogram of durations with fixed buckets (1 us to 10 s, 1-2.5-5 steps),
// updated without a lock: by one writer with plain relaxed stores (the
// reactor's loop), or by any thread with atomic adds.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace xrtio::detail {

class latency_histogram {
 public:
  /// Upper bounds (inclusive, as Prometheus' `le`) in nanoseconds; one more
  /// bucket (+Inf) follows.
  static constexpr std::array<std::int64_t, 22> bounds_ns = {
      1'000,         2'500,         5'000,         10'000,         25'000,        50'000,
      100'000,       250'000,       500'000,       1'000'000,      2'500'000,     5'000'000,
      10'000'000,    25'000'000,    50'000'000,    100'000'000,    250'000'000,   500'000'000,
      1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};
  static constexpr std::size_t buckets = bounds_ns.size() + 1;

  struct snapshot_t {
    std::array<std::uint64_t, buckets> counts{};  // per bucket, not cumulative
    std::int64_t sum_ns = 0;
  };

  /// Only one thread ever adds (no locked instruction).
  void add_single_writer(std::int64_t ns) noexcept {
    ns = std::max<std::int64_t>(ns, 0);
    auto& c = counts_[index(ns)];
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    sum_ns_.store(sum_ns_.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
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
    return static_cast<std::size_t>(std::lower_bound(bounds_ns.begin(), bounds_ns.end(), ns) - bounds_ns.begin());
  }
  std::array<std::atomic<std::uint64_t>, buckets> counts_{};
  std::atomic<std::int64_t> sum_ns_{0};
};

}  // namespace xrtio::detail
