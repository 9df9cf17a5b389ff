// Reads gathered on a caller's thread (docs/DESIGN.md, "File I/O",
// "Gathered on the caller's thread"): in reactor-thread mode, small cached
// reads a handler issues while others of its context are in flight are not
// done one system call each at once, nor sent to the loop (two thread hops
// per batch: the loop's wake-up to submit, the io thread's to complete).
// They wait in their context's completion registry until the current
// handler returns; then a flush deferred to the handler's executor reads
// them all with one io_uring submission on that thread (caller_ring) and
// posts their completions there. A read the page cache does not hold whole
// comes back -EAGAIN at once and goes on to the loop, past what was read.
#include <array>
#include <cerrno>
#include <new>

#include "caller_ring.hpp"
#include "executor_batcher.hpp"
#include "file/file_state.hpp"
#include "reactor.hpp"

namespace xrtio::detail {

bool gather_list::push(run_op_base* op) noexcept {
  run_op_base* was = head.load(std::memory_order_relaxed);
  do op->next = was;
  while (!head.compare_exchange_weak(was, op, std::memory_order_release, std::memory_order_relaxed));
  return was == nullptr;
}

namespace {
// This thread's list. Made with the thread's first gathered read; kept empty
// where the thread cannot read them itself (its ring refused or failed), so
// that its reads go to the loop at once rather than through a flush that
// hands them on. `gone` (trivially destructible, so still readable) marks
// the holder destroyed at the thread's exit: a read issued after that (from
// a static destructor) is not gathered.
struct list_holder {
  std::shared_ptr<gather_list> list;
  bool tried = false;
  ~list_holder();
};
thread_local bool list_gone = false;
thread_local list_holder this_thread_list;
list_holder::~list_holder() { list_gone = true; }
const std::shared_ptr<gather_list> no_list;
}  // namespace

const std::shared_ptr<gather_list>& this_thread_gather_list() noexcept {
  if (list_gone) return no_list;
  auto& h = this_thread_list;
  if (h.list && caller_ring::usable_here()) return h.list;
  if (!h.tried) {
    h.tried = true;
    if (caller_ring::usable_here()) {
      try {
        h.list = std::make_shared<gather_list>();
      } catch (...) {
      }
    }
    return h.list;
  }
  return no_list;  // the ring failed since: no more gathering on this thread
}

void flush_gathered_reads(gather_list& list) noexcept {
  // Oldest first: the order the handler issued them.
  run_op_base* lifo = list.head.exchange(nullptr, std::memory_order_acquire);
  run_op_base* ops = nullptr;
  while (lifo) {
    auto* n = lifo->next;
    lifo->next = ops;
    ops = lifo;
    lifo = n;
  }
  while (ops) {
    std::array<file_op_base*, caller_ring::entries> batch;
    std::array<caller_ring::request, caller_ring::entries> rq;
    unsigned n = 0;
    while (ops && n < caller_ring::entries) {
      auto* f = static_cast<file_op_base*>(ops);
      ops = ops->next;
      if (f->cancel_bits.load(std::memory_order_acquire)) {
        // Cancelled while gathered: not read; the loop withdraws it. One
        // gathered before registration that cannot register is failed
        // here instead (reactor::to_loop), and posted.
        if (f->rx->file_gathered(f, -ECANCELED)) {
          f->next = nullptr;
          executor_batcher::post_all(f, f->rx->options().max_batch, false);
        }
        continue;
      }
      batch[n] = f;
      rq[n] = {f->file->fd, f->memory, static_cast<unsigned>(f->length), f->offset, -ECANCELED};
      ++n;
    }
    if (n == 0) continue;
    if (auto* ring = caller_ring::of_this_thread()) ring->read_all({rq.data(), n});
    run_op_base* done = nullptr;
    run_op_base** tail = &done;
    reactor* counted = nullptr;
    unsigned max_batch = batch[0]->rx->options().max_batch;
    for (unsigned i = 0; i < n; ++i) {
      reactor& rx = *batch[i]->rx;
      if (rq[i].result != -ECANCELED && &rx != counted) {
        rx.count_gathered_submission();  // each runtime with a read in it counts the submission
        counted = &rx;
      }
      if (rx.file_gathered(batch[i], rq[i].result)) {
        batch[i]->next = nullptr;
        *tail = batch[i];
        tail = &batch[i]->next;
      }
    }
    if (done) executor_batcher::post_all(done, max_batch, false);  // this thread's, not the loop's
  }
}

void reactor::count_gathered_submission() noexcept {
  counters_.gathered_submissions.fetch_add(1, std::memory_order_relaxed);
}

// Any thread (the flush's). The read's outcome: finished whole here (true:
// the caller posts it), or handed to the loop, which reads the rest and
// reports any error (as for a read declined there at submission).
bool reactor::file_gathered(file_op_base* f, int res) noexcept {
  // Short (0 < res < length): the end of the file, or pages not cached;
  // file_confirm_end tells which, as for a read done at once, so a read
  // that reaches the end is done here too.
  std::size_t got = res > 0 ? file_confirm_end(f, std::size_t(res)) : 0;
  if (res < 0 || got < std::min(f->length, f->end)) {
    // -EAGAIN: not all cached. -EOPNOTSUPP: no NOWAIT reads on this file
    // (no more inline candidates from it). -ECANCELED: not submitted or
    // cancelled while gathered. 0: at or past the end (out_of_range, the
    // loop's to report). Others (-EINVAL from a kernel whose io_uring lacks
    // the flag, a real error): the loop's own request reports them.
    if (res == -EOPNOTSUPP) f->file->nowait_refused.store(true, std::memory_order_relaxed);
    if (got > 0) f->issued = f->done = got;
    return !to_loop(f);
  }
  if (file_done_on_caller(f, got, counters_.gathered_reads, counters_.gathered_bytes)) return true;
  return !to_loop(f);
}

// A gathered read the loop takes over. A cancellation that came while it
// was gathered found it in none of the loop's lists: raised again, so that
// the loop's next pass sees its bits (one that comes later raises its own).
// Once pushed the op may be finished and freed at once, and with it what
// may be the last reference to this reactor (its runtime gone): kept here.
//
// One gathered before registration (gather_early) registers first, with
// the registry it was counted in: the loop's completion may come after the
// context is gone, which only a registered op survives. We are in the
// flush, so the context is alive, or (a flush destroyed unrun) shutting
// down: then, or if the registry's table cannot grow, the read is not
// handed on but finished here, failed (shut_down; not_enough_memory), its
// lease released, for the caller to post (a context shutting down destroys
// it unrun). Returns whether the loop took it.
bool reactor::to_loop(file_op_base* f) noexcept {
  if (auto* reg = f->at_once_registry) {
    bool added = false;
    try {
      added = reg->try_add(f);  // counts it among the registered candidates
    } catch (...) {
    }
    if (added) f->registry = reg->shared_from_this();
    f->at_once_registry = nullptr;
    reg->at_once.fetch_sub(1, std::memory_order_relaxed);
    if (!added) {
      f->ec = reg->shut_down.load(std::memory_order_relaxed) ? make_error_code(errc::shut_down)
                                                             : std::make_error_code(std::errc::not_enough_memory);
      f->bytes = 0;
      f->core.release();
      f->ph = run_op_base::phase::finished;
      return false;
    }
  }
  std::shared_ptr<reactor> keep = f->rx;
  bool cancelled = f->cancel_bits.load(std::memory_order_acquire) != 0;
  push(f);
  if (cancelled) raise(cancel_pending_);
  return true;
}

}  // namespace xrtio::detail
