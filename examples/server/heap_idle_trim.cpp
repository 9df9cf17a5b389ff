#include "heap_idle_trim.hpp"

#include <malloc.h>

namespace server {

heap_idle_trim::heap_idle_trim(asio::io_context& io, std::chrono::milliseconds delay)
    : delay_(delay), strand_(asio::make_strand(io)), timer_(strand_) {}

void heap_idle_trim::idle() {
  if (delay_.count() == 0) return;
  auto gen = generation_.load(std::memory_order_relaxed);
  asio::post(strand_, [this, gen] {
    if (stopped_) return;
    timer_.expires_after(delay_);  // a pending wait ends with operation_aborted
    timer_.async_wait([this, gen](std::error_code ec) {
      if (ec || stopped_ || generation_.load(std::memory_order_relaxed) != gen) return;
      ::malloc_trim(0);
      trims_.fetch_add(1, std::memory_order_relaxed);
    });
  });
}

void heap_idle_trim::stop() {
  asio::post(strand_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

}  // namespace server
