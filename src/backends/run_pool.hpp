// A kernel's finished native runs, kept for reuse: making a run costs an
// allocation (and, on XRT, a command buffer), so in steady state a backend
// hands out pooled runs and allocates nothing per run.
//
// Runs are given back by whichever thread releases them (for asynchronous
// runs the thread that frees the operation, usually the submitting io
// thread itself; the reactor for runs it retires) and taken by the
// submitting threads. The give side is a lock-free push (a giver never
// waits for a submitter); takers share a private list under a mutex that only takers
// use, refilled from the given runs with one exchange when it runs dry. With
// one mutex for both, the reactor's per-run give contended with the io
// thread's take at many runs in flight (docs/PERFORMANCE.md, "Batched lease
// release and the run pool").
#pragma once

#include <atomic>
#include <cstddef>
#include <limits>
#include <mutex>

namespace xrtio::detail {

/// `Run` has a member `Run* pool_next` (the pool's link while idle).
template <class Run>
class run_pool {
 public:
  /// Keeps at most `capacity` idle runs; more are deleted when given back.
  explicit run_pool(std::size_t capacity = unbounded) : capacity_(capacity) {}
  run_pool(const run_pool&) = delete;
  run_pool& operator=(const run_pool&) = delete;
  /// Pooled runs are final (their owners checked before giving them back).
  ~run_pool() {
    destroy(taken_);
    destroy(given_.exchange(nullptr, std::memory_order_acquire));
  }

  /// An idle run, or null when there is none.
  Run* take() noexcept {
    std::lock_guard lock(take_mutex_);
    if (!taken_) taken_ = given_.exchange(nullptr, std::memory_order_acquire);
    Run* r = taken_;
    if (!r) return nullptr;
    taken_ = r->pool_next;
    r->pool_next = nullptr;
    taken_count_.store(taken_count_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return r;
  }

  /// Takes `r` back for reuse; deletes it when the pool is full.
  void give(Run* r) noexcept {
    // A bounded pool reads the takers' count; an unbounded one (the
    // simulator's) touches nothing of theirs. Two givers at once may both
    // pass the check: the bound is kept to within the number of givers.
    if (capacity_ != unbounded && idle() >= capacity_) {
      delete r;
      return;
    }
    given_count_.fetch_add(1, std::memory_order_relaxed);
    Run* head = given_.load(std::memory_order_relaxed);
    do r->pool_next = head;
    while (!given_.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
  }

  /// Idle runs now: give() bounds the pool by it; tests read it.
  std::size_t idle() const noexcept {
    // Read apart, the two counts can show a run as taken and not yet as
    // given (a taker counts only runs whose give it saw, but another giver's
    // count may not have reached this thread): none idle, then, not a wrap.
    auto given = given_count_.load(std::memory_order_relaxed);
    auto taken = taken_count_.load(std::memory_order_relaxed);
    return given > taken ? given - taken : 0;
  }

 private:
  static void destroy(Run* r) noexcept {
    while (r) {
      Run* next = r->pool_next;
      delete r;
      r = next;
    }
  }

  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();
  // The give side and the take side on cache lines of their own: with one
  // shared idle count (an atomic add per give, a subtract per take) and the
  // takers' mutex on the givers' line, every run moved that line between the
  // reactor's core and the io thread's twice.
  static constexpr std::size_t line = 64;
  const std::size_t capacity_;
  alignas(line) std::atomic<Run*> given_{nullptr};  // pushed by give(), taken whole by take()
  std::atomic<std::size_t> given_count_{0};         // runs ever kept by give()
  alignas(line) std::mutex take_mutex_;
  Run* taken_ = nullptr;                    // under take_mutex_
  std::atomic<std::size_t> taken_count_{0};  // runs ever taken; written under take_mutex_
};

}  // namespace xrtio::detail
