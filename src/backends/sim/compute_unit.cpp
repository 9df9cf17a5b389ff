// The simulated device's compute units: each a thread that sleeps until the
// device's queue has a run due, takes it, and applies its fault (fail, the
// hangs) or executes its kernel and ends the run. One idle unit waits for the
// earliest run; the others stand by or sleep until woken. Submission wakes
// them (sim_device.cpp).
#include <sys/prctl.h>

#include <algorithm>

#include "sim_types.hpp"
#include "util/cpu_relax.hpp"

namespace xrtio::sim::detail {

/// The smallest timer slack (ns): a sleeping unit wakes when the latency model says, not up to 50 us later.
constexpr unsigned long precise_timer_slack_ns = 1;

void sim_device_impl::compute_unit(cu_slot& self) {
  ::prctl(PR_SET_TIMERSLACK, precise_timer_slack_ns, 0, 0, 0);  // precise latency model
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    drain();
    auto now = this->now();
    if (heap_.empty() || heap_.front().due > now) {
      if (heap_.empty() && watch_idle(lock)) continue;
      rest(self, lock);
      continue;
    }
    sim_run* r = pop();
    if (divert_faulted(r, now)) continue;
    keep_standby(self);
    // Then the inbox again: a run pushed before this store was pushed by a
    // submitter that may have seen this unit awake and not woken another
    // (drain() in sim_device.cpp).
    self.executing.store(true);
    if (!inbox_.empty()) {
      drain();
      keep_standby(self);
    }
    execute(self, r, lock);
  }
}

// Under mutex_ (held by `lock`), with nothing queued: watches, without the
// mutex, for a submission for up to cfg_.idle_poll, one unit at a time. True
// if one came (the caller drains it) or the device stops. Meanwhile this
// unit is awake and not in a kernel, so a submitter leaves the run in the
// inbox and wakes no one (looked_after), and the other unit leaves queued
// runs to this one (keep_standby). So the watch looks at the inbox and at
// the count of runs queued meanwhile by whoever holds the mutex (push),
// not at the count of runs started: that moves before a submitter under
// fault rules takes the mutex, so a watcher that looked again in between
// watched out its window with the run queued. A run submitted a little
// after the unit went idle is then taken without a futex wake-up and a
// thread switch: at L = 0, C = 1 a resubmission in a microsecond or two
// otherwise raced the unit into its sleep (docs/PERFORMANCE.md, "The
// simulated device's idle watch").
bool sim_device_impl::watch_idle(std::unique_lock<std::mutex>& lock) {
  if (cfg_.idle_poll.count() <= 0 || watching_) return false;
  watching_ = true;
  auto base = queue_pushes_.load(std::memory_order_relaxed);
  lock.unlock();
  auto until = clock::now() + cfg_.idle_poll;
  bool came = false;
  for (unsigned spins = 0;; ++spins) {
    if (!inbox_.empty() || queue_pushes_.load(std::memory_order_relaxed) != base) {
      came = true;
      break;
    }
    if (halting_.load(std::memory_order_relaxed)) break;
    // The clock every 16 looks: a read of it costs more than one look.
    if ((spins & 15) == 15 && clock::now() >= until) break;
    xrtio::detail::cpu_relax();
  }
  lock.lock();
  watching_ = false;
  if (came) ++stats_.idle_catches;
  // Stopping: back to the loop's test. rest() would wait for a notification
  // the destructor sent while this unit watched without the mutex.
  return came || stopping_;
}

// Under mutex_ (held by `lock`). Sleeps until the earliest queued run is due,
// unless another unit sleeps until then or earlier: then this one stands by
// for the next run after it (or, with none queued, until woken). Had every
// idle unit slept until the same run, all would wake for it and all but one
// sleep again: two wake-ups (thread switches, a contended mutex) per run with
// two units, most of the host CPU a simulated run cost (docs/SERVER.md).
// Runs queued later are covered by wake_for() and keep_standby().
void sim_device_impl::rest(cu_slot& self, std::unique_lock<std::mutex>& lock) {
  auto until = clock::time_point::max();
  if (!heap_.empty()) {
    auto due = heap_.front().due;
    bool covered = std::any_of(cus_.begin(), cus_.end(), [&](const auto& cu) {
      auto other = cu->sleep_until.load(std::memory_order_relaxed);
      return cu.get() != &self && other != cu_slot::awake && other <= due;
    });
    // The second earliest is one of the root's two children in the heap.
    until = due;
    if (covered) {
      until = clock::time_point::max();
      for (std::size_t i = 1; i < 3 && i < heap_.size(); ++i) until = std::min(until, heap_[i].due);
    }
  }
  self.sleep_until.store(until);
  // A run pushed before that store may have been pushed by a submitter that
  // saw this unit awake and did not wake it (drain() in sim_device.cpp).
  if (!inbox_.empty()) {
    self.sleep_until.store(cu_slot::awake);
    return;
  }
  if (until == clock::time_point::max()) self.cv.wait(lock);
  else self.cv.wait_until(lock, until);
  self.sleep_until.store(cu_slot::awake);
  ++stats_.wakeups;
}

// Under mutex_, before `self` executes a run: the earliest run still queued
// needs a unit that looks at the queue by its due time even if this kernel
// runs long or blocks: one awake and not in a kernel, or asleep until that
// time or earlier. If none will, the one asleep the longest is woken; it
// then sleeps until that run (rest). Without this a standby unit asleep for
// a later run, or with nothing queued, would leave it to this unit, after
// its kernel.
void sim_device_impl::keep_standby(const cu_slot& self) {
  if (heap_.empty()) return;
  auto due = heap_.front().due;
  cu_slot* pick = nullptr;
  for (auto& cu : cus_) {
    if (cu.get() == &self) continue;
    auto until = cu->sleep_until.load(std::memory_order_relaxed);
    if (until == cu_slot::awake ? !cu->executing.load(std::memory_order_relaxed) : until <= due) return;
    if (until != cu_slot::awake && (!pick || until > pick->sleep_until.load(std::memory_order_relaxed)))
      pick = cu.get();
  }
  if (!pick) return;  // every other unit is in a kernel: the first back takes the queue
  pick->sleep_until.store(cu_slot::awake);
  pick->cv.notify_one();
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
// The unit is out of the kernel (`executing` false) before the run's final
// state is published: a submitter that saw the state and submitted at once
// (a loop polling its run) found the unit still marked in a kernel, took the
// device mutex (held here) and woke the other unit, a futex wake-up per run
// (docs/PERFORMANCE.md, "The simulated device's idle watch"). Under the
// mutex and back in the loop next, this unit drains the inbox before it
// sleeps or runs a kernel, as looked_after() assumes of a unit awake and
// not in a kernel.
void sim_device_impl::execute(cu_slot& self, sim_run* r, std::unique_lock<std::mutex>& lock) {
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
  self.executing.store(false);
  r->executing_ = false;
  executing_list_.erase(std::remove(executing_list_.begin(), executing_list_.end(), r), executing_list_.end());
  if (r->lost_) finish(r, run_state::no_response);
  else if (r->stop_.load()) finish(r, run_state::abort);
  else if (threw || r->kernel_failed_) finish(r, run_state::error);
  else finish(r, run_state::completed);
}

}  // namespace xrtio::sim::detail
