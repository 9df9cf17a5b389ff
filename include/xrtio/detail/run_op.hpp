// The asynchronous run operation: what async_run allocates (from the
// handler's associated allocator) and the reactor drives.
#pragma once

#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution.hpp>
#include <asio/execution_context.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/require.hpp>
#include <asio/query.hpp>
#include <asio/recycling_allocator.hpp>
#include <asio/bind_allocator.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "xrtio/detail/abort_ticket.hpp"
#include "xrtio/detail/arena_allocator.hpp"
#include "xrtio/detail/completion_service.hpp"
#include "xrtio/detail/concrete_executor.hpp"
#include "xrtio/detail/gather_list.hpp"
#include "xrtio/detail/io_linger.hpp"
#include "xrtio/detail/run_core.hpp"
#include "xrtio/detail/run_observer.hpp"
#include "xrtio/detail/static_block_pool.hpp"

namespace xrtio::detail {

class run_op_base;

/// The flush of a thread's gathered reads, deferred to the executor of the
/// handler that issued the first of them (run_op::gather). Destroyed unrun
/// (that executor's context shut down), it flushes all the same: the reads
/// hold leases, and other contexts' runs may wait for them; the handlers of
/// those whose context is gone are destroyed as any orphan's (the reads of
/// another context in it are registered: reactor::gather_early).
class gathered_flush {
 public:
  using allocator_type = static_block_allocator<void>;
  explicit gathered_flush(std::shared_ptr<gather_list> l) noexcept : list_(std::move(l)) {}
  gathered_flush(gathered_flush&&) noexcept = default;
  gathered_flush& operator=(gathered_flush&&) = delete;
  ~gathered_flush() {
    if (list_) flush_gathered_reads(*list_);
  }
  allocator_type get_allocator() const noexcept { return {}; }
  void operator()() {
    auto l = std::move(list_);
    flush_gathered_reads(*l);
  }

 private:
  std::shared_ptr<gather_list> list_;
};


class run_op_base {
 public:
  enum class phase : std::uint8_t { waiting, on_device, aborting, finished };
  enum class abort_reason : std::uint8_t { none, timeout, cancel, shutdown };
  // orphaned: its context shut down before the run was posted. Then whichever
  // of the completion service (handler destroyed) and the reactor (run final)
  // gets there second frees the op: handler_gone / reactor_done mark the first.
  enum life_state : int { pending = 0, posted = 1, orphaned = 2, handler_gone = 3, reactor_done = 4 };

  struct vtable {
    bool (*same_executor)(const run_op_base*, const run_op_base*) noexcept;
    // head->batch_next... all same type and executor. `backlog`: the loop
    // posts them, and they count in its backlog until they begin (the
    // doze's measure) and end a linger when they run; completions posted
    // on other threads (a read done in place or gathered, a re-post after
    // a throwing handler, after the loop stopped) do neither: they are not
    // the loop's batches, and the count cost a cached 4 KiB read about 5 %
    // (docs/PERFORMANCE.md, "A read done in place: no linger, no backlog
    // count").
    void (*post_batch)(run_op_base* head, bool backlog) noexcept;
    void (*destroy_handler)(run_op_base*) noexcept;  // orphaned: handler and work, not the op
    void (*free)(run_op_base*) noexcept;             // orphaned and finished: the op's storage
    // A declined read (reactor thread mode): if the handler's executor runs
    // on this thread, adds the op to this thread's gathered reads (deferring
    // their flush to that executor when it is the first) and returns true;
    // else false, having done nothing. With `push` false it only tells
    // which it would do.
    bool (*gather)(run_op_base*, bool push) noexcept;
  };

  run_op_base(const vtable* vt, xrtio::kernel k, std::span<arg_slot> s, std::span<access_request> r) noexcept
      : core(std::move(k), s, r), vt_(vt) {}

  run_core core;
  run_options options;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::atomic<unsigned> cancel_bits{0};
  std::atomic<int> life{pending};
  phase ph = phase::on_device;
  // A file transfer (file_op_base) rather than a kernel run: the reactor
  // performs it on its file engine instead of a device. Beside the phase:
  // the reactor's intake reads both (and fetches their line ahead).
  bool file_io = false;
  abort_reason reason = abort_reason::none;
  access_waiter waiter{};
  std::shared_ptr<abort_ticket> ticket;
  std::chrono::steady_clock::time_point abort_deadline{};
  std::error_code ec;
  run_result result;
  std::shared_ptr<reactor> rx;  // keeps the reactor alive for the cancellation handler
  // Set at submission only when the runtime traces or keeps latency
  // histograms (null otherwise); run_id only when it traces.
  run_observer* observer = nullptr;
  std::uint64_t run_id = 0;
  // When the run began waiting for its leases (conflict_policy::wait), for
  // the lease-queueing histogram; empty for a run that acquired at once.
  std::chrono::steady_clock::time_point queued_at{};

  // Reactor thread only: when this run is expected to finish (max(): no prediction).
  std::chrono::steady_clock::time_point predicted = std::chrono::steady_clock::time_point::max();
  // Reactor thread only: the last scan that found it still running (empty:
  // none did). Where the device gives no completion time (XRT) it bounds the
  // run's device time from below without counting the reactor's own
  // lateness (resubmit_policy).
  std::chrono::steady_clock::time_point seen_running{};
  run_op_base* next = nullptr;        // reactor lists
  std::uint64_t intake_pos = 0;      // the reactor's intake: its place when the ring was full
  run_op_base* batch_next = nullptr;  // completion batches
  std::shared_ptr<completion_registry> registry;
  // A read done at once or gathered, unregistered (reactor::read_at_once,
  // gather_early): the registry whose at_once count holds it until its
  // handler begins or is destroyed, or until it registers (to_loop). Not
  // owned: the function that completes the op was queued in that
  // registry's context before its shutdown began (the registry was not
  // shut down), or the flush that holds a gathered one was (it joins only
  // a flush of its own context), and a context runs or destroys such
  // functions during its shutdown, before it destroys any service.
  completion_registry* at_once_registry = nullptr;
  std::uint32_t reg_slot = 0;          // its slot in the registry's table, while registered
  run_op_base* reg_next = nullptr;     // the registry's shutdown: its orphans

  // A read the caller's thread may do at once from the page cache (buffered,
  // not a stream, 1 byte to file_options::inline_read_limit), set at
  // initiation; while registered it counts in its registry's
  // inline_candidates (reg_counted), under the registry's lock.
  bool inline_candidate = false;
  bool reg_counted = false;

  const vtable& vt() const noexcept { return *vt_; }
  /// What the handler receives after the error code.
  run_result completion_value() const noexcept { return result; }

 private:
  const vtable* vt_;
};

/// Completions posted to handlers' executors and not yet begun, counted per
/// batch by the reactor that finished them (src/reactor/runtime.cpp): while
/// handlers have a backlog the reactor dozes rather than spins
/// (docs/DESIGN.md, "The reactor dozes while handlers are behind").
void reactor_handlers_queued(reactor& r, std::size_t n) noexcept;
void reactor_handlers_begun(reactor& r, std::size_t n) noexcept;

template <class Handler>
using op_allocator_t = std::conditional_t<
    std::is_same_v<asio::associated_allocator_t<Handler>, std::allocator<void>>, asio::recycling_allocator<void>,
    asio::associated_allocator_t<Handler>>;

template <class Handler>
op_allocator_t<Handler> op_allocator(const Handler& h) {
  if constexpr (std::is_same_v<asio::associated_allocator_t<Handler>, std::allocator<void>>)
    return asio::recycling_allocator<void>();
  else
    return asio::get_associated_allocator(h);
}

/// Base is run_op_base for kernel runs, file_op_base for file transfers
/// (xrtio/detail/file_op.hpp): one completion path, one batching, whatever
/// the operation.
template <class Handler, std::size_t NSlots, std::size_t NReqs, class Base = run_op_base>
class run_op final : public Base {
 public:
  using handler_executor = asio::associated_executor_t<Handler, asio::system_executor>;
  // A completion is posted, never run inline (invariant 1), through the
  // standard executor model's require(blocking.never).
  static_assert(asio::execution::is_executor<handler_executor>::value,
                "xrtio: the handler's executor must be a standard Asio executor (asio::execution::is_executor); "
                "the older model's asio::io_context::strand is not: use asio::make_strand(io)");
  static_assert(asio::can_require<handler_executor, asio::execution::blocking_t::never_t>::value,
                "xrtio: the handler's executor must support asio::require(ex, asio::execution::blocking.never), "
                "as every Asio executor does; a type of your own needs require(blocking_t::never_t) "
                "besides execute() and ==");
  using work_executor =
      std::decay_t<decltype(asio::prefer(std::declval<handler_executor>(), asio::execution::outstanding_work.tracked))>;
  using alloc_type = typename std::allocator_traits<op_allocator_t<Handler>>::template rebind_alloc<run_op>;
  static constexpr std::size_t arena_size = 128;

  run_op(Handler&& h, xrtio::kernel k)
      : Base(&table, std::move(k), slots_, reqs_),
        work_(asio::prefer(asio::get_associated_executor(h, asio::system_executor()),
                           asio::execution::outstanding_work.tracked)),
        alloc_(op_allocator(h)),
        handler_(std::move(h)) {}

  std::array<arg_slot, NSlots>& slots() noexcept { return slots_; }
  std::array<access_request, NReqs == 0 ? 1 : NReqs>& requests() noexcept { return reqs_; }
  Handler& handler() noexcept { return *handler_; }
  const work_executor& executor() const noexcept { return *work_; }

  static run_op* create(Handler&& h, xrtio::kernel k) {
    op_allocator_t<Handler> base_alloc = op_allocator(h);
    alloc_type a(base_alloc);
    run_op* p = std::allocator_traits<alloc_type>::allocate(a, 1);
    try {
      return new (p) run_op(std::move(h), std::move(k));
    } catch (...) {
      std::allocator_traits<alloc_type>::deallocate(a, p, 1);
      throw;
    }
  }

  /// Frees the op's storage through its allocator.
  static void destroy(run_op* o) noexcept {
    alloc_type a(std::move(o->alloc_));
    o->core.drop_run();  // before the slots' buffers
    o->~run_op();
    std::allocator_traits<alloc_type>::deallocate(a, o, 1);
  }

 private:
  static bool same_executor(const run_op_base* a, const run_op_base* b) noexcept {
    if (&a->vt() != &b->vt()) return false;
    // Equal executors share a context, hence a registry. Under its lock a
    // pending op's executor cannot be destroyed by the context's shutdown.
    if (a->registry != b->registry) return false;
    auto compare = [&] {
      return *static_cast<const run_op*>(a)->work_ == *static_cast<const run_op*>(b)->work_;
    };
    if (!a->registry) return compare();
    // While entered, the context's shutdown destroys no handler (nor the
    // executor in it) of an op still pending here.
    a->registry->enter();
    bool same =
        a->life.load() == run_op_base::pending && b->life.load() == run_op_base::pending && compare();
    a->registry->leave();
    return same;
  }

  // Invoked on the handler's executor: free the op first (Asio's rule,
  // invariant 1), then call the handler, then drop the outstanding work.
  // Out of its registry's table, or its count of reads done at once.
  static void unregister(run_op* o) noexcept {
    if (o->registry) o->registry->remove(o);
    else if (auto* r = std::exchange(o->at_once_registry, nullptr)) r->at_once.fetch_sub(1, std::memory_order_relaxed);
  }

  static void finish(run_op* o) {
    unregister(o);
    auto slot = asio::get_associated_cancellation_slot(*o->handler_);
    if (slot.is_connected()) slot.clear();
    Handler h(std::move(*o->handler_));
    work_executor w(std::move(*o->work_));
    std::error_code ec = o->ec;
    auto r = o->completion_value();
    // While the op (and through rx its runtime) still exists.
    if (o->observer) [[unlikely]]
      observe_resume(*o->observer, o->run_id, o->result.observed);
    destroy(o);
    std::move(h)(ec, r);
    (void)w;
  }

  struct batch_fn {
    run_op* head;
    std::size_t queued;  // counted in the reactor's backlog until the batch begins
    // Posted by the loop: completions a linger on this thread waits for. A
    // batch posted here (a read done in place, gathered) is not: counting
    // it would end a linger still waiting for a run submitted beside it.
    bool from_loop;
    batch_fn(run_op* h, std::size_t n, bool loop) noexcept : head(h), queued(n), from_loop(loop) {}
    batch_fn(batch_fn&& o) noexcept
        : head(std::exchange(o.head, nullptr)), queued(std::exchange(o.queued, 0)), from_loop(o.from_loop) {}
    batch_fn& operator=(batch_fn&&) = delete;
    ~batch_fn() {
      // Destroyed without running (the executor's context shut down):
      // destroy the handlers unrun and free the ops.
      begin();
      while (head) {
        auto* n = static_cast<run_op*>(head->batch_next);
        unregister(head);
        destroy(head);
        head = n;
      }
    }
    void operator()() {
      // Each handler in turn. If one throws, the ones after it must still
      // run exactly once (invariant 1): post them again before the
      // exception leaves. A catch and rethrow costs nothing until a handler
      // throws; a guard asking std::uncaught_exceptions() in its destructor
      // cost a thread-local lookup per handler (2.3 % of a cached 4 KiB
      // read's samples, docs/PERFORMANCE.md, "File I/O").
      begin();
      if (from_loop) linger_note_completions();
      // The ops and their native runs were last written on other threads
      // (the reactor, the device): each first touch here is a cache miss,
      // and walking the list by batch_next would take them one at a time.
      // So the op two ahead and the native run of the one ahead are asked
      // for while this one's handler runs (docs/PERFORMANCE.md, "Fetching
      // a batch ahead").
      if (head) {
        prefetch_op(head);
        if (auto* n = head->batch_next) prefetch_op(static_cast<run_op*>(n));
        prefetch_native(head);
      }
      while (head) {
        auto* o = head;
        head = static_cast<run_op*>(o->batch_next);
        if (head) {
          if (auto* n2 = head->batch_next) prefetch_op(static_cast<run_op*>(n2));
          prefetch_native(head);
        }
        try {
          finish(o);
        } catch (...) {
          if (head) repost(std::exchange(head, nullptr));
          throw;
        }
      }
    }
    // The batch leaves the reactor's backlog (while the ops, and through
    // them the reactor, still exist).
    void begin() noexcept {
      if (queued && head && head->rx) reactor_handlers_begun(*head->rx, std::exchange(queued, 0));
    }
  };

  // Hints only (prefetchw: the op is freed, the native run recycled here).
  static void prefetch_op(const run_op* o) noexcept {
    auto* p = reinterpret_cast<const char*>(o);
    for (std::size_t off = 0; off < sizeof(run_op); off += 64) __builtin_prefetch(p + off, 1);
  }
  static void prefetch_native(const run_op* o) noexcept {
    if (auto* n = o->core.own_run()) {
      auto* p = reinterpret_cast<const char*>(n);
      __builtin_prefetch(p, 1);
      __builtin_prefetch(p + 64, 1);
    }
  }

  static void post_batch(run_op_base* base, bool backlog) noexcept {
    auto* head = static_cast<run_op*>(base);
    auto reg = head->registry;
    // Ops whose context is going away are freed here instead (their
    // handlers were destroyed by the completion service).
    run_op* live = nullptr;
    run_op** tail = &live;
    if (reg) {
      reg->enter();
      for (auto* o = head; o;) {
        auto* n = static_cast<run_op*>(o->batch_next);
        int expected = run_op_base::pending;
        if (o->life.compare_exchange_strong(expected, run_op_base::posted)) {
          *tail = o;
          tail = reinterpret_cast<run_op**>(&o->batch_next);
        } else {
          // Orphaned: free it if its handler is gone already, else the
          // completion service will once it has destroyed the handler.
          o->batch_next = nullptr;
          if (o->life.exchange(run_op_base::reactor_done) == run_op_base::handler_gone) destroy(o);
        }
        o = n;
      }
      *tail = nullptr;
      if (!live) return reg->leave();
    } else {
      live = head;
    }
    send(live, backlog);
    if (reg) reg->leave();
  }

  // Ops already `posted` whose batch was cut short by a throwing handler.
  static void repost(run_op* live) noexcept {
    auto reg = live->registry;
    if (reg) reg->enter();
    send(live, false);  // from the handler's thread
    if (reg) reg->leave();
  }

  static void send(run_op* live, bool backlog) noexcept {
    // Untracked: the posted function is work of its own, and the op's
    // tracked work_ keeps the context running until finish() drops it on
    // the handler's thread. A tracked copy here, dropped on the reactor's
    // thread after the handler may already have run, could be the context's
    // last work: Asio's work_finished() decrements, then calls stop(), and a
    // thread preempted between the two stopped the io_context after its
    // owner had restarted it for the next operation, whose handler then sat
    // in a stopped io_context (seen under qemu-user: io.stopped() true with
    // a transfer's handler queued; docs/DESIGN.md, "Invariant 1").
    auto* arena = &live->arena_;
    std::size_t n = 0;
    if (backlog && live->rx) {
      for (run_op_base* o = live; o; o = o->batch_next) ++n;
      reactor_handlers_queued(*live->rx, n);
    }
    // Made first, so that whatever throws below leaves the batch to its
    // destructor.
    batch_fn fn(live, n, backlog);
    auto post = [&](const auto& e) {
      // What asio::post does, minus its work_dispatcher hop: never blocking,
      // a fork, storage from the op's arena (no allocation).
      asio::execution::execute(
          asio::prefer(asio::require(e, asio::execution::blocking.never), asio::execution::relationship.fork,
                       asio::execution::allocator(arena_allocator<void, arena_size>(arena))),
          std::move(fn));
    };
    try {
      // Inside the try: the copy of a type-erased executor whose target is
      // larger than its small buffer (an any_io_executor holding a strand)
      // allocates, and this function is noexcept (the failure ended the
      // process: a helper's probe, a rejected run on a strand in
      // any_io_executor; test "async_run: an allocation failing while a
      // completion is posted to a strand held in an any_io_executor...").
      auto ex = asio::prefer(*live->work_, asio::execution::outstanding_work.untracked);
      // A type-erased executor (any_io_executor, use_awaitable's) ignores the
      // allocator property and wraps the function in a heap allocation; post
      // to the io_context executor or strand it holds instead, so the arena
      // is used. Only an exact type match counts (see concrete_executor.hpp).
      with_concrete_executor(ex, post);
    } catch (...) {
      // Posting failed (out of memory): fn's destructor, or that of the
      // copy the executor made of it, destroys the handlers unrun (their
      // executor is the only way to run them: invariant 1); the runs were
      // final and their leases released already.
    }
  }

  static void destroy_handler(run_op_base* base) noexcept {
    auto* o = static_cast<run_op*>(base);
    o->handler_.reset();
    o->work_.reset();
  }
  static void free_op(run_op_base* base) noexcept { destroy(static_cast<run_op*>(base)); }

  // See run_op_base::vtable::gather. On the handler's thread, inside one of
  // its handlers (running_in_this_thread), so the flush, deferred as a
  // continuation (an io_context keeps it in the thread's private queue: no
  // lock, no wake-up), runs once that handler has returned, after the
  // handlers queued before it. Executors that cannot say where they run (a
  // user's own type, system_executor, a thread_pool's inside
  // any_io_executor) are never gathered: their reads go to the loop.
  static bool gather(run_op_base* base, bool push) noexcept {
    auto* o = static_cast<run_op*>(base);
    bool here = false;
    with_concrete_executor(*o->work_, [&](const auto& e) {
      if constexpr (requires { e.running_in_this_thread(); }) here = e.running_in_this_thread();
    });
    if (!here) return false;
    const auto& list = this_thread_gather_list();
    if (!list) return false;
    // A list holds one context's reads: its flush is deferred to that
    // context, which may be stopped (this thread then runs another
    // context's handlers) and would hold another context's read, and its
    // lease, until it runs again (a reviewer's case; gather_list::owner).
    // Only this thread pushes, so a list seen empty stays empty, or
    // becomes this context's, until the push.
    const void* mine = o->registry ? static_cast<const void*>(o->registry.get()) : o->at_once_registry;
    if (mine && list->head.load(std::memory_order_relaxed) != nullptr && list->owner != mine) return false;
    if (!push) return true;
    // Pushed onto a list that was not empty, the op belongs to the flush
    // deferred with the first, which may run on another thread of the
    // context at once: not touched again. Onto an empty list it stays ours:
    // every flush takes the list once, and each earlier one took it before
    // it was empty.
    if (!list->push(o)) return true;
    list->owner = mine;
    auto ex = asio::prefer(*o->work_, asio::execution::outstanding_work.untracked);
    gathered_flush flush(list);
    try {
      with_concrete_executor(ex, [&](const auto& e) {
        asio::execution::execute(
            asio::prefer(asio::require(e, asio::execution::blocking.never), asio::execution::relationship.continuation,
                         asio::execution::allocator(static_block_allocator<void>())),
            std::move(flush));
      });
    } catch (...) {
      // Not deferred (out of memory): `flush`, if still holding the list,
      // reads it now, on this thread, as it goes.
    }
    return true;
  }

  static inline const run_op_base::vtable table{&same_executor, &post_batch, &destroy_handler, &free_op, &gather};

  std::array<arg_slot, NSlots> slots_{};
  std::array<access_request, NReqs == 0 ? 1 : NReqs> reqs_{};
  std::optional<work_executor> work_;
  op_allocator_t<Handler> alloc_;
  std::optional<Handler> handler_;
  post_arena<arena_size> arena_;
};

/// The reactor's entry points (src/reactor/reactor.cpp).
std::shared_ptr<reactor> reactor_for(const xrtio::kernel& k, const run_options& o);
/// Hands a validated op to the reactor: leases, start, polling. Never
/// completes the op inline. Returns true when the op was done on this
/// thread (a cached read, its completion posted) or gathered to be read on
/// it once the current handler returns (handed to the loop then if the
/// page cache does not hold it all): no linger is started for it.
bool reactor_submit(reactor& r, run_op_base* op) noexcept;
/// What reactor_read_at_once did with a read.
enum class at_once_outcome : std::uint8_t {
  usual,     // nothing for good: the usual path takes it (registered)
  done,      // read whole here, its completion posted
  gathered,  // leased and counted, to be gathered unregistered (below)
};
/// A buffered file read of at most its file's inline_read_limit
/// (inline_candidate), before any registration: done here, its completion
/// posted, if the page cache holds it, it may be leased at once and the
/// rule for reads beside others of `reg`'s context (they go to the ring
/// together) does not decline it (done). Declined beside those reads, and
/// gatherable on this thread, it is leased and counted in `reg` as they
/// are (gathered): the caller connects its cancellation slot, then hands it
/// to run_op_base::vtable::gather, or, if that refuses it, to
/// reactor_ungather. Otherwise usual: the op untouched, or, if it read part
/// of the range, with its lease kept for the submission
/// (reactor::read_at_once).
at_once_outcome reactor_read_at_once(reactor& r, run_op_base* op, completion_registry& reg) noexcept;
/// Undoes `gathered` (its lease, its count): the op as it was before.
void reactor_ungather(reactor& r, run_op_base* op) noexcept;
/// Completes `op` with `ec` through the reactor (never inline).
void reactor_reject(reactor& r, run_op_base* op, std::error_code ec) noexcept;
void reactor_cancel(reactor& r, run_op_base* op, asio::cancellation_type t) noexcept;

struct cancel_handler {
  run_op_base* op;
  void operator()(asio::cancellation_type t) const noexcept { reactor_cancel(*op->rx, op, t); }
};

}  // namespace xrtio::detail
