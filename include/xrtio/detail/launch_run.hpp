// The one way an asynchronous run (async_run, async_execute) reaches the
// reactor once its operation exists: registered with its handler's execution
// context, then rejected (through the reactor, never inline) or submitted
// with its cancellation slot connected (docs/DESIGN.md, invariants 1 and 2).
#pragma once

#include <asio/associated_cancellation_slot.hpp>
#include <asio/execution.hpp>
#include <asio/query.hpp>
#include <asio/system_executor.hpp>
#include <system_error>

#include "xrtio/detail/concrete_executor.hpp"
#include "xrtio/detail/io_linger.hpp"
#include "xrtio/detail/run_op.hpp"

namespace xrtio::detail {

/// The execution context of a handler's executor. Executors that cannot be
/// queried for it (use_future's promise_executor) hand their work to the
/// system executor, so such runs register with the system context.
template <class Ex>
asio::execution_context& execution_context_of(const Ex& ex) noexcept {
  if constexpr (asio::can_query<const Ex&, asio::execution::context_t>::value)
    return asio::query(ex, asio::execution::context);
  else if constexpr (requires { ex.context(); })
    return ex.context();
  else
    return asio::query(asio::system_executor(), asio::execution::context);
}

/// The io_context that `ex` (an io_context executor or strand, possibly
/// inside any_io_executor) runs on, if the calling thread is running it
/// now; else null: the io thread lingers only for executors that can say so.
template <class Ex>
asio::io_context* running_io_context(const Ex& ex) noexcept {
  asio::io_context* io = nullptr;
  with_concrete_executor(ex, [&](const auto& e) {
    using E = std::decay_t<decltype(e)>;
    if constexpr (std::is_same_v<E, io_executor> || std::is_same_v<E, tracked_io_executor> ||
                  std::is_same_v<E, asio::strand<io_executor>> || std::is_same_v<E, asio::strand<tracked_io_executor>>) {
      if (e.running_in_this_thread()) io = &static_cast<asio::io_context&>(asio::query(e, asio::execution::context));
    }
  });
  return io;
}

/// Hands `op` to its reactor: completes it with `early_error` if set (bad
/// arguments, a busy prepared run), else submits it. Registration comes
/// first, so that destroying the handler's context with this run pending
/// destroys the handler but not the leases.
template <class Op>
void launch_run(Op* op, std::error_code early_error) {
  auto& ctx = execution_context_of(op->executor());
  // A cached read that would be done at once: done here and posted, while
  // the initiating call keeps the context alive, so without registering
  // (two lock pairs and five atomic operations of a 4 KiB read's ~1 us,
  // docs/PERFORMANCE.md, "A read done at once, unregistered"). Until this
  // thread has registered once with the context its registry is not known
  // here: that read takes the usual path.
  //
  // A read declined beside others of its context (they go to the ring
  // together) is gathered on this thread the same way without registering,
  // if the flush that reads it is its context's (not another context's
  // whose handler runs this one's poll()); that flush registers the ones
  // it hands to the loop (reactor::to_loop) and, destroyed unrun at the
  // context's shutdown, frees the rest (docs/PERFORMANCE.md, "Gathered
  // before registration"). Its cancellation slot is connected first: once
  // gathered, another thread of the context may finish it at once.
  if (!early_error && op->inline_candidate)
    if (auto* reg = registry_known_here(ctx)) {
      auto how = reactor_read_at_once(*op->rx, op, *reg);
      if (how == at_once_outcome::done) return;
      if (how == at_once_outcome::gathered) {
        auto slot = asio::get_associated_cancellation_slot(op->handler());
        if (slot.is_connected()) {
          try {
            slot.template emplace<cancel_handler>(cancel_handler{op});  // may throw: the slot's memory
          } catch (...) {
            reactor_ungather(*op->rx, op);
            op->vt().free(op);
            throw;
          }
        }
        if (op->vt().gather(op, true)) return;
        // Not this thread's to gather after all: the usual path.
        if (slot.is_connected()) slot.clear();
        reactor_ungather(*op->rx, op);
      }
    }
  try {
    register_completion(ctx, op);  // may throw: the service's creation, the registry's growth
  } catch (...) {
    // Nowhere yet: freed here, the handler destroyed unrun, the exception
    // to the initiating call's caller (Asio's rule for an initiation that
    // throws). release() first: it gives back the lease a read begun at
    // once kept (reactor::read_at_once; no other op holds one yet), and a
    // prepared run's execution must be marked over, or the prepared run
    // would stay busy for good.
    op->core.release();
    op->vt().free(op);
    throw;
  }
  if (early_error) return reactor_reject(*op->rx, op, early_error);
  auto slot = asio::get_associated_cancellation_slot(op->handler());
  if (slot.is_connected()) {
    try {
      slot.template emplace<cancel_handler>(cancel_handler{op});  // may throw: the slot's memory
    } catch (...) {
      // As above, out of the registry first.
      op->registry->remove(op);
      op->core.release();
      op->vt().free(op);
      throw;
    }
  }
  // Found before the submission: after it the op may complete and be freed
  // on the reactor's thread at any moment.
  asio::io_context* linger_io = running_io_context(op->executor());
  auto window = linger_io ? linger_window(*op->rx) : std::chrono::nanoseconds(0);
  // A read done on this thread has its completion queued here already, and
  // a gathered one is read here once this handler returns (the loop gets
  // it only if the page cache does not hold it): lingering would only
  // re-queue the linger's handler around them (docs/PERFORMANCE.md, "A read
  // done in place: no linger, no backlog count"). Window 0 still makes the
  // thread's linger state at its first submission (io_linger.hpp).
  bool here = reactor_submit(*op->rx, op);
  if (linger_io) linger_begin(*linger_io, here ? std::chrono::nanoseconds(0) : window);
}

}  // namespace xrtio::detail
