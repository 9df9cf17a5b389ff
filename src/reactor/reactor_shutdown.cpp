// Shutting a reactor down (runtime's destructor): new runs are rejected,
// waiting runs withdrawn, runs on the device aborted and given
// shutdown_grace to reach a final state, the rest retained; then the thread
// ends and never hangs (docs/DESIGN.md, invariants 2 and 5).
#include "reactor.hpp"

namespace xrtio::detail {

using rc = reactor_counters;

void reactor::stop() noexcept {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  wake_pending_.store(false);
  sleeping_.store(true);  // force a notify: it also ends a doze (rest())
  wake();
  if (thread_.joinable()) thread_.join();
  else if (driven()) run();  // in-loop mode: no thread; this one drives the shutdown
  // A hung abort is left behind: its run is retained, so everything it
  // touches stays alive.
  aborter_->stop();
}

void reactor::enter_shutdown(clock::time_point now) noexcept {
  shutting_down_ = true;
  shutdown_deadline_ = saturating_deadline(now, opts_.shutdown_grace);
  // Runs still waiting for leases never reached the device: withdraw them.
  while (auto* op = waiting_.pop_front()) {
    rc::bump(counters_.failed);
    withdraw_waiting(op, errc::shut_down);
  }
  // Runs on the device are aborted by the scans from now on; file
  // transfers have their pieces cancelled now.
  file_shutdown();
}

reactor::shutdown_step reactor::shutdown_progress(clock::time_point now) noexcept {
  // Within the grace period settled(), not empty(): a run whose slot is
  // claimed but not yet published is waited for (its submitter is between
  // two instructions), so that it is aborted in time like the others rather
  // than retained by complete_orphans() after the loop ended. Past it,
  // empty(): the loop would otherwise spin ("again") until that submitter
  // got the CPU back; its run is then kept, as the device's are below.
  const bool in_time = now < shutdown_deadline_;
  const bool taken = in_time ? incoming_.settled() : incoming_.empty();
  if (device_.empty() && waiting_.empty() && taken && files_.empty()) return shutdown_step::exit;
  if (in_time) return shutdown_step::go_on;
  // Past the grace period: keep what the device still holds.
  while (auto* op = device_.pop_front()) {
    leave_device(op);
    retain(op);
  }
  file_retain_all();
  flush_completions();
  return shutdown_step::again;
}

// From stopped_ on, late submitters take from incoming_ too
// (complete_orphans): one taker at a time, under orphans_mutex_, and the
// runs handled outside the lock.
run_op_base* reactor::take_after_stop() noexcept {
  std::lock_guard lock(orphans_mutex_);
  return incoming_.take_all_fifo();
}

// The thread is ending. Anything submitted meanwhile is rejected from here
// on (stopped_); what raced in before that is completed now.
void reactor::drain_after_stop() noexcept {
  stopped_.store(true, std::memory_order_seq_cst);
  // push() reads stopped_ after publishing; intake's loads are only
  // acquire, so the fence puts this store before them for every seq_cst
  // reader (and under qemu-user keeps the store from passing those loads).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (run_op_base* taken = take_after_stop(); taken;) {
    auto* op = taken;
    taken = op->next;
    admit(op);
  }
  while (auto* op = device_.pop_front()) {  // started by a submitter racing the shutdown
    leave_device(op);
    retain(op);
  }
  while (auto* op = waiting_.pop_front()) {
    rc::bump(counters_.failed);
    withdraw_waiting(op, errc::shut_down);
  }
  flush_completions();
}

}  // namespace xrtio::detail
