// Observing the runs on the device: final states, deadlines, predictions
// given up, aborts and their grace periods (docs/DESIGN.md, invariants 3-5),
// and what happens to a run that leaves the device.
#include <algorithm>

#include "executor_batcher.hpp"
#include "reactor.hpp"

namespace xrtio::detail {

using rc = reactor_counters;

namespace {
// A full scan costs about this much per run in flight on this kind of host;
// see scan_needed.
constexpr std::uint64_t scan_ns_per_run = 8;
// ... and a completion signal never waits longer than this for one.
constexpr std::uint64_t max_scan_gap_ns = 50'000;

// A poll and a finish miss on memory another thread wrote last: the native
// run (its state, and on XRT the run's implementation and command packet
// behind it) and the op's lease requests. Polled one after another, each
// run's misses came one after another (at C = 4096 on XRT's no-op device,
// 98 % of check_on_device's samples at the native run's first load, 74 % of
// xrt::run::state's at its implementation, 94 % of run_core::release's at
// the requests). While `op` is polled, the run after next has its native
// run fetched and the next (whose native run was fetched a step ago) has
// the memory its state() reads and its requests fetched. The list links are
// this thread's (it links them); the native-run and request pointers lie on
// the op's lines the submitter wrote at its start, and may miss themselves,
// but a step ahead. Only this thread links, unlinks or frees ops on the
// device list, so `next` and the one after stay valid through the poll.
// docs/PERFORMANCE.md, "Fetching ahead in the scan".
inline void fetch_ahead(const run_op_base* op) noexcept {
  const run_op_base* next = op->next;
  if (!next) return;
  if (const run_op_base* after = next->next)
    if (const auto* r = after->core.own_run()) __builtin_prefetch(r, 0);
  if (const auto* r = next->core.own_run())
    for (std::size_t i = 0; i < backend::native_run::state_memory_count; ++i)
      if (const void* p = r->state_memory(i)) __builtin_prefetch(p, 0);
  __builtin_prefetch(next->core.requests_data(), 0);
}

}  // namespace

// Whether this pass must scan every run on the device. It need not when the
// last scan saw everything, nothing was added, no deadline or abort is due,
// and every device says none of its runs finished since.
//
// With many runs in flight a full scan is long and, started right after the
// previous one, finds few completions: polls per completion grow with the
// runs in flight. So a completion signal waits until the previous full scan
// is at least a scan's length old (far below the queueing delay at such
// depths).
bool reactor::scan_needed(clock::time_point now) noexcept {
  bool must = devices_.has_untracked() || aborting_ > 0 || shutting_down_ || now >= scan_deadline_ ||
              now >= scan_giveup_;
  // Ask every device (clearing each indication) even when the answer is
  // known. Devices without a completion event are polled: scanned whenever
  // the gap allows (the loop paces passes with its backoff).
  auto sig = devices_.take_completions();
  if (sig.completed) signalled_ = true;
  auto gap = std::chrono::nanoseconds(
      std::min<std::uint64_t>(scan_ns_per_run * counters_.in_flight.load(std::memory_order_relaxed), max_scan_gap_ns));
  if (must || ((signalled_ || sig.polled) && now - last_full_scan_ >= gap)) {
    signalled_ = false;
    last_full_scan_ = now;
    return true;
  }
  return false;
}

// One scan of the in-flight runs: all of them, or only those added since the
// last full scan (at the front of device_) when nothing else can have changed.
reactor::scan_result reactor::scan(clock::time_point now) noexcept {
  scan_result r;
  r.finished = expire_waiting(now, r.next_deadline);
  r.finished |= file_scan(now, r.next_deadline);
  bool full = scan_needed(now);
  unsigned limit = full ? ~0u : fresh_;
  fresh_ = 0;
  auto device_deadline = full ? clock::time_point::max() : scan_deadline_;
  auto giveup = full ? clock::time_point::max() : scan_giveup_;
  r.next_predicted = full ? nullptr : scan_predicted_;
  scan_result seen{false, device_deadline, r.next_predicted};
  std::uint64_t polls = 0;
  device_.erase_if(
      [&](run_op_base* op) {
        fetch_ahead(op);
        bool left = false;
        if (op->ph == run_op_base::phase::on_device) {
          ++polls;
          left = check_on_device(op, now, seen, giveup);
        }
        if (!left && op->ph == run_op_base::phase::aborting) {
          ++polls;
          left = check_aborting(op, now, seen);
        }
        if (left) {
          if (seen.next_predicted == op) seen.next_predicted = nullptr;
          leave_device(op);
          seen.finished = true;
        }
        return left;
      },
      limit);
  rc::bump(counters_.polls, polls);
  scan_deadline_ = seen.next_deadline;  // a partial scan started from it: never later
  scan_giveup_ = giveup;
  scan_predicted_ = seen.next_predicted;
  r.finished |= seen.finished;
  r.next_predicted = seen.next_predicted;
  r.next_deadline = std::min(r.next_deadline, seen.next_deadline);
  return r;
}

// A run on the device: final, past its deadline, to be aborted for shutdown,
// or still running (then its deadline and prediction count). Returns whether
// it left the device list.
bool reactor::check_on_device(run_op_base* op, clock::time_point now, scan_result& r,
                              clock::time_point& giveup) noexcept {
  run_state s = op->core.native()->state();
  if (is_final(s)) {
    finish(op, s);
    return true;
  }
  op->seen_running = now;
  if (op->deadline <= now) {
    begin_abort(op, run_op_base::abort_reason::timeout, now);
    return false;
  }
  if (shutting_down_) {
    begin_abort(op, run_op_base::abort_reason::shutdown, now);
    return false;
  }
  if (op->deadline < r.next_deadline) r.next_deadline = op->deadline;
  if (op->predicted != clock::time_point::max()) {
    auto last = op->predicted + opts_.prediction_margin + predictor_.spread(&op->core.kernel().native());
    if (now > last) {
      op->predicted = clock::time_point::max();  // late: stop spinning for it
      rc::bump(counters_.predictions_missed);
    } else {
      if (last < giveup) giveup = last;
      if (!r.next_predicted || op->predicted < r.next_predicted->predicted) r.next_predicted = op;
    }
  }
  return false;
}

// A run being aborted: retained if the abort was refused or outlived its
// grace period (invariant 5), finished once the abort is done and the state
// final.
bool reactor::check_aborting(run_op_base* op, clock::time_point now, scan_result& r) noexcept {
  auto t = op->ticket ? op->ticket->get() : abort_ticket::refused;  // no ticket: could not even queue it
  run_state s = op->core.native()->state();
  if (t == abort_ticket::refused) {
    trace_at(trace_event_kind::abort_end, op, now);
    retain(op);
    return true;
  }
  if (t == abort_ticket::done && is_final(s)) {
    trace_at(trace_event_kind::abort_end, op, now);
    finish(op, s);
    return true;
  }
  if (now >= op->abort_deadline) {
    trace_at(trace_event_kind::abort_end, op, now);
    retain(op);  // abort past its grace period
    return true;
  }
  if (op->abort_deadline < r.next_deadline) r.next_deadline = op->abort_deadline;
  return false;
}

void reactor::begin_abort(run_op_base* op, run_op_base::abort_reason why, clock::time_point now) noexcept {
  op->reason = why;
  op->ph = run_op_base::phase::aborting;
  op->abort_deadline = saturating_deadline(now, opts_.abort_grace);
  ++aborting_;
  trace_at(trace_event_kind::abort_begin, op, now);
  try {
    op->ticket = std::make_shared<abort_ticket>();
    aborter_->enqueue(op->core.native(), op->ticket);
  } catch (...) {
    // Cannot even queue the abort: the next scan retains the run (no
    // ticket reads as refused) and keeps everything (invariant 5).
    op->ticket.reset();
  }
}

// Bookkeeping for a run leaving device_.
void reactor::leave_device(run_op_base* op) noexcept {
  if (op->reason != run_op_base::abort_reason::none) --aborting_;
  devices_.remove(access::context_state(op->core.kernel())->device.get());
  rc::drop(counters_.in_flight);
}

void reactor::finish(run_op_base* op, run_state s) noexcept {
  using reason = run_op_base::abort_reason;
  op->result = op->core.result(s, {});  // observed: stamped in flush_completions
  if (s == run_state::completed) {
    op->ec = {};
    rc::bump(counters_.completed);
    if (op->reason == reason::none && opts_.predict_completions) {
      auto done = op->result.device_completed;
      if (done == clock::time_point{}) done = clock::now();  // no device time (XRT): seen now
      predictor_.learn(&op->core.kernel().native(), (done - op->result.submitted).count());
    }
  } else if (op->reason == reason::timeout) {
    op->ec = errc::timed_out;
    rc::bump(counters_.timed_out);
  } else if (op->reason == reason::cancel) {
    op->ec = asio::error::operation_aborted;
    rc::bump(counters_.cancelled);
  } else if (op->reason == reason::shutdown) {
    op->ec = errc::shut_down;
    rc::bump(counters_.failed);
  } else {
    op->ec = op->core.native() ? op->core.native()->final_error(s) : state_error(s);
    rc::bump(counters_.failed);
  }
  op->core.release(leases_);  // final: the device let go (invariant 2); leases at the flush
  op->ph = run_op_base::phase::finished;
  done_.push_back(op);
}

void reactor::fail(run_op_base* op, std::error_code ec) noexcept {
  op->ec = ec;
  op->result = {};
  op->core.release(leases_);
  op->ph = run_op_base::phase::finished;
  done_.push_back(op);
}

void reactor::retain(run_op_base* op) noexcept {
  // Invariant 5: the native run, buffers, leases and budget charges stay.
  op->result = op->core.result(op->core.native() ? op->core.native()->state() : run_state::running);
  op->core.retain(op->ticket);
  op->ec = errc::abort_failed;
  // After the thread's end, submitters may retain orphans concurrently
  // (complete_orphans): then the single-writer bump would lose counts.
  if (stopped_.load(std::memory_order_relaxed)) counters_.retained.fetch_add(1, std::memory_order_relaxed);
  else rc::bump(counters_.retained);
  trace_at(trace_event_kind::retained, op, op->result.observed, outcome(op));
  op->ph = run_op_base::phase::finished;
  done_.push_back(op);
}

// Stamps every run finished in this pass with one time. A pass passes the
// time it read before its scan (no second clock read: 0.1 µs on this
// project's VM, 5 % of an in-loop XRT run); a run that completed or was
// submitted after that read is stamped with its own later time instead, so
// submitted <= device_completed <= observed always holds. Without a pass
// time (shutdown), one clock read. The device-time and lease-queueing
// histograms come from these stamps (no clock read of their own). Trace
// events are recorded before the posts, so a run's `observed` precedes its
// `resumed`.
void reactor::flush_completions(clock::time_point seen) noexcept {
  using tk = trace_event_kind;
  constexpr clock::time_point none{};
  // Before any post: a handler may take the same ranges at once.
  leases_.flush();
  run_op_base* done = done_.take_all();
  if (done) run_posted_ = true;
  for (auto* op = done; op; op = op->next) {
    ++finished_;
    auto& r = op->result;
    if (r.submitted != none && r.observed == none) {  // final on the device (finish())
      if (seen == none) seen = clock::now();
      r.observed = std::max({seen, r.submitted, r.device_completed});
      bool device_known = r.device_completed != none;
      if (!device_known) r.device_completed = r.observed;
      auto device_ns = (r.device_completed - r.submitted).count();
      metrics_.device_time.add_single_writer(device_ns);
      // Without the device's own time, observed - submitted includes how
      // late this loop looked: learned from, a sleeping loop would judge
      // runs long and go on sleeping (seen with XRT's no-op device: 19,903
      // runs/s under perf against 142,117). The last scan that saw the run
      // running is a lower bound that does not depend on that.
      auto seen = op->seen_running;
      // Only while the loop spins (spin_regime.hpp): without the spins the
      // device's threads can fall asleep between runs, and device times
      // learned then would leave the loop not spinning for the next
      // submission, nor the io thread lingering, after a trial without
      // spins, or during a trial with them once not spinning has won.
      if (regime_.spinning())
        resubmit_.learn(device_known ? device_ns
                                     : (seen > r.submitted ? (seen - r.submitted).count() : std::int64_t{0}));
      metrics_.lease_queueing.add_single_writer(op->queued_at == none ? 0 : (r.submitted - op->queued_at).count());
      if (device_known) trace_at(tk::device_completed, op, r.device_completed);
    }
    if (trace_) [[unlikely]] {
      if (seen == none) seen = clock::now();
      trace_->record(tk::observed, op->run_id, r.observed != none ? r.observed : seen, outcome(op));
    }
  }
  if (done && !driven()) publish_short_runs();
  rc::bump(counters_.batches, executor_batcher::post_all(done, opts_.max_batch, true));
}

}  // namespace xrtio::detail
