// Prepared runs (arguments bound once, executed many times) and run chains.
#pragma once

#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/compose.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "xrtio/async_run.hpp"
#include "xrtio/detail/prepared_state.hpp"

namespace xrtio {


/// A run whose arguments are checked and bound once (prepare) and which
/// executes many times (async_execute) with no allocation per execution.
/// Leases are taken per execution, so the host may touch the buffers
/// between executions. Cheap to copy; copies share the one native run.
class prepared_run {
 public:
  prepared_run() = default;
  /// An execution is on its way to or on the device.
  bool in_flight() const noexcept;
  const xrtio::kernel& kernel() const noexcept;
  const run_options& options() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }
 private:
  friend struct detail::access;
  template <class... Args>
  friend prepared_run prepare(const xrtio::kernel& k, Args&&... args);
  explicit prepared_run(std::shared_ptr<detail::prepared_state> s) noexcept : state_(std::move(s)) {}
  std::shared_ptr<detail::prepared_state> state_;
};

/// Binds `args` (optionally followed by run_options, used for every
/// execution) to a native run of `k`. Throws what run_core::validate throws.
template <class... Args>
prepared_run prepare(const xrtio::kernel& k, Args&&... args) {
  std::vector<detail::arg_slot> slots;
  run_options options;
  std::size_t given = detail::collect_args(slots, options, std::forward<Args>(args)...);
  return prepared_run(detail::make_prepared(k, std::move(slots), given, options));
}

namespace detail {
struct initiate_execute {
  template <class Handler>
  void operator()(Handler&& h, std::shared_ptr<prepared_state> p, const run_options& o) const {
    using op_t = run_op<std::decay_t<Handler>, 0, 0>;
    static const xrtio::kernel no_kernel;
    const xrtio::kernel& k = p ? p->kernel : no_kernel;  // an empty prepared_run completes with invalid_size
    auto rx = reactor_for(k, o);
    op_t* op = op_t::create(std::move(h), k);
    op->rx = std::move(rx);
    op->options = o;
    std::error_code early;
    if (!p) {
      early = errc::invalid_size;
    } else if (o.timeout.count() < 0) {
      early = errc::invalid_option;
    } else if (p->in_flight.exchange(true, std::memory_order_acq_rel)) {
      // One execution at a time: the native run cannot be started again
      // before its final state was observed.
      early = errc::busy;
    } else {
      op->core.use_prepared(std::move(p));
    }
    launch_run(op, early);
  }
};
}  // namespace detail

/// Executes `p` once, with `o` (default: the options given to prepare),
/// completing with `void(std::error_code, run_result)`. While an execution
/// is in flight, another completes with errc::busy. A failure reports the
/// real final state in run_result::state. Other error codes as async_run.
template <class Token>
auto async_execute(const prepared_run& p, const run_options& o, Token&& token) {
  return asio::async_initiate<Token, void(std::error_code, run_result)>(detail::initiate_execute{}, token,
                                                                        detail::access::state(p), o);
}
template <class Token>
auto async_execute(const prepared_run& p, Token&& token) {
  return async_execute(p, p.options(), std::forward<Token>(token));
}

/// What a chain reports: how many runs completed, which one failed (npos if
/// none), and the last run's result (the failed one's on failure).
struct chain_result {
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
  std::size_t completed = 0;
  std::size_t failed_index = npos;
  run_result last{};
};

namespace detail {
struct chain_op {
  std::vector<prepared_run> runs;
  std::size_t next = 0;
  chain_result result{};
  bool deferred = false;
  template <class Self>
  void operator()(Self& self, std::error_code ec = {}, run_result r = {}) {
    if (runs.empty()) {
      // async_compose runs this first step inside async_run_chain, and its
      // complete() calls the handler directly: an empty chain must first
      // go through the handler's executor (invariant 1, docs/DESIGN.md).
      if (!std::exchange(deferred, true)) return asio::post(std::move(self));
      return self.complete(std::error_code{}, result);
    }
    if (next == 0) {
      // Every type reaches the run in flight, as for async_execute (a run
      // waiting for its leases is withdrawn by any). Async_compose's
      // default passes terminal only: a partial cancellation never reached
      // the run on the device.
      self.reset_cancellation_state(asio::enable_total_cancellation());
    } else {
      result.last = r;
      if (ec) {
        result.failed_index = next - 1;
        return self.complete(ec, result);
      }
      ++result.completed;
    }
    if (next == runs.size()) return self.complete(std::error_code{}, result);
    // A terminal or partial cancellation that came while no run was in
    // flight (between two runs: from a handler the previous completion
    // ran, say) is recorded by the state and ends the chain here; before,
    // it was lost and every run went on. Total cancellation does not: runs
    // have completed, which it promises not to leave behind.
    if ((self.get_cancellation_state().cancelled() &
         (asio::cancellation_type::terminal | asio::cancellation_type::partial)) != asio::cancellation_type::none)
      return self.complete(make_error_code(asio::error::operation_aborted), result);
    auto& p = runs[next++];
    async_execute(p, p.options(), std::move(self));
  }
};
}  // namespace detail

/// Executes `runs` one after another (each starts when the previous one
/// completed) as one operation that completes when the last does or the
/// first fails, with `void(std::error_code, chain_result)`. Cancellation of
/// every type reaches the run in flight (as for async_execute: the run's
/// error ends the chain, failed_index names it). A terminal or partial one
/// that comes between two runs ends the chain before the next starts:
/// asio::error::operation_aborted, failed_index npos, `completed` the runs
/// done.
template <class Token>
auto async_run_chain(std::vector<prepared_run> runs, Token&& token) {
  return asio::async_compose<Token, void(std::error_code, chain_result)>(detail::chain_op{std::move(runs)}, token);
}

}  // namespace xrtio
