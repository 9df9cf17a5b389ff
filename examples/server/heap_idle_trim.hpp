// Gives the heap's free memory back to the kernel once the server has had no
// connection for a while. A burst of connections leaves its working set
// (read buffers, coroutine frames, request buffers: about 70 MiB at 1024
// connections) freed but kept by glibc, because main.cpp raises the trim
// threshold to 64 MiB so that busy periods do not give pages back and fault
// them in again per request. Idle is the time to return them: RSS then
// shows what is still in use, and a leak is not hidden behind retention
// (docs/SERVER.md, "Memory after a load").
#pragma once

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace server {

class heap_idle_trim {
 public:
  /// `delay` 0: never trims.
  heap_idle_trim(asio::io_context& io, std::chrono::milliseconds delay);

  /// The last connection closed: trims after `delay` unless one opens
  /// before. "Idle" is no connection, not no request: one idle keep-alive
  /// connection (a scraper, a balancer's pool) keeps the memory in the heap.
  /// idle() and busy() must be serialized by the caller (the server's
  /// registry mutex), so that the timer is armed in their order.
  /// Never throws: without memory to schedule the trim it counts a skip.
  void idle() noexcept;
  /// A connection opened: a pending trim is called off (one whose handler
  /// is already past its check still runs: a cost, not an error).
  void busy() noexcept { generation_.fetch_add(1, std::memory_order_relaxed); }
  /// Cancels a pending trim (shutdown: the io_context need not wait for it).
  void stop() noexcept;
  std::uint64_t trims() const noexcept { return trims_.load(std::memory_order_relaxed); }
  /// Idle periods whose trim could not be scheduled (no memory).
  std::uint64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }

 private:
  std::chrono::milliseconds delay_;
  std::mutex mutex_;  // the timer's operations come from any io thread
  asio::steady_timer timer_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint64_t> trims_{0};
  std::atomic<std::uint64_t> skipped_{0};
  bool stopped_ = false;  // under mutex_
};

}  // namespace server
