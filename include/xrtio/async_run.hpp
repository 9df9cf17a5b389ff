// async_run: a kernel run as an Asio asynchronous operation.
#pragma once

#include <asio/async_result.hpp>
#include <asio/error.hpp>
#include <asio/query.hpp>
#include <asio/system_executor.hpp>
#include <tuple>
#include <utility>

#include "xrtio/detail/run_op.hpp"
#include "xrtio/run.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio {
namespace detail {

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

struct initiate_run {
  template <class Handler, class... Args>
  void operator()(Handler&& h, const xrtio::kernel& k, const run_options& o, Args&&... args) const {
    constexpr std::size_t ns = sizeof...(Args);
    constexpr std::size_t nr = buffer_arg_count<std::decay_t<Args>...>();
    using op_t = run_op<std::decay_t<Handler>, ns, nr>;
    auto rx = reactor_for(k, o);
    op_t* op = op_t::create(std::move(h), k);
    op->rx = std::move(rx);
    std::size_t i = 0;
    (to_slot(op->slots()[i++], std::forward<Args>(args)), ...);
    op->options = o;
    // Register with the handler's execution context, so that its destruction
    // with this run pending destroys the handler but not the leases (invariant 2).
    auto& ctx = execution_context_of(op->executor());
    op->registry = asio::use_service<completion_service>(ctx).registry();
    op->registry->add(op);
    try {
      op->core.validate(ns, o);
    } catch (const xrtio::error& e) {
      reactor_reject(*op->rx, op, e.code());
      return;
    }
    auto slot = asio::get_associated_cancellation_slot(op->handler());
    if (slot.is_connected()) slot.template emplace<cancel_handler>(cancel_handler{op});
    reactor_submit(*op->rx, op);
  }
};

template <class Tuple, std::size_t... I>
auto async_run_unpack(const xrtio::kernel& k, const run_options& o, Tuple&& t, std::index_sequence<I...>) {
  constexpr std::size_t n = std::tuple_size_v<std::remove_reference_t<Tuple>>;
  using token_t = std::tuple_element_t<n - 1, std::remove_reference_t<Tuple>>;
  return asio::async_initiate<token_t, void(std::error_code, run_result)>(
      initiate_run{}, std::get<n - 1>(t), k, o, std::get<I>(std::forward<Tuple>(t))...);
}

template <class... Ts>
constexpr bool options_before_token() {
  constexpr std::size_t n = sizeof...(Ts);
  if constexpr (n < 2) return false;
  else return std::is_same_v<std::remove_cvref_t<std::tuple_element_t<n - 2, std::tuple<Ts...>>>, run_options>;
}

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
  constexpr std::size_t n = sizeof...(Ts);
  static_assert(n >= 1, "async_run needs a completion token");
  if constexpr (detail::options_before_token<Ts...>()) {
    auto t = std::forward_as_tuple(std::forward<Ts>(ts)...);
    run_options o = std::get<n - 2>(t);
    return detail::async_run_unpack(k, o, std::move(t), std::make_index_sequence<n - 2>{});
  } else {
    auto t = std::forward_as_tuple(std::forward<Ts>(ts)...);
    return detail::async_run_unpack(k, run_options{}, std::move(t), std::make_index_sequence<n - 1>{});
  }
}

}  // namespace xrtio
