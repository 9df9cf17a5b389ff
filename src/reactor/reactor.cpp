// The reactor's intake and its loop: one pass takes new requests, scans the
// runs, posts completions, then spins, polls or sleeps (docs/DESIGN.md, "The
// reactor").
#include "reactor.hpp"

#include <sys/prctl.h>

#include <algorithm>
#include <utility>

#include "util/cpu_relax.hpp"

namespace xrtio::detail {

namespace {
// The first poll interval after activity on a device with no completion
// event; it doubles up to max_poll_interval. About one device round trip of
// the fastest hardware: shorter polls find nothing.
constexpr std::chrono::nanoseconds initial_backoff = std::chrono::microseconds(5);
}  // namespace

reactor::reactor(runtime_options o) : opts_(o), waiter_(o.use_io_uring) {
  // In-loop mode spins while runs are in flight: predictions would never be
  // used, and giving them up costs scans.
  if (driven()) opts_.predict_completions = false;
  // runtime_stats::spinning: whether the reactor thread's waits spin; none
  // do with a zero window, and in-loop mode has no reactor thread.
  if (driven() || opts_.spin_window.count() == 0) counters_.spinning.store(false, std::memory_order_relaxed);
  aborter_ = aborter::start([this] {
    end_doze();
    wake();
  });
  if (!driven()) {
    try {
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      // The destructor does not run for a reactor not constructed: the
      // aborter's worker, which holds its aborter, would wait for good.
      aborter_->stop();
      throw;
    }
  }
}

reactor::~reactor() {
  stop();
  if (file_engine_kept_) {
    // The kernel (or a worker) may still complete retained transfers' pieces.
    (void)file_engine_.release();
    for (auto& b : piece_blocks_) (void)b.release();
  }
}

runtime_stats reactor::stats() const noexcept {
  auto s = counters_.snapshot();
  s.io_uring = waiter_.uses_io_uring();
  s.file_path = static_cast<file_io_path>(file_path_.load(std::memory_order_acquire));
  s.spinning = counters_.spinning.load(std::memory_order_relaxed);
  return s;
}

void reactor::wake() noexcept {
  // At most one eventfd write (or driver wake-up) per pass, and only when
  // the loop sleeps. A driver is only called while it is blocked, which it
  // announces through sleeping_ before and after (block_begin/block_end).
  if (sleeping_.load(std::memory_order_seq_cst) && !wake_pending_.exchange(true, std::memory_order_acq_rel)) {
    if (driven()) wake_driver();
    else waiter_.notify();
  }
}

void reactor::push(run_op_base* op) noexcept {
  incoming_.push(op);
  // A submitter that passed the stopping_ check before stop() began can get
  // here after the thread's last intake: then nobody else will take it.
  // Both sides are seq_cst (push, then this load; the store of stopped_,
  // then the final intake), so at least one of them sees the run.
  if (stopped_.load(std::memory_order_seq_cst)) return complete_orphans();
  wake();
}

// After the reactor thread ended: complete what is still pushed, from this
// thread (never inline: through the handlers' executors). Runs that reached
// the device are retained, as the thread's own drain does.
void reactor::complete_orphans() noexcept {
  for (run_op_base* fifo = take_after_stop(); fifo;) {
    auto* op = fifo;
    fifo = fifo->next;
    if (op->file_io && op->ph != run_op_base::phase::finished) {
      // Leased or waiting, but no piece issued yet: nothing to keep.
      if (op->ph == run_op_base::phase::waiting) op->core.withdraw(op);
      op->core.release();
      op->ec = errc::shut_down;
      op->result = {};
    } else if (op->ph == run_op_base::phase::waiting) {
      op->core.withdraw(op);
      op->core.release();
      op->ec = errc::shut_down;
      op->result = {};
    } else if (op->ph != run_op_base::phase::finished) {
      op->result = op->core.result(op->core.native() ? op->core.native()->state() : run_state::running);
      op->core.retain(op->ticket);
      op->ec = errc::abort_failed;
      counters_.retained.fetch_add(1, std::memory_order_relaxed);
      trace_at(trace_event_kind::retained, op, op->result.observed, outcome(op));
    }
    op->ph = run_op_base::phase::finished;
    op->batch_next = nullptr;
    op->vt().post_batch(op, false);  // no loop: no backlog to count
  }
}

void reactor::access_released() noexcept { raise(retry_pending_); }

// A request that is only a flag (retry, cancel, a pool completion): store
// it, then wake(), whose load of sleeping_ must not be done before the store
// is visible, or the waker and a loop going to sleep can both miss each
// other (docs/DESIGN.md, "Intake and wake-ups"). A release store allows that
// reordering (x86 does it); a seq_cst store then a seq_cst load does not in
// C++, but qemu-user 7.2 emulates aarch64's stlr-then-ldar on x86 without
// the barrier between them (the fence below is a dmb, which it honours).
void reactor::raise(std::atomic<bool>& flag) noexcept {
  flag.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  end_doze();
  wake();
}

namespace {
// The backlog that starts a doze (half of it ends the doze early), given the
// runs outstanding (in flight, or done with their handlers not yet begun).
// With many, two batches of max_batch (one left when it ends), so that the
// handlers' thread still has work queued while the loop wakes, takes in and
// posts the next; four batches and 256 were out of reach at 256 runs in
// flight, where the reactor then spun a core beside the handlers' thread
// (docs/PERFORMANCE.md, "A longer doze"). Two batches were out of reach at
// 64, where it did the same: so at most a quarter of those outstanding.
// There the handlers' thread may run dry before the loop is back (8
// handlers are less than a wake-up), which measured cheaper than a reactor
// spinning beside it ("The doze at a few dozen runs in flight"). At least
// 16: below that a backlog is a few microseconds of handlers.
std::int64_t doze_full(const runtime_options& o) noexcept {
  return std::max<std::int64_t>(128, 2 * static_cast<std::int64_t>(o.max_batch));
}
std::int64_t doze_high(const runtime_options& o, std::uint64_t outstanding) noexcept {
  auto quarter = static_cast<std::int64_t>(std::min<std::uint64_t>(outstanding / 4, std::uint64_t(doze_full(o))));
  return std::max<std::int64_t>(16, quarter);
}
}  // namespace

void reactor::handlers_begun(std::size_t n) noexcept {
  if (!counts_backlog_) return;
  handlers_begun_.fetch_add(n, std::memory_order_relaxed);
  auto left = queued_handlers_.fetch_sub(static_cast<std::int64_t>(n), std::memory_order_seq_cst) -
              static_cast<std::int64_t>(n);
  // The loop publishes dozing_, then reads the backlog; this thread lowers
  // the backlog, then reads dozing_: one of the two sees the other (the
  // fence for qemu-user, as in announce_sleep).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (dozing_.load(std::memory_order_seq_cst) && left < doze_low_.load(std::memory_order_relaxed)) end_doze();
  // The backlog a whole doze left (reactor::doze) has fallen: the reduced
  // threshold is back. Seen here, where the backlog falls (the loop may
  // sleep meanwhile, and next see it already high again).
  if (auto stuck = stuck_low_.load(std::memory_order_relaxed); stuck && left < stuck)
    stuck_low_.store(0, std::memory_order_relaxed);
}

void reactor::end_doze() noexcept {
  if (dozing_.load(std::memory_order_relaxed) && dozing_.exchange(false, std::memory_order_acq_rel)) waiter_.notify();
}

// While the handlers' threads have a backlog of completions to begin,
// hurrying the next batch buys nothing: sleep (not announced to submitters,
// whose runs wait for the doze's end) until the backlog falls, a request
// that cannot wait arrives, the next deadline or backlog_doze. Measured with
// XRT's no-op device at C = 4096, where the loop otherwise spins a whole
// core for small batches (docs/DESIGN.md, "The reactor dozes while handlers
// are behind").
bool reactor::doze(clock::time_point now, const scan_result& found) noexcept {
  if (opts_.backlog_doze.count() == 0 || shutting_down_) return false;
  auto queued = queued_handlers_.load(std::memory_order_relaxed);
  auto outstanding = counters_.in_flight.load(std::memory_order_relaxed) + std::uint64_t(std::max<std::int64_t>(0, queued));
  auto high = doze_high(opts_, outstanding);
  // A reduced threshold that a whole doze did not bring down is taken for a
  // backlog nobody runs (a dead io_context's few completions) rather than a
  // busy handlers' thread, whose backlog of a few dozen drains within
  // microseconds: the full one (two batches) applies until the backlog
  // falls below that doze's end mark. Otherwise a stuck 8-127 would keep
  // every doze from ending early, one whole doze per half batch of another
  // context's runs.
  if (auto stuck = stuck_low_.load(std::memory_order_relaxed)) {
    if (queued < stuck) stuck_low_.store(0, std::memory_order_relaxed);
    else high = doze_full(opts_);
  }
  if (queued < high) return false;
  // Only while the handlers work the backlog off: at least half a batch
  // begun since the last doze began. A backlog nobody runs (an io_context
  // stopped or never run again) would otherwise make every pass of every
  // other client wait a whole doze (measured: 157 against 35 us per round
  // trip of a second io_context).
  auto begun = handlers_begun_.load(std::memory_order_relaxed);
  if (begun_at_doze_ && begun - *begun_at_doze_ < std::max(1u, opts_.max_batch / 2)) return false;
  // And after two dozes in a row during which the backlog stalled (each
  // slept its whole backlog_doze and fewer than half a batch of handlers
  // began: nobody runs them, or their thread is busy elsewhere, as while it
  // submits thousands of runs), only once handlers for half the last one's
  // backlog began since it began: other contexts' handlers begin between
  // dozes (the count above) while a stalled backlog stays, and each half
  // batch of theirs would otherwise buy them a whole doze (one doze per 32
  // runs of another io_context: at backlog_doze 1 ms, 31 us more per run on
  // average; now one per backlog / 2 of them). Handlers are counted when
  // their batch begins, so one doze can see none begin while a batch of
  // slow handlers (over backlog_doze for the batch) is being run: two in a
  // row are asked for before the backlog is taken for stalled.
  if (doze_stalls_ >= 2 && begun_at_doze_ &&
      begun - *begun_at_doze_ < static_cast<std::uint64_t>(std::max<std::int64_t>(1, backlog_at_doze_ / 2)))
    return false;
  doze_low_.store(high / 2, std::memory_order_relaxed);
  dozing_.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (queued_handlers_.load(std::memory_order_seq_cst) < high / 2 || requested()) {
    dozing_.store(false, std::memory_order_relaxed);
    return true;  // pass again at once: something is to be done
  }
  // The counts the rules above measure from: those of the last doze that
  // slept (one given up at once, above, changes nothing).
  begun_at_doze_ = begun;
  backlog_at_doze_ = queued;
  reactor_counters::bump(counters_.dozes);
  auto limit = saturating_deadline(now, opts_.backlog_doze);
  auto until = std::min(found.next_deadline, limit);
  (void)waiter_.wait(until, {});
  dozing_.store(false, std::memory_order_relaxed);
  // Stalled: slept its whole backlog_doze (not ended early by the backlog,
  // a request, a notify left pending, nor cut short by a deadline) with
  // next to no handler begun meanwhile. Any progress clears the count; a
  // doze that ended early without progress tells nothing and keeps it.
  bool whole = until == limit && clock::now() >= until;
  if (handlers_begun_.load(std::memory_order_relaxed) - begun >= std::max(1u, opts_.max_batch / 2)) doze_stalls_ = 0;
  else if (whole) ++doze_stalls_;
  if (whole && high < doze_full(opts_)) stuck_low_.store(high / 2, std::memory_order_relaxed);
  // The wait may have taken a submitter's notify left pending by a sleep
  // that ended before its wait (sleep(): work seen after the announce).
  // wake_pending_ still says one is on its way, so later submitters would
  // not notify and an idle sleep would never end (the bench's xrtio@xrt
  // C = 4096 cell hung 13 in 15 times under TSan). No waker sets it during
  // the doze (sleeping_ is false), so clearing it here loses nothing.
  wake_pending_.store(false, std::memory_order_release);
  return true;
}

void reactor::reject(run_op_base* op, std::error_code ec) noexcept {
  if (observer_ && !op->observer) [[unlikely]]
    observe_submit(op);  // rejected before submit() saw it
  op->core.release();  // never started: no leases but a read's begun at once; frees a prepared run for its next execution
  op->ec = ec;
  op->result = {};
  op->ph = run_op_base::phase::finished;
  if (stopped_.load(std::memory_order_acquire)) {
    // No reactor thread any more: post from here (still never inline).
    op->batch_next = nullptr;
    op->vt().post_batch(op, false);
    return;
  }
  push(op);
}

void reactor::start_on_device(run_op_base* op) noexcept {
  if (op->file_io) return file_begin(op);
  try {
    op->core.start();
    op->ph = run_op_base::phase::on_device;
  } catch (const xrtio::error& e) {
    op->core.release();  // never reached the device
    op->ec = e.code();
    op->ph = run_op_base::phase::finished;
  } catch (const std::exception&) {
    op->core.release();
    op->ec = errc::backend_failure;
    op->ph = run_op_base::phase::finished;
  }
}

// The run reports to this runtime's observer; a traced run gets its id and
// its first event.
void reactor::observe_submit(run_op_base* op) noexcept {
  op->observer = observer_.get();
  if (trace_) {
    op->run_id = observer_->next_run_id();
    trace_->record(trace_event_kind::submitted, op->run_id, clock::now());
  }
}

bool reactor::submit(run_op_base* op) noexcept {
  if (observer_) [[unlikely]]
    observe_submit(op);
  if (stopping_.load(std::memory_order_acquire)) {
    reject(op, errc::shut_down);
    return false;
  }
  if (op->options.timeout.count() > 0) op->deadline = saturating_deadline(clock::now(), op->options.timeout);
  // Leases and submission on the caller's thread: no reactor hop before the
  // device starts working (the reactor only observes).
  acquire_status st = acquire_status::acquired;
  // A read that read_at_once began holds its lease already (its bytes are
  // in the buffer): nothing may come between them and the rest.
  if (!op->file_io || !static_cast<file_op_base*>(op)->leased_at_once) {
    const access_waiter* w = nullptr;
    if (op->options.on_conflict == conflict_policy::wait) {
      op->waiter = access_waiter{op, access_tracker::next_wait_seq(), this};
      w = &op->waiter;
    }
    st = op->core.acquire(nullptr, w);
  }
  switch (st) {
    case acquire_status::acquired:
      trace_now(trace_event_kind::leases_granted, op);
      start_on_device(op);
      if (op->file_io && file_try_inline(op)) return true;
      if (op->ph == run_op_base::phase::on_device) trace_at(trace_event_kind::started, op, op->core.submitted());
      break;
    case acquire_status::queued:
      op->ph = run_op_base::phase::waiting;
      op->queued_at = clock::now();  // it waits anyway: the lease-queueing histogram's start
      break;
    case acquire_status::retained:
    case acquire_status::conflict:
      reject(op, acquire_error(st));
      return false;
  }
  push(op);
  return false;
}

void reactor::cancel(run_op_base* op, asio::cancellation_type t) noexcept {
  op->cancel_bits.fetch_or(static_cast<unsigned>(t), std::memory_order_release);
  raise(cancel_pending_);
}

// A started run joins the runs on the device (at the front, where the next
// partial scan looks).
void reactor::to_device(run_op_base* op) noexcept {
  if (op->file_io) return file_intake(op);
  op->predicted = predictor_.predict(&op->core.kernel().native(), op->core.submitted(),
                                     counters_.in_flight.load(std::memory_order_relaxed));
  ++fresh_;
  devices_.add(access::context_state(op->core.kernel())->device.get());
  device_.push_front(op);
}

void reactor::intake() noexcept {
  incoming_.take_all(
      [](run_op_base* op) noexcept {
        // The lines admit() and to_device() read or write: the run's first
        // two (kernel, submission time), the phase and file_io, the
        // prediction and the list link.
        auto* p = reinterpret_cast<const char*>(op);
        __builtin_prefetch(p, 0);
        __builtin_prefetch(p + 64, 0);
        __builtin_prefetch(&op->ph, 0);
        __builtin_prefetch(&op->next, 1);
      },
      [this](run_op_base* op) noexcept { admit(op); });
}

// A run taken from incoming_: to the device, to the lease queue, or (rejected
// at submission) to the completions.
void reactor::admit(run_op_base* op) noexcept {
  using rc = reactor_counters;
  switch (op->ph) {
    case run_op_base::phase::finished:  // rejected at submission
      rc::bump(counters_.failed);
      done_.push_back(op);
      break;
    case run_op_base::phase::waiting:
      rc::bump(counters_.submitted);
      rc::bump(counters_.in_flight);
      waiting_.push_back(op);
      retry_pending_.store(true, std::memory_order_relaxed);  // a release may have come first
      break;
    default:
      rc::bump(counters_.submitted);
      rc::bump(counters_.in_flight);
      to_device(op);
      break;
  }
}

// New runs, shutdown, cancellations, released leases. Returns whether there
// were new runs.
bool reactor::take_requests(clock::time_point now) noexcept {
  bool any = !incoming_.empty();
  if (any) intake();
  if (stopping_.load(std::memory_order_acquire) && !shutting_down_) enter_shutdown(now);
  // A load first: an exchange takes the cache line exclusive on every pass,
  // and the spinning loop passes back to back (docs/DESIGN.md, "Intake and
  // wake-ups"). A flag set just after the load is seen by the next pass, or
  // by the check before sleeping, as with the exchange alone.
  if (cancel_pending_.load(std::memory_order_relaxed) && cancel_pending_.exchange(false, std::memory_order_acq_rel))
    cancel_runs();
  if (retry_pending_.load(std::memory_order_relaxed) && retry_pending_.exchange(false, std::memory_order_acq_rel))
    retry_waiting();
  if (file_prepare_.load(std::memory_order_relaxed) && file_prepare_.exchange(false, std::memory_order_acq_rel))
    file_prepare();
  return any;
}

// Before the loop sleeps (or dozes): a request raised meanwhile, which
// raise() stored before it looked whether the loop sleeps.
bool reactor::requested() const noexcept {
  return cancel_pending_.load() || retry_pending_.load() || stopping_.load() || file_ready_.load() ||
         file_prepare_.load() || (file_engine_ && file_engine_->ready());
}

// Fallback for backends whose state() does not advance by itself
// (runtime_options::refresh_interval): one bounded wait on the run at the
// head of device_ (the newest; a wait there refreshes the device's view of
// every command on the backends that need it).
void reactor::refresh_head(clock::time_point now) noexcept {
  if (opts_.refresh_interval.count() <= 0 || device_.empty() || now - last_refresh_ < opts_.refresh_interval) return;
  last_refresh_ = now;
  auto* op = device_.front();
  if (op->ph != run_op_base::phase::on_device) return;
  try {
    op->core.native()->wait_for(opts_.refresh_wait);
  } catch (...) {
  }
}

// One pass: new requests, a scan of the runs, completions posted, shutdown
// progress.
reactor::pass_result reactor::pass(clock::time_point now) noexcept {
  pass_result r;
  r.activity = take_requests(now);
  r.found = scan(now);
  r.activity |= r.found.finished;
  refresh_head(now);
  if (!done_.empty()) {
    flush_completions(now);
    r.activity = true;
  }
  if (shutting_down_) {
    auto step = shutdown_progress(now);
    r.exit = step == shutdown_step::exit;
    r.again = step == shutdown_step::again;
  }
  return r;
}

// The reactor thread's loop (and, in in-loop mode, the destructor's: it
// drives the shutdown itself).
void reactor::run() noexcept {
  // A precise timer for the reactor's own thread only (not for a thread
  // that drives an in-loop runtime's shutdown).
  if (!driven())
    ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(std::max<std::int64_t>(1, opts_.timer_slack.count())), 0, 0,
          0);
  pacing pace{clock::now(), initial_backoff};
  for (;;) {
    auto now = clock::now();
    auto r = pass(now);
    if (r.exit) break;
    if (r.again) continue;
    try_regime(now);
    if (r.activity) {
      if (pace.in_flight) spin_.activity_after(now - pace.last_activity);
      if (pace.posted_at != clock::time_point{}) resubmit_.activity_after(now - pace.posted_at);
      pace = {now, initial_backoff};
      if (std::exchange(run_posted_, false)) pace.posted_at = now;
    }
    rest(now, r.found, pace);
  }
  drain_after_stop();
}

// Called by the loop and by flush_completions: whether the io thread may
// linger for the runs it submits (io_linger.cpp).
void reactor::publish_short_runs() noexcept {
  bool short_runs = resubmit_.short_runs() && regime_.spinning();
  if (short_runs != short_runs_.load(std::memory_order_relaxed)) short_runs_.store(short_runs, std::memory_order_relaxed);
}

// The spin regime's epochs end on passes (spin_regime.hpp). A trial's
// start and end, and a switch, each change whether the loop spins.
void reactor::try_regime(clock::time_point now) noexcept {
  if (!regime_.tick(now, finished_)) return;
  publish_short_runs();
  counters_.spin_trials.store(regime_.trials(), std::memory_order_relaxed);
  counters_.spin_switches.store(regime_.switches(), std::memory_order_relaxed);
  counters_.spinning.store(regime_.spinning(), std::memory_order_relaxed);
}

reactor::drive_result reactor::drive(clock::time_point now) noexcept {
  auto r = pass(now);
  bool ring_made = std::exchange(file_ring_made_, false);
  return {r.activity, !device_.empty() || !waiting_.empty() || !files_.empty(), !device_.empty(),
          r.found.next_deadline, ring_made};
}

// The loop's side of the handshake with wake(): sleeping_ is visible
// before the loop reads the requests again. The fence is needed under
// qemu-user 7.2 only, where a seq_cst store then a seq_cst load (stlr, ldar)
// could be reordered: a submission then found the loop asleep with its run
// in incoming_ and wake_pending_ clear, for ever (an aarch64 file test hung
// in 11 of 30 runs). It costs a barrier per sleep, not per run.
void reactor::announce_sleep() noexcept {
  sleeping_.store(true, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool reactor::block_begin() noexcept {
  // A wake-up posted while the driver was awake may already have been run by
  // its own round of handlers, leaving wake_pending_ set with nothing on its way:
  // then every later wake() would skip the post and the driver would sleep
  // through new work. Clear it before announcing the sleep (the seq_cst
  // store publishes the clear): a waker that sees sleeping_ posts anew, and
  // a stale post still queued only ends the next sleep early.
  wake_pending_.store(false, std::memory_order_relaxed);
  announce_sleep();
  if (!incoming_.empty() || requested()) {
    sleeping_.store(false, std::memory_order_relaxed);
    return false;
  }
  reactor_counters::bump(counters_.sleeps);
  return true;
}

int reactor::file_watch_fd() const noexcept {
  return pieces_live_ > 0 ? file_ring_fd() : -1;
}

int reactor::file_ring_fd() const noexcept {
  return file_engine_ && file_engine_->uses_io_uring() ? waiter_.wake_fd() : -1;
}

void reactor::block_end() noexcept {
  sleeping_.store(false, std::memory_order_relaxed);
  if (wake_pending_.exchange(false, std::memory_order_acq_rel)) reactor_counters::bump(counters_.wakeups);
}

// Under driver_mutex_: a driver that detaches (and may then destroy its
// io_context) never has a wake-up posted to it afterwards. Only wake-ups of
// a blocked driver take the lock, never the hot path.
void reactor::wake_driver() noexcept {
  std::lock_guard lock(driver_mutex_);
  if (driver_waker_) driver_waker_(driver_ctx_);
  else waiter_.notify();  // no driver: the destructor's own shutdown loop waits there
}

void reactor::attach_driver(void (*waker)(void*), void* ctx) {
  std::lock_guard lock(driver_mutex_);
  if (waker && driver_waker_) throw error(errc::busy, "xrtio::run: another thread drives this runtime");
  driver_waker_ = waker;
  driver_ctx_ = ctx;
}

// Between passes: spin while activity is recent (for the adaptive budget of
// spin_policy) or a completion is about to be scanned for, poll towards a
// predicted completion, else sleep.
void reactor::rest(clock::time_point now, const scan_result& found, pacing& pace) noexcept {
  if (!pace.dozed && doze(now, found)) {
    pace.dozed = true;
    return;
  }
  // A trial of the other way, or the way that won one, may be not to spin
  // at all (spin_regime.hpp): then no budget is halved (a spin that did not
  // happen did not miss), and the predicted-completion poll waits too. A
  // device that signalled is still scanned for at once (below): that is
  // work, not a wait.
  const bool spins = regime_.spinning();
  const auto spin_budget = spins ? spin_.budget() : std::chrono::nanoseconds(0);
  if (device_.empty() && waiting_.empty()) {
    // File completions are reaped every pass. Spin too, within the spin
    // budget, once file_complete has posted a completion (file_posted_,
    // cleared here once the loop stops spinning): their handlers often issue the
    // next reads at once (on the ring, small cached reads issued while others
    // of their context are in flight come to the loop: file_try_inline), and
    // a sleeping loop costs them a wake-up per batch.
    if ((!files_.empty() || file_posted_) && now - pace.last_activity < spin_budget) {
      cpu_relax();
      return;
    }
    file_posted_ = false;
    // Runs just completed and nothing is left on the device: their handlers
    // usually submit the next runs at once, and a sleeping loop costs each
    // such round a wake-up on the submitting thread (an eventfd write: 19.8 %
    // of the io thread's samples with XRT's no-op device at C = 4096) and a
    // sleep here. Spin for them within resubmit_'s budget
    // (resubmit_policy.hpp; docs/DESIGN.md, "Adaptive spinning").
    if (pace.posted_at != clock::time_point{} && !shutting_down_ && spins) {
      auto budget = resubmit_.budget();
      if (now - pace.posted_at < budget) {
        cpu_relax();
        return;
      }
      if (!pace.posted_missed && budget.count() > 0) {
        pace.posted_missed = true;
        resubmit_.missed();
      }
    }
    if (shutting_down_ && files_.empty()) return;
    // Idle: no timer at all, unless file transfers have deadlines (their
    // completions write the wake eventfd, or the pool wakes the loop). With
    // the thread pool's transfers in flight the sleep is also bounded by
    // max_poll_interval: added when, under qemu-user, a pool completion was
    // now and then seen only at the next submission. That turned out to be
    // the handler's io_context stopped by a late tracked-work release (fixed
    // in run_op::send; docs/DESIGN.md, "File I/O"); the bound stays until
    // the fix is shown under qemu over many CI runs.
    auto until = found.next_deadline;
    if (!files_.empty() && file_engine_ && !file_engine_->uses_io_uring())
      until = std::min(until, now + opts_.max_poll_interval);
    if (shutting_down_) until = std::min(until, shutdown_deadline_);
    sleep(until);
    pace.last_activity = clock::now();
    return;
  }
  if (!device_.empty()) pace.in_flight = true;
  if ((now - pace.last_activity < spin_budget || signalled_) && !device_.empty()) {
    cpu_relax();  // signalled_: completions to scan for once the scan gap has passed
    return;
  }
  if (!device_.empty() && !pace.missed && spin_budget.count() > 0) {
    pace.missed = true;
    spin_.missed();
  }
  // A run is predicted to finish within the wake-up lateness: poll for it
  // rather than pay a wake-up hop after it. Only with few runs in flight:
  // with many, completions come often enough that event wake-ups are shared
  // by batches and spinning would cost more.
  auto* predicted = found.next_predicted;
  if (counters_.in_flight.load(std::memory_order_relaxed) > opts_.predict_max_in_flight) predicted = nullptr;
  auto next_predicted = predicted ? predicted->predicted : clock::time_point::max();
  auto lead = predictor_.wake_lead();
  if (spins && next_predicted != clock::time_point::max() && next_predicted - lead <= now && !shutting_down_) {
    cpu_relax();
    return;
  }
  // Devices that signal completions let the reactor sleep until they do
  // (bounded by event_poll_interval as a safety net); others are polled
  // with an exponential backoff up to max_poll_interval.
  auto sources = devices_.event_sources();
  auto step = sources.complete ? std::chrono::nanoseconds(opts_.event_poll_interval) : pace.backoff;
  auto until = std::min(found.next_deadline, device_.empty() ? clock::time_point::max() : now + step);
  if (shutting_down_) until = std::min(until, shutdown_deadline_);
  bool predicted_wake = false;
  if (next_predicted != clock::time_point::max() && next_predicted - lead < until) {
    until = next_predicted - lead;
    predicted_wake = true;
  }
  sleep(until, sources.devices);
  if (predicted_wake) {
    // Learn how late timed sleeps end (only those that ran to their time).
    auto late = (clock::now() - until).count();
    if (late >= 0) {
      reactor_counters::bump(counters_.predicted_wakeups);
      predictor_.wake_was_late(late);
    }
  }
  pace.backoff = std::min<std::chrono::nanoseconds>(pace.backoff * 2, opts_.max_poll_interval);
}

void reactor::sleep(clock::time_point until, std::span<backend::native_device* const> sources) noexcept {
  // Announce the sleep, then look again: a submitter either sees
  // sleeping_ and notifies, or we see its work here.
  announce_sleep();
  if (!incoming_.empty() || requested()) {
    sleeping_.store(false, std::memory_order_relaxed);
    return;
  }
  reactor_counters::bump(counters_.sleeps);
  bool woken = waiter_.wait(until, sources);
  sleeping_.store(false, std::memory_order_relaxed);
  signalled_ = true;  // the devices' events were consumed: the completion counts may say nothing new
  if (woken) reactor_counters::bump(counters_.wakeups);
  wake_pending_.store(false, std::memory_order_release);
}

}  // namespace xrtio::detail
