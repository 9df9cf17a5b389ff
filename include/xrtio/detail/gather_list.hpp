// The reads a thread gathered (docs/DESIGN.md, "File I/O", "Gathered on the
// caller's thread"): small cached reads that a handler running on this
// thread issued while others of its context were in flight, read together
// once it returns. One list per thread, so that a read waits only for the
// handler that issued it (or one before it on the same thread), never for a
// handler another thread of the same context is running.
#pragma once

#include <atomic>
#include <memory>

namespace xrtio::detail {

class run_op_base;

/// A lock-free stack of ops linked through run_op_base::next: pushed by its
/// thread, taken whole by the flush, on whichever thread runs it.
struct gather_list {
  std::atomic<run_op_base*> head{nullptr};
  /// The registry of the context whose executor the pending flush was
  /// deferred to (the first read's), set by the pushing thread when it
  /// finds the list empty; read only by that thread. A thread may run
  /// handlers of two contexts (one's handler calling the other's poll(),
  /// or one's run() returning, stopped, with the flush queued, and then
  /// the other's): a read of the second context does not join the first
  /// one's flush, which that context may hold while stopped, and which the
  /// second one's shutdown does not see (run_op::gather,
  /// reactor::gather_early). It goes to the loop instead.
  const void* owner = nullptr;
  /// Returns whether the list was empty (the caller then defers the flush).
  bool push(run_op_base* op) noexcept;
};

/// This thread's list, made at its first use (one allocation per thread);
/// empty where this thread does not gather (no io_uring ring of its own
/// could be made, or it failed; out of memory). Kept shared with the
/// flushes under way, so a thread may end before its last flush runs.
const std::shared_ptr<gather_list>& this_thread_gather_list() noexcept;

/// Reads what `list` gathered, on the calling thread (src/reactor/gathered_reads.cpp).
void flush_gathered_reads(gather_list& list) noexcept;

}  // namespace xrtio::detail
