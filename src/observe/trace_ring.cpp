// The trace ring's readers and the recording thread's id.
#include "trace_ring.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace xrtio::detail {

trace_ring::trace_ring(std::size_t capacity) : capacity_(capacity), slots_(new slot[capacity]) {}

std::uint32_t trace_ring::this_thread() noexcept {
  // One system call per thread, then a thread-local read.
  thread_local const std::uint32_t id = static_cast<std::uint32_t>(::syscall(SYS_gettid));
  return id;
}

trace_stats trace_ring::stats() const noexcept {
  trace_stats s;
  s.capacity = capacity_;
  s.recorded = head_.load(std::memory_order_relaxed);
  s.dropped = (s.recorded > capacity_ ? s.recorded - capacity_ : 0) + lost_.load(std::memory_order_relaxed);
  if (s.dropped > s.recorded) s.dropped = s.recorded;
  return s;
}

std::vector<trace_event> trace_ring::snapshot() const {
  const std::uint64_t head = head_.load(std::memory_order_acquire);
  const std::uint64_t oldest = head > capacity_ ? head - capacity_ : 0;
  std::vector<trace_event> v;
  v.reserve(capacity_);
  for (std::size_t n = 0; n < capacity_; ++n) {
    const slot& s = slots_[n];
    std::uint64_t before = s.seq.load(std::memory_order_acquire);
    if (before == 0 || (before & busy)) continue;
    trace_event e;
    e.run = s.run.load(std::memory_order_relaxed);
    auto t = s.time.load(std::memory_order_relaxed);
    auto meta = s.meta.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != before) continue;  // rewritten meanwhile
    e.sequence = before - 1;
    if (e.sequence < oldest) continue;  // a slot whose newer event was dropped
    e.time = clock::time_point(clock::duration(t));
    e.kind = static_cast<trace_event_kind>(meta & 0xff);
    auto detail = static_cast<std::uint8_t>(meta >> 8);
    if (detail & 0x7f) e.state = static_cast<run_state>(detail & 0x7f);  // else new_
    e.failed = (detail & 0x80) != 0;
    e.thread = static_cast<std::uint32_t>(meta >> 32);
    v.push_back(e);
  }
  std::sort(v.begin(), v.end(), [](const trace_event& a, const trace_event& b) { return a.sequence < b.sequence; });
  return v;
}

}  // namespace xrtio::detail
