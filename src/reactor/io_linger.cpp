// The io thread lingers (docs/DESIGN.md, "The io thread lingers"; see
// xrtio/detail/io_linger.hpp).
#include "xrtio/detail/io_linger.hpp"

#include <asio/execution.hpp>
#include <asio/prefer.hpp>
#include <asio/require.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "util/cpu_relax.hpp"
#include "reactor.hpp"
#include "spin_policy.hpp"
#include "xrtio/detail/static_block_pool.hpp"

namespace xrtio::detail {

namespace {
using clock = std::chrono::steady_clock;

// One per thread, made at the first run it submits from a handler
// (linger_begin, also with window 0). Shared with the deferred
// handler, which the io_context may destroy unrun on another thread (its
// shutdown) after this thread ended.
struct linger_state {
  std::uint64_t completed = 0;  // batches of completions run on this thread
  std::uint64_t baseline = 0;   // ... when the current linger began or was renewed
  // A linger handler is queued or running. Atomic: io's shutdown may destroy
  // a queued one on another thread.
  std::atomic<bool> active{false};
  bool renewed = false;         // a run was submitted while it lingered
  clock::time_point started{};  // empty: set by the handler's first call
  unsigned skipped = 0;         // submissions not lingered for since the budget fell to none
  std::chrono::nanoseconds window{0};
  spin_policy budget{std::chrono::nanoseconds(0)};
};

struct state_holder {
  std::shared_ptr<linger_state> state;
  ~state_holder();
};
// Trivially destructible, so still readable after the holder's destructor
// ran at the thread's exit (a run submitted from a static destructor).
thread_local bool state_gone = false;
thread_local state_holder this_thread_state;
state_holder::~state_holder() { state_gone = true; }

void defer_linger(asio::io_context& io, std::shared_ptr<linger_state> st) noexcept;

// Re-defers itself (continuation: the thread's private queue, no lock, no
// wake-up) while it waits; handlers queued meanwhile run in between.
struct linger_fn {
  asio::io_context* io;
  std::shared_ptr<linger_state> st;
  using allocator_type = static_block_allocator<void>;
  allocator_type get_allocator() const noexcept { return {}; }

  linger_fn(asio::io_context* i, std::shared_ptr<linger_state> s) noexcept : io(i), st(std::move(s)) {}
  linger_fn(linger_fn&& o) noexcept = default;
  linger_fn& operator=(linger_fn&&) = delete;
  // Destroyed unrun (io's shutdown), or after its last call: the thread may
  // linger again.
  ~linger_fn() {
    if (st) st->active.store(false, std::memory_order_relaxed);
  }

  void operator()() {
    // Another thread of a multi-threaded io_context took it: the state is
    // its owner's, unsynchronized, and lingering here keeps no one awake
    // for that owner's completion (a data race under TSan with --threads 2
    // in the example server). End it; the destructor clears `active`.
    if (state_gone || this_thread_state.state != st) return;
    auto& s = *st;
    auto now = clock::now();
    if (s.started == clock::time_point{}) s.started = now;
    if (s.completed != s.baseline) {
      if (!s.renewed) {  // the completion ran and submitted nothing more: done
        s.budget.activity_after(now - s.started);
        s.started = {};
        return;
      }
      // Its handler submitted another short run: linger for that one.
      s.budget.activity_after(now - s.started);
      s.baseline = s.completed;
      s.renewed = false;
      s.started = now;
    }
    if (now - s.started >= s.budget.budget()) {
      s.budget.missed();
      s.started = {};
      return;
    }
    cpu_relax();
    defer_linger(*io, std::move(st));
  }
};

void defer_linger(asio::io_context& io, std::shared_ptr<linger_state> st) noexcept {
  try {
    asio::execution::execute(
        asio::prefer(asio::require(io.get_executor(), asio::execution::blocking.never),
                     asio::execution::relationship.continuation,
                     asio::execution::allocator(static_block_allocator<void>())),
        linger_fn(&io, std::move(st)));
  } catch (...) {
    // Not deferred (out of memory): the linger_fn destroyed on the way
    // ended it; the completion will wake this thread as without a linger.
  }
}
}  // namespace

std::chrono::nanoseconds linger_window(const reactor& r) noexcept {
  return r.short_runs() ? r.options().spin_window : std::chrono::nanoseconds(0);
}

void linger_begin(asio::io_context& io, std::chrono::nanoseconds window) noexcept {
  if (state_gone) return;
  auto& h = this_thread_state;
  if (!h.state) {
    try {
      h.state = std::make_shared<linger_state>();
    } catch (...) {
      return;
    }
  }
  if (window.count() == 0) return;
  auto& s = *h.state;
  if (s.active.load(std::memory_order_relaxed)) {
    s.renewed = true;
    return;
  }
  if (s.window != window) {  // another runtime's window: start over
    s.window = window;
    s.budget = spin_policy(window);
  }
  if (s.budget.budget().count() == 0) {
    // Lingering has not been paying: try again now and then, or it would
    // never learn that it pays again.
    if (++s.skipped % 64 != 0) return;
    s.budget.activity_after(std::chrono::nanoseconds(0));
  }
  s.active.store(true, std::memory_order_relaxed);
  s.renewed = false;
  s.baseline = s.completed;
  s.started = {};
  defer_linger(io, h.state);
}

bool linger_active_here() noexcept {
  if (state_gone) return false;
  auto& st = this_thread_state.state;
  return st && st->active.load(std::memory_order_relaxed);
}

void linger_note_completions() noexcept {
  if (state_gone) return;
  if (auto& st = this_thread_state.state) ++st->completed;
}

}  // namespace xrtio::detail
