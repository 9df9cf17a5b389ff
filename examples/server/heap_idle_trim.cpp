#include "heap_idle_trim.hpp"

#include <malloc.h>

#include <new>

namespace server {

heap_idle_trim::heap_idle_trim(asio::io_context& io, std::chrono::milliseconds delay)
    : delay_(delay), strand_(asio::make_strand(io)), timer_(strand_) {}

void heap_idle_trim::idle() noexcept {
  if (delay_.count() == 0) return;
  auto gen = generation_.load(std::memory_order_relaxed);
  // The post allocates its handler, and idle() runs in a connection's exit
  // (a destructor, connection.cpp): a bad_alloc there ended the process.
  // Without memory for it no trim is scheduled this time; the heap keeps its
  // free pages until the next idle period. The wait below allocates on the
  // strand, inside a handler, where Asio reports its failure from run().
  try {
    asio::post(strand_, [this, gen] {
      if (stopped_) return;
      timer_.expires_after(delay_);  // a pending wait ends with operation_aborted
      timer_.async_wait([this, gen](std::error_code ec) {
        if (ec || stopped_ || generation_.load(std::memory_order_relaxed) != gen) return;
        ::malloc_trim(0);
        trims_.fetch_add(1, std::memory_order_relaxed);
      });
    });
  } catch (const std::bad_alloc&) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
  }
}

void heap_idle_trim::stop() {
  asio::post(strand_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

}  // namespace server
