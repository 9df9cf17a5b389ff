#include "heap_idle_trim.hpp"

#include <malloc.h>

#include <new>

namespace server {

heap_idle_trim::heap_idle_trim(asio::io_context& io, std::chrono::milliseconds delay)
    : delay_(delay), timer_(io) {}

void heap_idle_trim::idle() noexcept {
  if (delay_.count() == 0) return;
  auto gen = generation_.load(std::memory_order_relaxed);
  // idle() runs in a connection's exit (a destructor, connection.cpp), on any
  // io thread: the timer is armed here, under a mutex, not through a strand.
  // A post to a strand allocates twice (its operation, then the strand's
  // invoker): a failure of the second left the strand locked with nothing
  // to run it, and every later idle() and stop() queued behind it for good.
  // The wait's one allocation either succeeds or throws before anything is
  // registered; without memory for it no trim is scheduled this time, and
  // the heap keeps its free pages until the next idle period.
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  timer_.expires_after(delay_);  // a pending wait ends with operation_aborted
  try {
    timer_.async_wait([this, gen](std::error_code ec) {
      if (ec || generation_.load(std::memory_order_relaxed) != gen) return;
      ::malloc_trim(0);
      trims_.fetch_add(1, std::memory_order_relaxed);
    });
  } catch (const std::bad_alloc&) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void heap_idle_trim::stop() noexcept {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  timer_.cancel();  // a pending wait ends with operation_aborted: no trim after stop
}

}  // namespace server
