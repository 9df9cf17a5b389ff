// A small io_uring of the calling thread's own for reads that must not
// block: the cached reads gathered on a caller's thread (docs/DESIGN.md,
// "File I/O", "Gathered on the caller's thread") go in with RWF_NOWAIT, so
// each completes inside the submission (its data copied, or -EAGAIN when
// not all of it is cached) and the ring is empty again when read_all
// returns. Nothing is ever in flight on it between calls, so nobody waits
// on it and it needs no lock: one per thread that flushes, made at that
// thread's first flush, closed when the thread ends.
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

namespace xrtio::detail {

class caller_ring {
 public:
  /// Requests per submission at most.
  static constexpr unsigned entries = 64;

  struct request {
    int fd;
    void* memory;
    unsigned length;
    std::uint64_t offset;
    int result;  ///< bytes read, or -errno; -ECANCELED: not submitted
  };

  /// The calling thread's ring, made on first use; null where io_uring
  /// refuses one, once it failed, and after the thread's ring was destroyed
  /// at its exit (then on this thread for good).
  static caller_ring* of_this_thread() noexcept;
  /// Whether of_this_thread() is not null (making the ring at the first call).
  static bool usable_here() noexcept { return of_this_thread() != nullptr; }

  /// Reads `rs` (at most `entries`) with RWF_NOWAIT in one submission and
  /// fills each result. A request the kernel did not take keeps -ECANCELED;
  /// then the ring is closed (a request left in its queue would be
  /// submitted by the next call) and this thread makes no other.
  void read_all(std::span<request> rs) noexcept;

  caller_ring(const caller_ring&) = delete;
  caller_ring& operator=(const caller_ring&) = delete;
  ~caller_ring();

 private:
  caller_ring() = default;
  bool init() noexcept;
  void close() noexcept;
  io_uring ring_{};
  bool open_ = false;
  bool failed_ = false;
};

/// For tests: 1 = the next ring a thread makes is refused, 2 = the next
/// submission takes only the first request (as a kernel that stops short
/// would). Reset to 0 when used. Read with a plain load first: the
/// exchange, which takes the cache line, only when set.
extern std::atomic<int> caller_ring_fault;

}  // namespace xrtio::detail
