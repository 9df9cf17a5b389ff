// The simulated device's compute units: each a thread that sleeps until the
// device's queue has a run due, takes it, and applies its fault (fail, the
// hangs) or executes its kernel and ends the run. Submission wakes them (sim_device.cpp).
#include <sys/prctl.h>

#include <algorithm>

#include "sim_types.hpp"

namespace xrtio::sim::detail {

/// The smallest timer slack (ns): a sleeping unit wakes when the latency model says, not up to 50 us later.
constexpr unsigned long precise_timer_slack_ns = 1;

void sim_device_impl::compute_unit(cu_slot& self) {
  ::prctl(PR_SET_TIMERSLACK, precise_timer_slack_ns, 0, 0, 0);  // precise latency model
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (heap_.empty()) {
      self.sleep_until = clock::time_point::max();
      self.cv.wait(lock);
      self.sleep_until = cu_slot::awake;
      continue;
    }
    auto now = clock::now();
    if (heap_.front()->due_ > now) {
      self.sleep_until = heap_.front()->due_;
      self.cv.wait_until(lock, self.sleep_until);
      self.sleep_until = cu_slot::awake;
      continue;
    }
    sim_run* r = pop();
    if (!divert_faulted(r, now)) execute(r, lock);
  }
}

// Under mutex_. A run just taken off the queue whose fault replaces its kernel
// ends in ERROR (fail) or turns RUNNING without a thread (the hangs: queued
// again for a timed hang, parked until aborted otherwise). True if so.
bool sim_device_impl::divert_faulted(sim_run* r, clock::time_point now) {
  if (r->hang_phase_) return false;
  auto f = r->fault_.what;
  if (f == fault::fail) {
    finish(r, run_state::error);
    return true;
  }
  if (f != fault::hang && f != fault::refuse_abort && f != fault::slow_abort) return false;
  set_running(r);
  if (r->fault_.duration.count() > 0) {
    r->hang_phase_ = true;
    r->due_ = now + r->fault_.duration;
    push(r);
  } else {
    r->parked_ = true;
    parked_.push_back(r);
  }
  return true;
}

// Runs the kernel without the lock; a kernel that throws or calls fail() ends
// in ERROR, one stopped by an abort in ABORT, one on a lost device in NORESPONSE.
void sim_device_impl::execute(sim_run* r, std::unique_lock<std::mutex>& lock) {
  set_running(r);
  r->executing_ = true;
  executing_list_.push_back(r);
  lock.unlock();
  bool threw = false;
  try {
    const auto& fn = r->kernel_->def().fn;
    if (fn) fn(*r);
  } catch (...) {
    threw = true;
  }
  lock.lock();
  r->executing_ = false;
  executing_list_.erase(std::remove(executing_list_.begin(), executing_list_.end(), r), executing_list_.end());
  if (r->lost_) finish(r, run_state::no_response);
  else if (r->stop_.load()) finish(r, run_state::abort);
  else if (threw || r->kernel_failed_) finish(r, run_state::error);
  else finish(r, run_state::completed);
}

}  // namespace xrtio::sim::detail
