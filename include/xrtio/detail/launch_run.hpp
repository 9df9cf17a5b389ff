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

/// Hands `op` to its reactor: completes it with `early_error` if set (bad
/// arguments, a busy prepared run), else submits it. Registration comes
/// first, so that destroying the handler's context with this run pending
/// destroys the handler but not the leases.
template <class Op>
void launch_run(Op* op, std::error_code early_error) {
  auto& ctx = execution_context_of(op->executor());
  register_completion(ctx, op);
  if (early_error) return reactor_reject(*op->rx, op, early_error);
  auto slot = asio::get_associated_cancellation_slot(op->handler());
  if (slot.is_connected()) slot.template emplace<cancel_handler>(cancel_handler{op});
  reactor_submit(*op->rx, op);
}

}  // namespace xrtio::detail
