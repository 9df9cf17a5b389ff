// async_run: a kernel run as an Asio asynchronous operation.
#pragma once

#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/query.hpp>
#include <asio/system_executor.hpp>
#include <tuple>
#include <utility>

#include "xrtio/detail/launch_run.hpp"
#include "xrtio/detail/run_op.hpp"
#include "xrtio/detail/split_token.hpp"
#include "xrtio/run.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio {
namespace detail {

struct initiate_run {
  // The kernel is forwarded: a token that stores the initiation's arguments
  // and passes them on as rvalues (use_awaitable does) hands its copy
  // to the op, which saves a reference count's increment and decrement per
  // run (docs/PERFORMANCE.md, "The kernel moves into the operation").
  template <class Handler, class K, class... Args>
  void operator()(Handler&& h, K&& k, const run_options& o, Args&&... args) const {
    constexpr std::size_t ns = sizeof...(Args);
    constexpr std::size_t nr = buffer_arg_count<std::decay_t<Args>...>();
    using op_t = run_op<std::decay_t<Handler>, ns, nr>;
    auto rx = reactor_for(k, o);
    op_t* op = op_t::create(std::move(h), std::forward<K>(k));
    op->rx = std::move(rx);
    std::size_t i = 0;
    (to_slot(op->slots()[i++], std::forward<Args>(args)), ...);
    op->options = o;
    std::error_code early;
    try {
      op->core.validate(ns, o);
    } catch (const xrtio::error& e) {
      early = e.code();
    }
    launch_run(op, early);
  }
};

}  // namespace detail

/// Runs `k` with `args` (buffers, in()/out()/inout() buffers, scalars),
/// optionally followed by run_options, completing through `token` with
/// `void(std::error_code, run_result)`.
///
/// Arguments are checked and leased when the operation is initiated; the
/// handler runs through its associated executor, never inside this call,
/// after the operation's storage (from the handler's associated allocator)
/// is freed. Buffers, leases, context and native run stay alive until the
/// device reports a final state, whatever happens to the handler.
///
/// Error codes: errc::argument_count, too_many_arguments, argument_kind,
/// foreign_context, invalid_size (bad arguments); range_in_use (conflict
/// with conflict_policy::fail); range_retained; backend_failure,
/// device_lost (start refused); run_error, run_aborted, run_timeout_state,
/// run_no_response, soft_kernel_error, soft_kernel_crashed, device_lost
/// (final states other than COMPLETED); timed_out (run_options::timeout,
/// run aborted); asio::error::operation_aborted (cancelled: withdrawn
/// before the device, or aborted on it for terminal/partial cancellation);
/// abort_failed (abort refused or past its grace period: the run is retained);
/// shut_down (the runtime is gone).
template <class... Ts>
auto async_run(const kernel& k, Ts&&... ts) {
  return detail::split_options_and_token(
      [&k](const run_options& o, auto&& token, auto&&... args) {
        return asio::async_initiate<decltype(token), void(std::error_code, run_result)>(
            detail::initiate_run{}, token, k, o, std::forward<decltype(args)>(args)...);
      },
      std::forward<Ts>(ts)...);
}

}  // namespace xrtio
