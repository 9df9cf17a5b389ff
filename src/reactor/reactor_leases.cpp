// Runs waiting for their leases (conflict_policy::wait), in FIFO order: they
// start when the leases are granted, and are withdrawn cleanly, never having
// reached the device, when cancelled, timed out or shut down (docs/DESIGN.md,
// invariants 4 and 6). Cancellation of runs already on the device is here
// too: it becomes an abort.
#include "reactor.hpp"

namespace xrtio::detail {

using rc = reactor_counters;

// The run is off waiting_ already: give its place in the lease queues back
// and complete it with `ec`.
void reactor::withdraw_waiting(run_op_base* op, std::error_code ec) noexcept {
  op->core.withdraw(op);
  rc::drop(counters_.in_flight);
  fail(op, ec);
}

void reactor::cancel_runs() noexcept {
  using ct = asio::cancellation_type;
  // Waiting for leases: not on the device, so any cancellation withdraws it cleanly.
  waiting_.erase_if([&](run_op_base* op) {
    if (!op->cancel_bits.exchange(0, std::memory_order_acq_rel)) return false;
    rc::bump(counters_.cancelled);
    withdraw_waiting(op, asio::error::operation_aborted);
    return true;
  });
  // On the device: only terminal or partial cancellation can be honoured,
  // by aborting; total cancellation promises no side effects, which a
  // started run cannot keep (invariant 4).
  auto now = clock::now();
  for (auto* op = device_.front(); op; op = op->next) {
    unsigned bits = op->cancel_bits.exchange(0, std::memory_order_acq_rel);
    if (op->ph == run_op_base::phase::on_device && (bits & static_cast<unsigned>(ct::terminal | ct::partial)))
      begin_abort(op, run_op_base::abort_reason::cancel, now);
  }
  file_cancel(now);
}

void reactor::retry_waiting() noexcept {
  waiting_.erase_if([&](run_op_base* op) {
    auto st = op->core.acquire(nullptr, &op->waiter);
    if (st == acquire_status::queued || st == acquire_status::conflict) return false;
    if (st == acquire_status::retained) {
      rc::bump(counters_.failed);
      withdraw_waiting(op, errc::range_retained);
      return true;
    }
    trace_now(trace_event_kind::leases_granted, op);
    start_on_device(op);
    if (op->ph == run_op_base::phase::finished) {  // start refused: completes with its error
      rc::drop(counters_.in_flight);
      rc::bump(counters_.failed);
      done_.push_back(op);
      return true;
    }
    trace_at(trace_event_kind::started, op, op->core.submitted());
    to_device(op);
    return true;
  });
}

// Waiting runs time out too. Returns whether one did; lowers next_deadline
// to the nearest deadline of those left.
bool reactor::expire_waiting(clock::time_point now, clock::time_point& next_deadline) noexcept {
  bool any = false;
  waiting_.erase_if([&](run_op_base* op) {
    if (op->deadline <= now) {
      rc::bump(counters_.timed_out);
      withdraw_waiting(op, errc::timed_out);
      any = true;
      return true;
    }
    if (op->deadline < next_deadline) next_deadline = op->deadline;
    return false;
  });
  return any;
}

}  // namespace xrtio::detail
