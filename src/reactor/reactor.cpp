// The completion reactor. One thread per runtime; see DESIGN.md "The
// reactor" and invariants 1-5.
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <asio/error.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "xrtio/async_run.hpp"
#include "xrtio/runtime.hpp"
#include "cpu_relax.hpp"

namespace xrtio::detail {

using clock = std::chrono::steady_clock;
namespace {
template <class T>
void bump(std::atomic<T>& a, T by = 1) noexcept {  // single writer: no locked RMW
  a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}
}  // namespace

// Blocking aborts run here, never on the reactor loop (invariant 4). Shared
// with its threads so a hung abort at shutdown can be left behind safely.
// One worker per concurrent abort: a slow abort must not hold back the
// others past their grace period (they would be retained needlessly).
struct aborter {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::pair<backend::native_run*, std::shared_ptr<abort_ticket>>> queue;
  bool stop = false;
  unsigned busy = 0;
  unsigned idle = 0;
  std::vector<std::thread> threads;
  std::function<void()> on_done;

  static void work(std::shared_ptr<aborter> a) {
    std::unique_lock lock(a->mutex);
    for (;;) {
      ++a->idle;
      a->cv.wait(lock, [&] { return a->stop || !a->queue.empty(); });
      --a->idle;
      if (a->queue.empty()) return;
      auto [run, ticket] = std::move(a->queue.front());
      a->queue.pop_front();
      ++a->busy;
      lock.unlock();
      backend::abort_outcome out;
      try {
        out = run->abort();
      } catch (...) {
        out = backend::abort_outcome::refused;
      }
      ticket->set(out == backend::abort_outcome::done ? abort_ticket::done : abort_ticket::refused);
      lock.lock();
      --a->busy;
      if (a->on_done) a->on_done();
    }
  }
  // Under mutex: a worker for every queued abort.
  void add_worker_if_needed(const std::shared_ptr<aborter>& self) noexcept {
    if (queue.size() <= idle) return;
    try {
      threads.emplace_back(&aborter::work, self);
    } catch (...) {
      // No thread: the queued abort waits for a busy worker.
    }
  }
};

class reactor final : public access_listener {
 public:
  explicit reactor(runtime_options o);
  ~reactor();

  void submit(run_op_base* op) noexcept;
  void reject(run_op_base* op, std::error_code ec) noexcept;
  void cancel(run_op_base* op, asio::cancellation_type t) noexcept;
  void access_released() noexcept override {
    retry_pending_.store(true, std::memory_order_release);
    wake();
  }
  void stop() noexcept;
  runtime_stats stats() const noexcept;
  const runtime_options& options() const noexcept { return opts_; }

 private:
  void push(run_op_base* op) noexcept;
  void wake() noexcept;
  void run() noexcept;
  void intake(clock::time_point now) noexcept;
  void handle_cancels() noexcept;
  void retry_waiting() noexcept;
  bool poll(clock::time_point now, clock::time_point& next_deadline, run_op_base*& next_predicted) noexcept;
  clock::time_point predict(const run_op_base* op) noexcept;
  void track(run_op_base* op) noexcept;
  void untrack(run_op_base* op) noexcept;
  void unlink(run_op_base* op) noexcept;
  bool scan_needed(clock::time_point now) noexcept;
  std::chrono::nanoseconds prediction_spread(const run_op_base* op) const noexcept;
  void learn(const run_op_base* op) noexcept;
  void begin_abort(run_op_base* op, run_op_base::abort_reason why, clock::time_point now) noexcept;
  void finish(run_op_base* op, run_state s) noexcept;
  void fail(run_op_base* op, std::error_code ec) noexcept;
  void retain(run_op_base* op) noexcept;
  void flush_completions() noexcept;
  void sleep(clock::time_point until) noexcept;
  bool collect_event_sources() noexcept;
  void start_on_device(run_op_base* op) noexcept;
  void enter_shutdown(clock::time_point now) noexcept;

  runtime_options opts_;
  // Any thread:
  std::atomic<run_op_base*> incoming_{nullptr};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> cancel_pending_{false};
  std::atomic<bool> retry_pending_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  int wake_fd_ = -1;
  // Reactor thread only:
  io_uring ring_{};
  bool uring_ = false;
  bool wake_armed_ = false;
  // Completion event fds of the devices with runs on them (DESIGN.md: the
  // reactor sleeps on them instead of polling). Rebuilt before each sleep.
  static constexpr unsigned max_sources = 16;  // = max_tracked
  backend::native_device* sources_[max_sources]{};
  unsigned source_count_ = 0;
  std::uint64_t sleep_seq_ = 0;
  std::uint64_t armed_tags_[max_sources]{};  // polls still armed from the last sleep
  unsigned armed_count_ = 0;
  run_op_base* waiting_ = nullptr;  // FIFO
  run_op_base** waiting_tail_ = &waiting_;
  run_op_base* device_ = nullptr;  // on the device or aborting
  // The devices of the runs in device_, with how many each has there, so a
  // spinning pass can ask them whether anything finished (take_completions)
  // instead of scanning every run. Runs beyond max_tracked devices are
  // counted in untracked_ and force a scan on every pass.
  static constexpr unsigned max_tracked = max_sources;
  struct tracked_device {
    backend::native_device* dev;
    unsigned runs;
  };
  tracked_device tracked_[max_tracked]{};
  unsigned tracked_count_ = 0;
  unsigned untracked_ = 0;
  unsigned aborting_ = 0;     // runs in device_ with an abort under way
  unsigned fresh_ = 0;        // runs added to the front of device_ since the last scan
  bool signalled_ = false;    // a device reported completions not scanned for yet
  clock::time_point last_full_scan_{};
  // What the last scan saw: the earliest deadline and prediction, and when
  // the earliest prediction is to be given up.
  clock::time_point scan_deadline_ = clock::time_point::max();
  clock::time_point scan_giveup_ = clock::time_point::max();
  run_op_base* scan_predicted_ = nullptr;
  run_op_base* done_ = nullptr;    // completed this pass (FIFO)
  run_op_base** done_tail_ = &done_;
  bool shutting_down_ = false;
  clock::time_point shutdown_deadline_{};
  clock::time_point last_refresh_{};
  // Completion prediction (runtime_options::predict_completions): recent run
  // times per native kernel, direct-mapped by address (a collision or a
  // reused address only costs one poor guess), and how late timed sleeps end.
  struct run_time_estimate {
    const void* kernel = nullptr;
    std::int64_t ns = 0;   // mean run time (EWMA, 1/8)
    std::int64_t dev = 0;  // mean absolute deviation from it (EWMA, 1/4)
  };
  static constexpr unsigned estimate_slots = 64;
  run_time_estimate estimates_[estimate_slots]{};
  std::int64_t wake_lateness_ns_ = 20'000;
  std::shared_ptr<aborter> aborter_;
  std::thread thread_;
  // Statistics: written by the reactor thread, read anywhere.
  std::atomic<std::uint64_t> submitted_{0}, completed_{0}, failed_{0}, timed_out_{0}, cancelled_{0}, retained_{0},
      in_flight_{0}, polls_{0}, wakeups_{0}, sleeps_{0}, batches_{0}, predicted_wakeups_{0}, predictions_missed_{0};
  std::atomic<std::uint64_t> rejected_{0};  // any thread
};

reactor::reactor(runtime_options o) : opts_(o) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw error(errc::backend_failure, "runtime: eventfd failed");
  if (opts_.use_io_uring) {
    // Probe: where io_uring is refused (seccomp, old kernel) fall back to
    // eventfd + ppoll and say so in stats().
    if (io_uring_queue_init(64, &ring_, 0) == 0) {
      if (ring_.features & IORING_FEAT_EXT_ARG) uring_ = true;
      else io_uring_queue_exit(&ring_);
    }
  }
  aborter_ = std::make_shared<aborter>();
  aborter_->on_done = [this] { wake(); };
  aborter_->threads.emplace_back(&aborter::work, aborter_);
  thread_ = std::thread([this] { run(); });
}

reactor::~reactor() {
  stop();
  if (uring_) io_uring_queue_exit(&ring_);
  ::close(wake_fd_);
}

void reactor::stop() noexcept {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  wake_pending_.store(false);
  sleeping_.store(true);  // force a write
  wake();
  if (thread_.joinable()) thread_.join();
  // The aborter: stop it, and leave it behind if an abort still blocks (its
  // run is retained, so everything it touches stays alive).
  {
    std::unique_lock lock(aborter_->mutex);
    aborter_->stop = true;
    aborter_->on_done = nullptr;
  }
  aborter_->cv.notify_all();
  bool idle;
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(aborter_->mutex);
    idle = !aborter_->busy && aborter_->queue.empty();
    threads.swap(aborter_->threads);
  }
  for (auto& t : threads) {
    if (idle) t.join();
    else t.detach();
  }
}

void reactor::wake() noexcept {
  // At most one eventfd write per reactor pass, and only when it sleeps.
  if (sleeping_.load(std::memory_order_seq_cst) && !wake_pending_.exchange(true, std::memory_order_acq_rel)) {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }
}

void reactor::push(run_op_base* op) noexcept {
  run_op_base* head = incoming_.load(std::memory_order_relaxed);
  do op->next = head;
  while (!incoming_.compare_exchange_weak(head, op, std::memory_order_seq_cst, std::memory_order_relaxed));
  wake();
}

void reactor::reject(run_op_base* op, std::error_code ec) noexcept {
  op->core.release();  // never started: no leases; frees a prepared run for its next execution
  op->ec = ec;
  op->result = {};
  op->ph = run_op_base::phase::finished;
  rejected_.fetch_add(1, std::memory_order_relaxed);
  if (stopped_.load(std::memory_order_acquire)) {
    // No reactor thread any more: post from here (still never inline).
    op->batch_next = nullptr;
    op->vt().post_batch(op);
    return;
  }
  push(op);
}

void reactor::start_on_device(run_op_base* op) noexcept {
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

void reactor::submit(run_op_base* op) noexcept {
  if (stopping_.load(std::memory_order_acquire)) return reject(op, errc::shut_down);
  if (op->options.timeout.count() > 0) op->deadline = clock::now() + op->options.timeout;
  // Leases and submission on the caller's thread: no reactor hop before the
  // device starts working (the reactor only observes).
  const access_waiter* w = nullptr;
  if (op->options.on_conflict == conflict_policy::wait) {
    op->waiter = access_waiter{op, access_tracker::next_wait_seq(), this};
    w = &op->waiter;
  }
  switch (op->core.acquire(nullptr, w)) {
    case acquire_status::acquired:
      start_on_device(op);
      break;
    case acquire_status::queued:
      op->ph = run_op_base::phase::waiting;
      break;
    case acquire_status::retained:
      return reject(op, errc::range_retained);
    case acquire_status::conflict:
      return reject(op, errc::range_in_use);
  }
  push(op);
}

void reactor::cancel(run_op_base* op, asio::cancellation_type t) noexcept {
  op->cancel_bits.fetch_or(static_cast<unsigned>(t), std::memory_order_release);
  cancel_pending_.store(true, std::memory_order_release);
  wake();
}

void reactor::finish(run_op_base* op, run_state s) noexcept {
  using reason = run_op_base::abort_reason;
  op->result = op->core.result(s);
  if (s == run_state::completed) {
    op->ec = {};
    bump(completed_);
    if (op->reason == run_op_base::abort_reason::none) learn(op);
  } else if (op->reason == reason::timeout) {
    op->ec = errc::timed_out;
    bump(timed_out_);
  } else if (op->reason == reason::cancel) {
    op->ec = asio::error::operation_aborted;
    bump(cancelled_);
  } else if (op->reason == reason::shutdown) {
    op->ec = errc::shut_down;
    bump(failed_);
  } else {
    op->ec = op->core.native() ? op->core.native()->final_error(s) : state_error(s);
    bump(failed_);
  }
  op->core.release();  // final: the device let go (invariant 2)
  op->ph = run_op_base::phase::finished;
  op->next = nullptr;
  *done_tail_ = op;
  done_tail_ = &op->next;
}

void reactor::fail(run_op_base* op, std::error_code ec) noexcept {
  op->ec = ec;
  op->result = {};
  op->core.release();
  op->ph = run_op_base::phase::finished;
  op->next = nullptr;
  *done_tail_ = op;
  done_tail_ = &op->next;
}

void reactor::retain(run_op_base* op) noexcept {
  // Invariant 5: the native run, buffers, leases and budget charges stay.
  op->result = op->core.result(op->core.native() ? op->core.native()->state() : run_state::running);
  op->core.retain(op->ticket);
  op->ec = errc::abort_failed;
  bump(retained_);
  op->ph = run_op_base::phase::finished;
  op->next = nullptr;
  *done_tail_ = op;
  done_tail_ = &op->next;
}

void reactor::begin_abort(run_op_base* op, run_op_base::abort_reason why, clock::time_point now) noexcept {
  op->reason = why;
  op->ph = run_op_base::phase::aborting;
  op->abort_deadline = now + opts_.abort_grace;
  ++aborting_;
  try {
    op->ticket = std::make_shared<abort_ticket>();
    std::lock_guard lock(aborter_->mutex);
    aborter_->queue.emplace_back(op->core.native(), op->ticket);
    aborter_->add_worker_if_needed(aborter_);
  } catch (...) {
    // Cannot even queue the abort: the next scan retains the run (no
    // ticket reads as refused) and keeps everything (invariant 5).
    op->ticket.reset();
    return;
  }
  aborter_->cv.notify_one();
}

void reactor::intake(clock::time_point) noexcept {
  run_op_base* list = incoming_.exchange(nullptr, std::memory_order_acquire);
  // The stack is LIFO: reverse for FIFO.
  run_op_base* fifo = nullptr;
  while (list) {
    auto* n = list->next;
    list->next = fifo;
    fifo = list;
    list = n;
  }
  while (fifo) {
    auto* op = fifo;
    fifo = fifo->next;
    op->next = nullptr;
    switch (op->ph) {
      case run_op_base::phase::finished:  // rejected at submission
        bump(failed_);
        *done_tail_ = op;
        done_tail_ = &op->next;
        break;
      case run_op_base::phase::waiting:
        bump(submitted_);
        bump(in_flight_);
        *waiting_tail_ = op;
        waiting_tail_ = &op->next;
        retry_pending_.store(true, std::memory_order_relaxed);  // a release may have come first
        break;
      default:
        bump(submitted_);
        bump(in_flight_);
        op->predicted = predict(op);
        track(op);
        op->next = device_;
        device_ = op;
        break;
    }
  }
}

void reactor::handle_cancels() noexcept {
  using ct = asio::cancellation_type;
  // Waiting for leases: not on the device, so any cancellation withdraws it cleanly.
  for (run_op_base** p = &waiting_; *p;) {
    auto* op = *p;
    unsigned bits = op->cancel_bits.exchange(0, std::memory_order_acq_rel);
    if (bits) {
      *p = op->next;
      if (waiting_tail_ == &op->next) waiting_tail_ = p;
      op->core.withdraw(op);
      bump(cancelled_);
      bump(in_flight_, std::uint64_t(-1));
      fail(op, asio::error::operation_aborted);
      continue;
    }
    p = &op->next;
  }
  // On the device: only terminal or partial cancellation can be honoured,
  // by aborting; total cancellation promises no side effects, which a
  // started run cannot keep (invariant 4).
  auto now = clock::now();
  for (auto* op = device_; op; op = op->next) {
    unsigned bits = op->cancel_bits.exchange(0, std::memory_order_acq_rel);
    if (op->ph == run_op_base::phase::on_device &&
        (bits & static_cast<unsigned>(ct::terminal | ct::partial)))
      begin_abort(op, run_op_base::abort_reason::cancel, now);
  }
}

void reactor::retry_waiting() noexcept {
  for (run_op_base** p = &waiting_; *p;) {
    auto* op = *p;
    auto st = op->core.acquire(nullptr, &op->waiter);
    if (st == acquire_status::queued || st == acquire_status::conflict) {
      p = &op->next;
      continue;
    }
    *p = op->next;
    if (waiting_tail_ == &op->next) waiting_tail_ = p;
    if (st == acquire_status::retained) {
      op->core.withdraw(op);
      bump(in_flight_, std::uint64_t(-1));
      bump(failed_);
      fail(op, errc::range_retained);
      continue;
    }
    start_on_device(op);
    if (op->ph == run_op_base::phase::finished) {
      bump(in_flight_, std::uint64_t(-1));
      bump(failed_);
      op->next = nullptr;
      *done_tail_ = op;
      done_tail_ = &op->next;
      continue;
    }
    op->predicted = predict(op);
    track(op);
    op->next = device_;
    device_ = op;
  }
}

void reactor::track(run_op_base* op) noexcept {
  ++fresh_;
  auto* dev = op->core.kernel().context_state()->device.get();
  for (unsigned i = 0; i < tracked_count_; ++i)
    if (tracked_[i].dev == dev) {
      ++tracked_[i].runs;
      return;
    }
  if (tracked_count_ < max_tracked) tracked_[tracked_count_++] = {dev, 1};
  else ++untracked_;
}

void reactor::untrack(run_op_base* op) noexcept {
  auto* dev = op->core.kernel().context_state()->device.get();
  for (unsigned i = 0; i < tracked_count_; ++i)
    if (tracked_[i].dev == dev) {
      if (--tracked_[i].runs == 0) tracked_[i] = tracked_[--tracked_count_];
      return;
    }
  --untracked_;
}

// Whether this pass must scan the runs on the device. It need not when the
// last scan saw everything, nothing was added, no deadline or abort is due,
// and every device says none of its runs finished since.
//
// With many runs in flight a full scan is long and, started right after the
// previous one, finds few completions: polls per completion grow with the
// runs in flight. So a completion signal waits until the previous full scan
// is at least scan_gap old, about as long as a scan takes (8 ns per run,
// at most 50 us; far below the queueing delay at such depths).
bool reactor::scan_needed(clock::time_point now) noexcept {
  bool must = untracked_ > 0 || aborting_ > 0 || shutting_down_ || now >= scan_deadline_ ||
              now >= scan_giveup_;
  // Ask every device (clearing each indication) even when the answer is
  // known. Devices without a completion event are polled: scanned whenever
  // the gap allows (the caller paces passes with its backoff).
  bool polled = false;
  for (unsigned i = 0; i < tracked_count_; ++i) {
    auto* d = tracked_[i].dev;
    if (d->event_fd() < 0) polled = true;
    else if (d->take_completions()) signalled_ = true;
  }
  auto gap = std::chrono::nanoseconds(std::min<std::uint64_t>(8 * in_flight_.load(std::memory_order_relaxed), 50'000));
  if (must || ((signalled_ || polled) && now - last_full_scan_ >= gap)) {
    signalled_ = false;
    last_full_scan_ = now;
    return true;
  }
  return false;
}

namespace {
unsigned estimate_slot(const void* kernel, unsigned slots) noexcept {
  auto a = reinterpret_cast<std::uintptr_t>(kernel);
  return static_cast<unsigned>((a >> 4) ^ (a >> 12)) & (slots - 1);
}
}  // namespace

clock::time_point reactor::predict(const run_op_base* op) noexcept {
  // With many runs in flight predictions are not used (run()), so spare the
  // scans their bookkeeping.
  if (!opts_.predict_completions || in_flight_.load(std::memory_order_relaxed) > opts_.predict_max_in_flight)
    return clock::time_point::max();
  const void* k = &op->core.kernel().native();
  auto& e = estimates_[estimate_slot(k, estimate_slots)];
  if (e.kernel != k || e.ns <= 0 || e.ns > opts_.predict_max_run_time.count()) return clock::time_point::max();
  return op->core.submitted() + std::chrono::nanoseconds(std::max<std::int64_t>(e.ns - e.dev, 0));
}

std::chrono::nanoseconds reactor::prediction_spread(const run_op_base* op) const noexcept {
  const void* k = &op->core.kernel().native();
  auto& e = estimates_[estimate_slot(k, estimate_slots)];
  return std::chrono::nanoseconds(e.kernel == k ? 2 * e.dev : 0);
}

// A completed run's time on the device (its device completion timestamp when
// the backend has one, else when it was seen). The prediction is the mean
// less the mean deviation: early enough for most runs, as TCP's RTO estimator
// does the other way round. The mean falls faster than it rises (1/2 against
// 1/8): a prediction that comes late is worth nothing, so one slow run (a
// loaded host) must not spoil the next ones for long.
void reactor::learn(const run_op_base* op) noexcept {
  if (!opts_.predict_completions) return;
  auto t = (op->result.device_completed - op->result.submitted).count();
  if (t <= 0) return;
  const void* k = &op->core.kernel().native();
  auto& e = estimates_[estimate_slot(k, estimate_slots)];
  if (e.kernel != k) {
    e = {k, t, t / 4};
    return;
  }
  auto err = t - e.ns;
  e.ns += err < 0 ? err / 2 : err / 8;
  e.dev += ((err < 0 ? -err : err) - e.dev) / 4;
}

// One scan of the in-flight runs: final states, deadlines, aborts. Returns
// whether anything finished; lowers next_deadline to the nearest deadline.
bool reactor::poll(clock::time_point now, clock::time_point& next_deadline, run_op_base*& next_predicted) noexcept {
  bool any = false;
  std::uint64_t polls = 0;
  // Waiting runs can time out too.
  for (run_op_base** p = &waiting_; *p;) {
    auto* op = *p;
    if (op->deadline <= now) {
      *p = op->next;
      if (waiting_tail_ == &op->next) waiting_tail_ = p;
      op->core.withdraw(op);
      bump(timed_out_);
      bump(in_flight_, std::uint64_t(-1));
      fail(op, errc::timed_out);
      any = true;
      continue;
    }
    if (op->deadline < next_deadline) next_deadline = op->deadline;
    p = &op->next;
  }
  // Runs on the device: all of them, or only those added since the last
  // full scan (at the front of device_) when nothing else can have changed.
  bool full = scan_needed(now);
  unsigned limit = full ? ~0u : fresh_;
  fresh_ = 0;
  auto device_deadline = full ? clock::time_point::max() : scan_deadline_;
  auto giveup = full ? clock::time_point::max() : scan_giveup_;
  run_op_base* predicted = full ? nullptr : scan_predicted_;
  for (run_op_base** p = &device_; *p && limit; --limit) {
    auto* op = *p;
    auto* succ = op->next;  // finish/retain relink op into done_
    auto* native = op->core.native();
    bool done = false;
    if (op->ph == run_op_base::phase::on_device) {
      ++polls;
      run_state s = native->state();
      if (is_final(s)) {
        finish(op, s);
        done = true;
      } else if (op->deadline <= now) {
        begin_abort(op, run_op_base::abort_reason::timeout, now);
      } else if (shutting_down_) {
        begin_abort(op, run_op_base::abort_reason::shutdown, now);
      } else {
        if (op->deadline < device_deadline) device_deadline = op->deadline;
        if (op->predicted != clock::time_point::max()) {
          auto last = op->predicted + opts_.prediction_margin + prediction_spread(op);
          if (now > last) {
            op->predicted = clock::time_point::max();  // late: stop spinning for it
            bump(predictions_missed_);
          } else {
            if (last < giveup) giveup = last;
            if (!predicted || op->predicted < predicted->predicted) predicted = op;
          }
        }
      }
    }
    if (!done && op->ph == run_op_base::phase::aborting) {
      auto t = op->ticket ? op->ticket->get() : abort_ticket::refused;  // no ticket: could not even queue it
      ++polls;
      run_state s = native->state();
      if (t == abort_ticket::refused) {
        retain(op);
        done = true;
      } else if (t == abort_ticket::done && is_final(s)) {
        finish(op, s);
        done = true;
      } else if (now >= op->abort_deadline) {
        retain(op);  // abort past its grace period (invariant 5)
        done = true;
      } else if (op->abort_deadline < device_deadline) {
        device_deadline = op->abort_deadline;
      }
    }
    if (done) {
      *p = succ;
      if (predicted == op) predicted = nullptr;
      unlink(op);
      any = true;
      continue;
    }
    p = &op->next;
  }
  bump(polls_, polls);
  scan_deadline_ = device_deadline;  // a partial scan started from it: never later
  scan_giveup_ = giveup;
  scan_predicted_ = predicted;
  next_predicted = predicted;
  if (device_deadline < next_deadline) next_deadline = device_deadline;
  return any;
}

// Bookkeeping for a run leaving device_.
void reactor::unlink(run_op_base* op) noexcept {
  if (op->reason != run_op_base::abort_reason::none) --aborting_;
  untrack(op);
  bump(in_flight_, std::uint64_t(-1));
}

void reactor::flush_completions() noexcept {
  // Group by executor so a batch of coroutines on one executor costs one
  // post; keep order within a group.
  constexpr unsigned max_groups = 16;
  while (done_) {
    run_op_base* heads[max_groups];
    run_op_base** tails[max_groups];
    unsigned sizes[max_groups];
    unsigned groups = 0;
    run_op_base** rest = &done_;
    for (run_op_base* op = done_; op;) {
      run_op_base* n = op->next;
      unsigned g = 0;
      while (g < groups && !(sizes[g] < opts_.max_batch && heads[g]->vt().same_executor(heads[g], op))) ++g;
      if (g == groups && groups == max_groups) {  // leave for the next round
        *rest = op;
        rest = &op->next;
        op = n;
        continue;
      }
      op->batch_next = nullptr;
      if (g == groups) {
        heads[g] = op;
        tails[g] = &op->batch_next;
        sizes[g] = 1;
        ++groups;
      } else {
        *tails[g] = op;
        tails[g] = &op->batch_next;
        ++sizes[g];
      }
      op = n;
    }
    *rest = nullptr;
    for (unsigned g = 0; g < groups; ++g) {
      bump(batches_);
      heads[g]->vt().post_batch(heads[g]);
    }
  }
  done_tail_ = &done_;
}

// The devices of the runs in device_ are tracked_ already: sleep on their
// event fds when every one has one (and none went untracked).
bool reactor::collect_event_sources() noexcept {
  source_count_ = 0;
  bool all = device_ != nullptr && untracked_ == 0;
  for (unsigned i = 0; i < tracked_count_; ++i) {
    auto* dev = tracked_[i].dev;
    if (dev->event_fd() < 0) all = false;
    else sources_[source_count_++] = dev;
  }
  return all;
}

void reactor::sleep(clock::time_point until) noexcept {
  // Announce the sleep, then look again: a submitter either sees
  // sleeping_ and writes the eventfd, or we see its work here.
  sleeping_.store(true, std::memory_order_seq_cst);
  if (incoming_.load(std::memory_order_seq_cst) || cancel_pending_.load() || retry_pending_.load() ||
      stopping_.load()) {
    sleeping_.store(false, std::memory_order_relaxed);
    source_count_ = 0;
    return;
  }
  bump(sleeps_);
  bool forever = until == clock::time_point::max();
  auto now = clock::now();
  auto left = forever ? clock::duration::zero() : std::max(until - now, clock::duration::zero());
  __kernel_timespec kts{};
  timespec ts{};
  kts.tv_sec = ts.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(left).count();
  kts.tv_nsec = ts.tv_nsec = (left - std::chrono::seconds(kts.tv_sec)).count();
  bool woken = false;
  if (uring_) {
    if (!wake_armed_) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
      io_uring_sqe_set_data64(sqe, 1);
      wake_armed_ = true;
    }
    // Device polls are one-shot and tagged with this sleep's number; those
    // left armed by the previous sleep are removed in the same submission.
    ++sleep_seq_;
    for (unsigned i = 0; i < armed_count_; ++i) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) {
        io_uring_prep_poll_remove(sqe, armed_tags_[i]);
        io_uring_sqe_set_data64(sqe, 0);
      }
    }
    armed_count_ = 0;
    for (unsigned i = 0; i < source_count_; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (!sqe) break;
      std::uint64_t tag = (sleep_seq_ << 8) | (2 + i);
      io_uring_prep_poll_add(sqe, sources_[i]->event_fd(), POLLIN);
      io_uring_sqe_set_data64(sqe, tag);
      armed_tags_[armed_count_++] = tag;
    }
    // One io_uring_enter submits the polls and waits with a timeout. The
    // completions of removed polls also end a wait: wait again, for what is
    // left of the timeout, until a wake-up, a device event or the timeout.
    bool event = false;
    for (bool first = true;; first = false) {
      io_uring_cqe* cqe = nullptr;
      if (!first && !forever) {
        auto rest = until - clock::now();
        if (rest <= clock::duration::zero()) break;
        kts.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(rest).count();
        kts.tv_nsec = (rest - std::chrono::seconds(kts.tv_sec)).count();
      }
      int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, forever ? nullptr : &kts, nullptr);
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        std::uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == 1) {
          wake_armed_ = false;
          woken = true;
        } else if (tag >> 8 == sleep_seq_ && (tag & 0xff) >= 2 && cqe->res >= 0) {
          unsigned i = unsigned(tag & 0xff) - 2;
          for (unsigned j = 0; j < armed_count_; ++j)
            if (armed_tags_[j] == tag) armed_tags_[j] = armed_tags_[--armed_count_];
          if (i < source_count_) sources_[i]->consume_event();
          event = true;
        }
      }
      io_uring_cq_advance(&ring_, seen);
      if (woken || event || rc == -ETIME || (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)) break;
    }
  } else {
    pollfd pfd[1 + max_sources];
    pfd[0] = {wake_fd_, POLLIN, 0};
    for (unsigned i = 0; i < source_count_; ++i) pfd[1 + i] = {sources_[i]->event_fd(), POLLIN, 0};
    if (::ppoll(pfd, 1 + source_count_, forever ? nullptr : &ts, nullptr) > 0) {
      woken = pfd[0].revents != 0;
      for (unsigned i = 0; i < source_count_; ++i)
        if (pfd[1 + i].revents) sources_[i]->consume_event();
    }
  }
  sleeping_.store(false, std::memory_order_relaxed);
  signalled_ = true;  // the devices' events were consumed: take_completions() no longer tells
  source_count_ = 0;  // valid only while this sleep's runs kept their devices alive
  if (woken) {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
    bump(wakeups_);
  }
  wake_pending_.store(false, std::memory_order_release);
}

void reactor::enter_shutdown(clock::time_point now) noexcept {
  shutting_down_ = true;
  shutdown_deadline_ = now + opts_.shutdown_grace;
  // Runs still waiting for leases never reached the device: withdraw them.
  while (waiting_) {
    auto* op = waiting_;
    waiting_ = op->next;
    op->core.withdraw(op);
    bump(in_flight_, std::uint64_t(-1));
    bump(failed_);
    fail(op, errc::shut_down);
  }
  waiting_tail_ = &waiting_;
}

void reactor::run() noexcept {
  ::prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(std::max<std::int64_t>(1, opts_.timer_slack.count())), 0, 0,
          0);
  auto last_activity = clock::now();
  auto backoff = std::chrono::nanoseconds(std::chrono::microseconds(5));
  for (;;) {
    auto now = clock::now();
    bool activity = false;
    if (incoming_.load(std::memory_order_relaxed)) {
      intake(now);
      activity = true;
    }
    if (stopping_.load(std::memory_order_acquire) && !shutting_down_) enter_shutdown(now);
    if (cancel_pending_.exchange(false, std::memory_order_acq_rel)) handle_cancels();
    if (retry_pending_.exchange(false, std::memory_order_acq_rel)) retry_waiting();
    auto next_deadline = clock::time_point::max();
    run_op_base* predicted_op = nullptr;
    if (poll(now, next_deadline, predicted_op)) activity = true;
    // Fallback for backends whose state() does not advance by itself.
    if (opts_.refresh_interval.count() > 0 && device_ && now - last_refresh_ >= opts_.refresh_interval) {
      last_refresh_ = now;
      auto* op = device_;
      if (op->ph == run_op_base::phase::on_device) {
        try {
          op->core.native()->wait_for(opts_.refresh_wait);
        } catch (...) {
        }
      }
    }
    if (done_) {
      flush_completions();
      activity = true;
    }
    if (shutting_down_) {
      if (!device_ && !waiting_ && !incoming_.load()) break;
      if (now >= shutdown_deadline_) {
        // Past the grace period: keep what the device still holds.
        while (device_) {
          auto* op = device_;
          device_ = op->next;
          unlink(op);
          retain(op);
        }
        flush_completions();
        continue;
      }
    }
    if (activity) {
      last_activity = now;
      backoff = std::chrono::microseconds(5);
    }
    if (!device_ && !waiting_) {
      if (shutting_down_) continue;
      sleep(clock::time_point::max());  // idle: no timer at all
      last_activity = clock::now();
      continue;
    }
    if ((now - last_activity < opts_.spin_window || signalled_) && device_) {
      cpu_relax();  // signalled_: completions to scan for once scan_gap has passed
      continue;
    }
    // A run is predicted to finish within the wake-up lateness: poll for it
    // rather than pay a wake-up hop after it.
    // Only with few runs in flight: with many, completions come often enough
    // that event wake-ups are shared by batches and spinning would cost more.
    if (in_flight_.load(std::memory_order_relaxed) > opts_.predict_max_in_flight) predicted_op = nullptr;
    auto next_predicted = predicted_op ? predicted_op->predicted : clock::time_point::max();
    auto lead = std::chrono::nanoseconds(wake_lateness_ns_) + opts_.prediction_margin;
    if (next_predicted != clock::time_point::max() && next_predicted - lead <= now && !shutting_down_) {
      cpu_relax();
      continue;
    }
      // Devices that signal completions let the reactor sleep until they do
    // (bounded by max_poll_interval as a safety net); others are polled with
    // an exponential backoff.
    bool evented = collect_event_sources();
    auto step = evented ? std::chrono::nanoseconds(opts_.event_poll_interval) : backoff;
    auto until = std::min(next_deadline, device_ ? now + step : clock::time_point::max());
    if (shutting_down_) until = std::min(until, shutdown_deadline_);
    bool predicted_wake = false;
    if (next_predicted != clock::time_point::max() && next_predicted - lead < until) {
      until = next_predicted - lead;
      predicted_wake = true;
    }
    sleep(until);
    if (predicted_wake) {
      // Learn how late timed sleeps end (only those that ran to their time).
      auto late = (clock::now() - until).count();
      if (late >= 0) {
        bump(predicted_wakeups_);
        late = std::min<std::int64_t>(late, 1'000'000);
        wake_lateness_ns_ += (late - wake_lateness_ns_) / 8;
      }
    }
    backoff = std::min<std::chrono::nanoseconds>(backoff * 2, opts_.max_poll_interval);
  }
  stopped_.store(true, std::memory_order_release);
  // Anything submitted in the meantime is rejected from here on.
  intake(clock::now());
  while (device_) {  // started by a submitter racing the shutdown
    auto* op = device_;
    device_ = op->next;
    retain(op);
  }
  while (waiting_) {
    auto* op = waiting_;
    waiting_ = op->next;
    op->core.withdraw(op);
    fail(op, errc::shut_down);
  }
  flush_completions();
}

runtime_stats reactor::stats() const noexcept {
  runtime_stats s;
  s.submitted = submitted_.load(std::memory_order_relaxed);
  s.completed = completed_.load(std::memory_order_relaxed);
  s.failed = failed_.load(std::memory_order_relaxed);
  s.timed_out = timed_out_.load(std::memory_order_relaxed);
  s.cancelled = cancelled_.load(std::memory_order_relaxed);
  s.retained = retained_.load(std::memory_order_relaxed);
  s.in_flight = in_flight_.load(std::memory_order_relaxed);
  s.polls = polls_.load(std::memory_order_relaxed);
  s.wakeups = wakeups_.load(std::memory_order_relaxed);
  s.sleeps = sleeps_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.predicted_wakeups = predicted_wakeups_.load(std::memory_order_relaxed);
  s.predictions_missed = predictions_missed_.load(std::memory_order_relaxed);
  s.io_uring = uring_;
  return s;
}

// ---- entry points ------------------------------------------------------------

std::shared_ptr<reactor> reactor_for(const xrtio::kernel& k, const run_options& o) {
  if (o.runtime) return o.runtime->reactor();
  if (auto& r = k.context_state()->bound_reactor) return r;
  return default_runtime().reactor();
}
void reactor_submit(reactor& r, run_op_base* op) noexcept { r.submit(op); }
void reactor_reject(reactor& r, run_op_base* op, std::error_code ec) noexcept { r.reject(op, ec); }
void reactor_cancel(reactor& r, run_op_base* op, asio::cancellation_type t) noexcept { r.cancel(op, t); }

}  // namespace xrtio::detail

namespace xrtio {

runtime::runtime(runtime_options options) : reactor_(std::make_shared<detail::reactor>(options)) {}
runtime::~runtime() { reactor_->stop(); }
runtime_stats runtime::stats() const noexcept { return reactor_->stats(); }
const runtime_options& runtime::options() const noexcept { return reactor_->options(); }

runtime& default_runtime() {
  static runtime* rt = new runtime();  // never destroyed: see runtime.hpp
  return *rt;
}

void context::bind(runtime& rt) { state_->bound_reactor = rt.reactor(); }

}  // namespace xrtio
