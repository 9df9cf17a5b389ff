// The simulated device (sim_device_impl in sim_types.hpp) behind sim::open:
// its kernels, its queues under the one device mutex, submit, abort, finish
// (which signals the completion eventfd) and device loss; and sim.hpp's functions.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "sim_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::sim::detail {

/// Room for a deep queue (64 KiB) from the start. Past it the queues grow
/// when runs are made (admit_run), by doubling. (When the queue grew on a
/// push instead, at 1024 the bench's cells at 4096 runs in flight caught a
/// growth in their windows: allocations per run of 5e-6 to 1.4e-5 in every
/// sweep's JSON.)
constexpr std::size_t initial_queue_capacity = 4096;

sim_device_impl::sim_device_impl(device_config cfg) : cfg_(std::move(cfg)) {
  if (cfg_.compute_units == 0) throw error(errc::invalid_size, "sim device: 0 compute units");
  faulty_.store(!cfg_.faults.empty() || static_cast<bool>(cfg_.fault_selector), std::memory_order_relaxed);
  for (auto& k : cfg_.kernels) kernels_.emplace(k.name, std::make_shared<sim_kernel>(k, this));
  if (cfg_.event_fd) {
    efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0) throw error(errc::backend_failure, "sim device: eventfd failed");
  }
  // A failure part-way (an allocation, a thread's start) stops the compute
  // units already started before it throws: the destructor does not run
  // for an object not constructed, and a joinable std::thread destroyed
  // with threads_ would end the process (std::terminate).
  try {
    heap_.reserve(initial_queue_capacity);
    parked_.reserve(initial_queue_capacity);
    executing_list_.reserve(cfg_.compute_units);  // a unit executes one run at a time
    threads_.reserve(cfg_.compute_units);
    for (unsigned i = 0; i < cfg_.compute_units; ++i) cus_.push_back(std::make_unique<cu_slot>());
    for (unsigned i = 0; i < cfg_.compute_units; ++i) threads_.emplace_back([this, i] { compute_unit(*cus_[i]); });
  } catch (...) {
    stop();
    throw;
  }
}

sim_device_impl::~sim_device_impl() { stop(); }

void sim_device_impl::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    halting_.store(true, std::memory_order_relaxed);
    for (auto* r : executing_list_) r->stop_.store(true);
  }
  for (auto& cu : cus_) cu->cv.notify_one();
  for (auto& t : threads_) t.join();
  if (efd_ >= 0) ::close(efd_);
}

std::string sim_device_impl::name() const {
  return "sim (" + std::to_string(cfg_.compute_units) + " compute units)";
}

std::shared_ptr<backend::native_kernel> sim_device_impl::kernel(const std::string& name) {
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    std::string known;
    for (auto& [n, k] : kernels_) known += (known.empty() ? "" : ", ") + n;
    throw error(errc::unknown_kernel, "sim device: no kernel \"" + name + "\" (loaded: " + known + ")");
  }
  return it->second;
}

std::vector<std::string> sim_device_impl::kernel_names() const {
  std::vector<std::string> v;
  for (auto& [n, k] : kernels_) v.push_back(n);
  return v;
}

void sim_device_impl::consume_event() noexcept {
  std::uint64_t v;
  [[maybe_unused]] auto n = ::read(efd_, &v, sizeof v);
  // An acq_rel exchange reads the last signaller's release: every state
  // stored before that signal is visible to the scan that follows.
  signaled_.exchange(false, std::memory_order_acq_rel);
}

std::uint64_t sim_device_impl::completion_count() const noexcept {
  if (efd_ < 0) return 0;  // no event fd: polled, not tracked
  // Separate from signaled_: clearing that would make every later
  // completion write the event fd while the reactor is awake and spinning.
  return completions_.load(std::memory_order_acquire);
}

device_stats sim_device_impl::stats() const {
  std::lock_guard lock(mutex_);
  auto s = stats_;
  s.started = started_.load(std::memory_order_relaxed);
  return s;
}

void sim_device_impl::add_fault(fault_rule rule) {
  std::lock_guard lock(mutex_);
  cfg_.faults.push_back(std::move(rule));
  faulty_.store(true, std::memory_order_seq_cst);  // runs numbered after this pick faults under the mutex
}

void sim_device_impl::lose() {
  std::lock_guard lock(mutex_);
  lose_locked();
}

// Each run is at most once in the queue and at most once parked, so
// queues whose capacity covers every run made never grow on a push. Pushes
// happen on whichever thread holds the mutex: a compute unit (a drain, a
// timed hang queued again, a hang parked), where a std::bad_alloc escaped
// the thread's function and ended the process, and a submitter draining
// others' runs, where it left the rest of the inbox drained and queued
// nowhere. Growing here instead, on the thread making a run, reports the
// failure to that run's caller (make_run throws), before anything is
// shared. Runs are pooled, so this is not on the path of a run in steady
// state. Test "sim: an allocation failing while the queue must grow...".
void sim_device_impl::admit_run() {
  std::lock_guard lock(mutex_);
  std::size_t need = runs_made_ + 1;
  auto grow = [need](auto& v) {
    if (v.capacity() < need) v.reserve(std::max(need, 2 * v.capacity()));
  };
  grow(heap_);
  grow(parked_);
  runs_made_ = need;
}

// Without fault rules, the run enters the inbox without the mutex and the
// mutex is taken only when no unit would look at the queue by its due time
// (looked_after). With rules, picking one reads cfg_.faults, which
// add_fault changes under the mutex: the whole submission is under it.
// Under the mutex at L = 50 us, C = 4096, the io thread waited for the
// units (and they for it) on every run (docs/PERFORMANCE.md).
void sim_device_impl::submit(sim_run* r) {
  if (lost_.load()) throw error(errc::device_lost, "sim device lost: cannot start kernel " + r->kernel_->name());
  // The number first, then the rules: a rule that add_fault published
  // (seq_cst) before this number was taken is seen, so a rule for run N
  // added before run N was numbered hits it, as under the mutex.
  auto number = started_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (faulty_.load(std::memory_order_seq_cst)) {
    submit_locked(r, number);
    return;
  }
  r->number_ = number;
  r->fault_ = {};
  r->hang_phase_ = false;
  r->kernel_failed_ = false;
  r->lost_ = false;
  r->stop_.store(false, std::memory_order_relaxed);
  r->state_.store(run_state::queued, std::memory_order_release);
  r->submitted_at_ = clock::now();
  r->due_ = r->submitted_at_ + run_latency(cfg_.latency, r->bytes_, r->number_);
  auto due = r->due_;  // r is the drainer's once pushed
  // seq_cst: the submitter's half of the pairing with a unit going to
  // sleep or into a kernel (drain()).
  inbox_.push(r);
  if (looked_after(due)) return;
  std::unique_lock lock(mutex_);
  drain();
  wake_for(lock);
}

// Under mutex_: the submission as it was before the inbox, with the fault pick.
void sim_device_impl::submit_locked(sim_run* r, std::uint64_t number) {
  std::unique_lock lock(mutex_);
  if (lost_.load()) throw error(errc::device_lost, "sim device lost: cannot start kernel " + r->kernel_->name());
  r->number_ = number;
  r->fault_ = pick_fault(cfg_, r->kernel_->name(), r->number_);
  r->hang_phase_ = false;
  r->kernel_failed_ = false;
  r->lost_ = false;
  r->stop_.store(false, std::memory_order_relaxed);
  r->state_.store(run_state::queued, std::memory_order_release);
  if (r->fault_.what == fault::device_lost) {
    r->lost_ = true;  // before finish() publishes the state: final_error() reads it without the lock
    finish(r, run_state::no_response);
    lose_locked();
    return;
  }
  r->submitted_at_ = clock::now();
  r->due_ = r->submitted_at_ + run_latency(cfg_.latency, r->bytes_, r->number_);
  push(r);
  wake_for(lock);
}

// Under mutex_. Moves the inbox into the queue (oldest first), or, on a lost
// device, ends its runs in NORESPONSE as lose_locked() ends queued ones.
// Every unit drains at the top of its loop. Before it sleeps or enters a
// kernel it stores (seq_cst) the state that says so and then looks at the
// inbox again (and goes back to drain it, or drains it, if it is not
// empty); submit() pushes (seq_cst) and then reads the units' states. So a
// run is either seen by the unit, or its submitter sees the unit asleep or
// busy and wakes one if any sleeps (the two halves of a Dekker pairing).
void sim_device_impl::drain() {
  sim_run* fifo = inbox_.take_all_fifo();
  while (fifo) {
    auto* r = fifo;
    fifo = r->inbox_next;
    r->inbox_next = nullptr;
    if (lost_.load()) {
      r->lost_ = true;
      finish(r, run_state::no_response);
    } else {
      push(r);
    }
  }
}

// Without the mutex (submit) or under it (wake_for): some unit will look at
// the queue by `due`: one awake and not in a kernel (it drains the inbox
// before it sleeps or runs a kernel), or one asleep until `due` or earlier.
bool sim_device_impl::looked_after(clock::time_point due) const noexcept {
  for (auto& cu : cus_) {
    auto until = cu->sleep_until.load(std::memory_order_seq_cst);
    if (until == cu_slot::awake ? !cu->executing.load(std::memory_order_seq_cst) : until <= due) return true;
  }
  return false;
}

backend::abort_outcome sim_device_impl::abort(sim_run* r) {
  auto began = clock::now();
  auto outcome = abort_run(r);
  if (outcome == backend::abort_outcome::done && cfg_.long_abort_threshold.count() > 0 &&
      clock::now() - began > cfg_.long_abort_threshold) {
    std::lock_guard lock(mutex_);
    ++stats_.long_aborts;
  }
  return outcome;
}

backend::abort_outcome sim_device_impl::abort_run(sim_run* r) {
  std::unique_lock lock(mutex_);
  drain();  // r may still be in the inbox
  auto s = r->state_.load();
  if (is_final(s)) return backend::abort_outcome::done;
  if (s == run_state::new_) {
    r->state_.store(run_state::abort, std::memory_order_release);
    return backend::abort_outcome::done;
  }
  // Refused whether the run is on a compute unit or still queued for one:
  // a test that sets a short deadline cannot know which it will be on a
  // loaded host (under TSan in CI a 5 ms deadline passed before a unit
  // picked the run up, and the abort of the queued run was accepted).
  if (r->fault_.what == fault::refuse_abort && (s == run_state::running || s == run_state::queued)) {
    ++stats_.abort_refused;
    return backend::abort_outcome::refused;
  }
  // Slow whether on a compute unit or still queued (waiting out its
  // latency), for the same reason; before, an abort during the latency was
  // quick, unlike what the fault promises (found in a new-user audit).
  if (r->fault_.what == fault::slow_abort && (s == run_state::running || s == run_state::queued)) {
    auto delay = r->fault_.abort_delay;
    lock.unlock();
    std::this_thread::sleep_for(delay);
    lock.lock();
    if (is_final(r->state_.load())) return backend::abort_outcome::done;
  }
  if (r->executing_) {
    r->stop_.store(true, std::memory_order_release);
    ++r->waiters_;
    r->done_cv_.wait(lock, [&] { return is_final(r->state_.load()); });
    --r->waiters_;
    return backend::abort_outcome::done;
  }
  if (r->in_queue_) remove(r);
  if (r->parked_) unpark(r);
  finish(r, run_state::abort);
  return backend::abort_outcome::done;
}

// Under mutex_ (held by `lock`, released only to wake the unit it picks),
// after the inbox was drained: wake a compute unit only if none would
// otherwise pick the earliest queued run up in time (docs/DESIGN.md,
// "Backends"): none awake outside a kernel (it looks at the queue before it
// sleeps) and none asleep until its due time or earlier. Then the one asleep
// the longest (nothing due, or standing by) is woken. Waking on every
// submission cost a futex wake and usually a context switch per run
// (docs/PERFORMANCE.md). With nothing queued nobody is woken: the run just
// submitted is already taken. Between a submitter's push and its look at
// the units (looked_after), a watching unit can take the run and enter its
// kernel; the submitter then found that unit in a kernel, the other asleep,
// and woke the other for a run already running (CI, TSan: "200 taken by the
// watcher, 1 wake-ups"; 16 of 100 runs of that test here under TSan).
void sim_device_impl::wake_for(std::unique_lock<std::mutex>& lock) {
  if (heap_.empty()) return;
  if (looked_after(heap_.front().due)) return;
  cu_slot* pick = nullptr;
  for (auto& cu : cus_) {
    auto until = cu->sleep_until.load(std::memory_order_relaxed);
    if (until != cu_slot::awake && (!pick || until > pick->sleep_until.load(std::memory_order_relaxed)))
      pick = cu.get();
  }
  if (!pick) return;  // every unit is in a kernel: the first back takes the queue
  pick->sleep_until.store(cu_slot::awake);  // woken: later submissions need not wake it again
  lock.unlock();
  pick->cv.notify_one();
}

// Under mutex_. While a unit watches (watch_idle), every run queued counts:
// the watcher holds no mutex and looks at the inbox and this count, and the
// others take it for a unit that looks at the queue (looked_after,
// keep_standby). Runs reach the queue from the inbox drained by another
// holder of the mutex (an abort, a submitter that wakes a unit, the other
// unit), from a submission under the mutex (fault rules) and from a timed
// hang queued again; a watch that saw only the inbox and the locked
// submissions left such a run queued until its window ran out (found by a
// review; no test here reproduces the interleaving).
void sim_device_impl::push(sim_run* r) {
  latest_submission_ = std::max(latest_submission_, r->submitted_at_);
  if (watching_) queue_pushes_.store(queue_pushes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  r->in_queue_ = true;
  heap_.push_back({r->due_, r});
  std::push_heap(heap_.begin(), heap_.end(), later);
}

// Under mutex_: the time a compute unit compares due times with. Never
// before the submission of a run already queued: steady_clock read on two
// CPUs need not agree, and a unit whose clock lagged the submitter's found a
// run of zero latency due in the future, slept until then and counted a
// wake-up that no submission caused (made for CI's "200 taken by the
// watcher, 1 wake-ups", whose cause proved to be the race in wake_for;
// docs/DESIGN.md, "Backends"). A run's latency counts from its submission,
// so a clock behind it only delays the run; test `sim clock skew: *`.
clock::time_point sim_device_impl::now() const { return std::max(clock::now(), latest_submission_); }

sim_run* sim_device_impl::pop() {
  std::pop_heap(heap_.begin(), heap_.end(), later);
  sim_run* r = heap_.back().run;
  heap_.pop_back();
  r->in_queue_ = false;
  return r;
}

void sim_device_impl::remove(sim_run* r) {
  auto it = std::find_if(heap_.begin(), heap_.end(), [r](const queued& q) { return q.run == r; });
  if (it != heap_.end()) {
    heap_.erase(it);
    std::make_heap(heap_.begin(), heap_.end(), later);
  }
  r->in_queue_ = false;
}

void sim_device_impl::unpark(sim_run* r) {
  parked_.erase(std::remove(parked_.begin(), parked_.end(), r), parked_.end());
  r->parked_ = false;
}

// Under mutex_. A run turns RUNNING (once: a timed hang that ends runs its
// kernel while already RUNNING), counted in stats().running.
void sim_device_impl::set_running(sim_run* r) {
  if (r->state_.load(std::memory_order_relaxed) != run_state::running) ++stats_.running;
  r->state_.store(run_state::running, std::memory_order_release);
}

// Under mutex_. Publishes a final state and signals the event fd.
void sim_device_impl::finish(sim_run* r, run_state s) {
  r->completed_at_ = clock::now();
  if (r->state_.load(std::memory_order_relaxed) == run_state::running) --stats_.running;
  if (s == run_state::completed) ++stats_.completed;
  else if (s == run_state::abort) ++stats_.aborted;
  else ++stats_.failed;
  r->state_.store(s, std::memory_order_release);
  if (r->waiters_) r->done_cv_.notify_all();  // only this run's waiters
  completions_.fetch_add(1, std::memory_order_release);  // always: a skipped update would not publish this state
  if (efd_ >= 0 && !signaled_.exchange(true, std::memory_order_acq_rel)) {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(efd_, &one, sizeof one);
  }
}

// Under mutex_. Queued and parked runs end in NORESPONSE now; executing ones
// are told to stop and end so when their kernel returns (compute_unit.cpp).
void sim_device_impl::lose_locked() {
  drain();  // into the queue, ended below
  lost_.store(true);
  for (auto& q : heap_) {
    auto* r = q.run;
    r->in_queue_ = false;
    r->lost_ = true;
    finish(r, run_state::no_response);
  }
  heap_.clear();
  for (auto* r : parked_) {
    r->parked_ = false;
    r->lost_ = true;
    finish(r, run_state::no_response);
  }
  parked_.clear();
  for (auto* r : executing_list_) {
    r->lost_ = true;
    r->stop_.store(true);
  }
}

}  // namespace xrtio::sim::detail

namespace xrtio::sim {

std::shared_ptr<device> make_device(device_config config) {
  return std::make_shared<detail::sim_device_impl>(std::move(config));
}

xrtio::context open(device_config config, std::optional<memory_budget> budget) {
  return xrtio::context(make_device(std::move(config)), std::move(budget));
}

device& device_of(const xrtio::context& ctx) {
  auto* d = ctx ? dynamic_cast<device*>(&ctx.native()) : nullptr;
  if (!d) throw error(errc::not_supported, ctx ? "sim::device_of: the context's device (" + ctx.native().name() +
                                                     ") is not a simulated device"
                                               : std::string("sim::device_of: empty context"));
  return *d;
}

}  // namespace xrtio::sim
