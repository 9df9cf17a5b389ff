// The completion reactor: one thread per runtime that observes in-flight
// runs, enforces deadlines, has aborts run off its loop and hands completions
// to executors in batches (docs/DESIGN.md, "The reactor"; invariants 1-5).
// Its pieces: the wait primitive, the aborter, the device tracker, the
// completion predictor and the executor batcher, each in its own file.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "aborter.hpp"
#include "completion_predictor.hpp"
#include "device_tracker.hpp"
#include "file_engine.hpp"
#include "memory/lease_batch.hpp"
#include "observe/run_observer.hpp"
#include "reactor_counters.hpp"
#include "resubmit_policy.hpp"
#include "spin_policy.hpp"
#include "spin_regime.hpp"
#include "intake_queue.hpp"
#include "util/intrusive_queue.hpp"
#include "util/saturating_deadline.hpp"
#include "wait_primitive.hpp"
#include "xrtio/file.hpp"  // with detail/file_op.hpp
#include "xrtio/detail/run_op.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio::detail {

class reactor final : public access_listener {
  // tests/test_intake_queue.cpp: holds a slot of incoming_ claimed and never
  // published, as a submitter preempted between the two steps would.
  friend struct reactor_test_access;

 public:
  using clock = std::chrono::steady_clock;

  explicit reactor(runtime_options o);
  ~reactor();

  // Any thread.
  bool submit(run_op_base* op) noexcept;                        // reactor.cpp; reactor_submit
  at_once_outcome read_at_once(run_op_base* op, completion_registry& reg) noexcept;  // reactor_files.cpp
  void ungather(run_op_base* op) noexcept;                                          // reactor_files.cpp
  void reject(run_op_base* op, std::error_code ec) noexcept;   // reactor.cpp
  void cancel(run_op_base* op, asio::cancellation_type t) noexcept;
  void access_released() noexcept override;
  void stop() noexcept;  // reactor_shutdown.cpp
  runtime_stats stats() const noexcept;
  const runtime_options& options() const noexcept { return opts_; }
  /// Completions posted to handlers' executors, and batches of them begun
  /// (run_op's batch_fn): the backlog that lets the loop doze. Any thread.
  /// Not counted where the loop never dozes (in-loop mode, backlog_doze 0):
  /// both sides ask the same fixed options, so the count stays balanced.
  void handlers_queued(std::size_t n) noexcept {
    if (counts_backlog_)
      queued_handlers_.fetch_add(static_cast<std::int64_t>(n), std::memory_order_relaxed);
  }
  void handlers_begun(std::size_t n) noexcept;
  /// Whether submitters should linger for their runs (io_linger.hpp). Any thread.
  bool short_runs() const noexcept { return short_runs_.load(std::memory_order_relaxed); }
  // Trace and metrics (src/observe/): read from any thread.
  const run_metrics& metrics() const noexcept { return metrics_; }
  const run_observer* observer() const noexcept { return observer_.get(); }

  // In-loop mode (runtime_options::reactor_thread false; inloop.cpp): the
  // reactor has no thread and one driver thread at a time runs its passes
  // between the handlers of an io_context.
  bool driven() const noexcept { return !opts_.reactor_thread; }
  struct drive_result {
    bool activity = false;  // new runs, finished runs or completions posted
    bool busy = false;      // runs waiting for leases or on the device
    bool polled = false;    // runs on the device: only polling sees them end
    clock::time_point next_deadline = clock::time_point::max();
    // The pass made the file engine, and it is a ring: the driver sets up
    // its watch of file_watch_fd()'s descriptor now, ahead of the first ring
    // piece (file_watch::prepare), so that piece allocates nothing.
    bool file_ring_made = false;
  };
  /// One pass at `now`, without resting (the driver rests by running handlers).
  drive_result drive(clock::time_point now) noexcept;
  /// The driver is about to block: returns false (and stays awake) when a
  /// request arrived meanwhile. While blocked, wake() calls `waker`.
  bool block_begin() noexcept;
  void block_end() noexcept;
  /// The descriptor the driver watches while it blocks so that a file ring
  /// completion ends the block (the wake eventfd the ring writes), or -1
  /// when no ring piece is in flight.
  int file_watch_fd() const noexcept;
  /// That descriptor whether or not pieces are in flight, once the file
  /// engine is a ring; -1 before it is made, or on the thread pool.
  int file_ring_fd() const noexcept;
  /// Installs (or, with null, removes) the driver's waker. Fails with
  /// errc::busy when another driver is attached.
  void attach_driver(void (*waker)(void*), void* ctx);

  // Reads gathered on a caller's thread (gathered_reads.cpp), from the
  // thread that flushes them: a read's outcome (true: finished here, to be
  // posted; false: handed to the loop), and a submission that read some.
  bool file_gathered(file_op_base* f, int res) noexcept;
  void count_gathered_submission() noexcept;

 private:
  using op_list = intrusive_queue<run_op_base, &run_op_base::next>;

  // What one scan of the runs found (reactor_scan.cpp).
  struct scan_result {
    bool finished = false;                                  // a run reached the done list
    clock::time_point next_deadline = clock::time_point::max();
    run_op_base* next_predicted = nullptr;                  // the earliest prediction still due
  };
  // How the loop paces itself between passes.
  struct pacing {
    clock::time_point last_activity;
    std::chrono::nanoseconds backoff;
    bool in_flight = false;  // runs were on the device while resting since last_activity
    bool missed = false;     // a spin since last_activity ran out (spin_policy::missed)
    // When the pass at last_activity posted run completions (empty: it did
    // not). The spin for the next submission, and what it learns when one
    // comes, count from here, not from last_activity, which a sleep moves.
    clock::time_point posted_at{};
    bool posted_missed = false;  // the spin for the next submission ran out
    // rest() dozed (or meant to) since last_activity: a doze that found
    // nothing new is not repeated, so handlers that never run (an io_context
    // no longer run) do not keep the loop waking every backlog_doze.
    bool dozed = false;
  };

  // reactor.cpp: intake and the loop.
  struct pass_result {
    bool exit = false;   // shutdown finished: the loop ends
    bool again = false;  // pass again at once (shutdown retained runs)
    bool activity = false;
    scan_result found;
  };
  pass_result pass(clock::time_point now) noexcept;
  void push(run_op_base* op) noexcept;
  void complete_orphans() noexcept;
  run_op_base* take_after_stop() noexcept;
  void admit(run_op_base* op) noexcept;
  void wake() noexcept;
  void raise(std::atomic<bool>& flag) noexcept;
  void announce_sleep() noexcept;
  void wake_driver() noexcept;
  void run() noexcept;
  bool take_requests(clock::time_point now) noexcept;
  bool requested() const noexcept;
  void intake() noexcept;
  void rest(clock::time_point now, const scan_result& found, pacing& pace) noexcept;
  void publish_short_runs() noexcept;
  void try_regime(clock::time_point now) noexcept;
  bool doze(clock::time_point now, const scan_result& found) noexcept;
  void end_doze() noexcept;
  void sleep(clock::time_point until, std::span<backend::native_device* const> sources = {}) noexcept;
  void refresh_head(clock::time_point now) noexcept;
  void start_on_device(run_op_base* op) noexcept;
  void to_device(run_op_base* op) noexcept;

  // Trace events: one branch when not tracing (then no clock read, no atomic).
  void trace_at(trace_event_kind k, const run_op_base* op, clock::time_point t, std::uint8_t detail = 0) noexcept {
    if (trace_) [[unlikely]]
      trace_->record(k, op->run_id, t, detail);
  }
  void trace_now(trace_event_kind k, const run_op_base* op, std::uint8_t detail = 0) noexcept {
    if (trace_) [[unlikely]]
      trace_->record(k, op->run_id, clock::now(), detail);
  }
  /// The trace's detail byte: the run's state, and whether it failed.
  static std::uint8_t outcome(const run_op_base* op) noexcept {
    return static_cast<std::uint8_t>(static_cast<unsigned>(op->result.state) | (op->ec ? 0x80u : 0u));
  }
  void observe_submit(run_op_base* op) noexcept;

  // reactor_scan.cpp: observing runs on the device.
  scan_result scan(clock::time_point now) noexcept;
  bool scan_needed(clock::time_point now) noexcept;
  bool check_on_device(run_op_base* op, clock::time_point now, scan_result& r, clock::time_point& giveup) noexcept;
  bool check_aborting(run_op_base* op, clock::time_point now, scan_result& r) noexcept;
  void begin_abort(run_op_base* op, run_op_base::abort_reason why, clock::time_point now) noexcept;
  void leave_device(run_op_base* op) noexcept;
  void finish(run_op_base* op, run_state s) noexcept;
  void fail(run_op_base* op, std::error_code ec) noexcept;
  void retain(run_op_base* op) noexcept;
  void flush_completions(clock::time_point seen = {}) noexcept;

  // reactor_leases.cpp: runs waiting for their leases.
  void cancel_runs() noexcept;
  void retry_waiting() noexcept;
  bool expire_waiting(clock::time_point now, clock::time_point& next_deadline) noexcept;
  void withdraw_waiting(run_op_base* op, std::error_code ec) noexcept;

  // reactor_files.cpp: file transfers (file_op_base ops).
  void file_begin(run_op_base* op) noexcept;
  bool file_try_inline(run_op_base* op) noexcept;
  bool declined(const file_op_base& f, std::size_t candidates) const noexcept;
  enum class cached_read : std::uint8_t { none, part, done };
  cached_read read_cached(file_op_base* f) noexcept;
  std::size_t file_confirm_end(file_op_base* f, std::size_t got) noexcept;
  bool file_done_on_caller(file_op_base* f, std::size_t got, reactor_counters::counter& reads,
                           reactor_counters::counter& bytes) noexcept;
  bool to_loop(file_op_base* f) noexcept;
  at_once_outcome gather_early(file_op_base* f, completion_registry& reg, bool counted) noexcept;
  void file_intake(run_op_base* op) noexcept;
  bool file_engine_ready() noexcept;
  void file_prepare() noexcept;
  // Whether the file engine is, or once made will be, the io_uring ring. Any thread.
  bool file_engine_is_ring() const noexcept;
  void file_register(file_op_base* f) noexcept;
  void file_pump(file_op_base* f) noexcept;
  void file_stop(file_op_base* f, run_op_base::abort_reason why) noexcept;
  void file_piece_done(file_piece* p) noexcept;
  bool file_scan(clock::time_point now, clock::time_point& next_deadline) noexcept;
  void file_complete(file_op_base* f) noexcept;
  void file_cancel(clock::time_point now) noexcept;
  void file_shutdown() noexcept;
  void file_retain_all() noexcept;
  file_piece* take_piece();
  void give_piece(file_piece* p) noexcept;

  // reactor_shutdown.cpp.
  void enter_shutdown(clock::time_point now) noexcept;
  enum class shutdown_step { go_on, again, exit };
  shutdown_step shutdown_progress(clock::time_point now) noexcept;
  void drain_after_stop() noexcept;

  runtime_options opts_;
  // Read by every submission and never written after construction. Only
  // when tracing or keeping latency histograms (runtime_options).
  std::unique_ptr<run_observer> observer_ = run_observer::make(opts_);
  trace_ring* const trace_ = observer_ ? observer_->trace() : nullptr;
  // Any thread. Every submission writes incoming_ and reads sleeping_; the
  // loop reads sleeping_'s line only on its passes.
  intake_queue<run_op_base, &run_op_base::next, &run_op_base::intake_pos> incoming_;
  // Takers of incoming_ once the loop has stopped (stopped_): its last
  // intake and late submitters' complete_orphans(), which may overlap.
  std::mutex orphans_mutex_;
  alignas(64) std::atomic<bool> sleeping_{false};
  std::atomic<bool> wake_pending_{false};
  // resubmit_.short_runs() as of the last pass that completed runs, and
  // false while regime_ does not spin, for submitters (io_linger.cpp);
  // written only when it changes (publish_short_runs). Reactor-thread mode
  // only: in-loop the driver is the io thread.
  std::atomic<bool> short_runs_{false};
  // Completions the loop posted and their handlers have not yet begun
  // (added by the loop, taken off by the handlers' threads, once per batch
  // each side; batches posted on other threads are not counted: run_op's
  // post_batch), and whether the loop dozes on that backlog
  // (rest(); cleared by whoever ends the doze, so one notify per doze).
  const bool counts_backlog_ = opts_.reactor_thread && opts_.backlog_doze.count() > 0;
  alignas(64) std::atomic<std::int64_t> queued_handlers_{0};
  std::atomic<std::uint64_t> handlers_begun_{0};  // ever, for the doze's progress rule
  std::atomic<bool> dozing_{false};
  // The backlog below which the current doze ends (half the one that began
  // it; doze_high in reactor.cpp): set by the loop before it dozes, read by
  // the handlers' threads.
  std::atomic<std::int64_t> doze_low_{0};
  // Set by the loop when a doze at a reduced threshold (below two batches)
  // slept its whole backlog_doze: that doze's end mark, below which the
  // backlog must fall (seen by the loop or a handlers' thread, which clear
  // it) before reduced thresholds apply again (reactor::doze). 0: none.
  std::atomic<std::int64_t> stuck_low_{0};
  // Loop only: handlers_begun_ when the last doze began (none yet: any).
  std::optional<std::uint64_t> begun_at_doze_;
  // The backlog when the last doze that slept began, and how many dozes in
  // a row stalled (slept their whole backlog_doze while fewer than half a
  // batch of handlers began; from two on, the next waits for half that
  // backlog's handlers). Loop only.
  std::int64_t backlog_at_doze_ = 0;
  unsigned doze_stalls_ = 0;
  // Rarely set (cancellations, lease releases, stop), read on every pass.
  alignas(64) std::atomic<bool> cancel_pending_{false};
  std::atomic<bool> retry_pending_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  wait_primitive waiter_;
  reactor_counters counters_;
  // Written by the loop at every completion: on cache lines of their own,
  // apart from what submitters read.
  alignas(64) run_metrics metrics_;
  // Reactor thread only:
  op_list waiting_;  // for leases, FIFO
  op_list device_;   // on the device or aborting; newest first
  op_list done_;     // final this pass, in order
  // The leases of runs in done_, released together before they are posted
  // (flush_completions): one lock per buffer per pass, not per run.
  lease_batch leases_;
  device_tracker devices_;
  completion_predictor predictor_{opts_};
  spin_policy spin_{opts_.spin_window};
  // The spin after posting completions with nothing left on the device,
  // for the submissions their handlers make next (rest()); adapted apart
  // from spin_, whose events are the device's.
  resubmit_policy resubmit_{opts_.spin_window};
  // Whether the waits above spin at all, tried both ways now and then
  // (spin_regime.hpp). Reactor-thread mode only.
  spin_regime regime_{opts_.spin_trials && opts_.spin_window.count() > 0 && opts_.reactor_thread};
  std::uint64_t finished_ = 0;  // runs posted by flush_completions, for regime_
  bool run_posted_ = false;  // flush_completions posted completions since run() last looked
  unsigned aborting_ = 0;   // runs in device_ with an abort under way
  unsigned fresh_ = 0;      // runs added to the front of device_ since the last scan
  bool signalled_ = false;  // a device reported completions not scanned for yet
  clock::time_point last_full_scan_{};
  // What the last full scan saw: the earliest deadline and prediction, and
  // when the earliest prediction is to be given up.
  clock::time_point scan_deadline_ = clock::time_point::max();
  clock::time_point scan_giveup_ = clock::time_point::max();
  run_op_base* scan_predicted_ = nullptr;
  bool shutting_down_ = false;
  clock::time_point shutdown_deadline_{};
  clock::time_point last_refresh_{};
  std::shared_ptr<aborter> aborter_;
  std::thread thread_;
  // In-loop mode: the driver's waker (called instead of the wait
  // primitive's notify while the driver blocks) and whether one is attached.
  std::mutex driver_mutex_;
  void (*driver_waker_)(void*) = nullptr;  // set while a driver is in xrtio::run
  void* driver_ctx_ = nullptr;
  // File transfers. Loop only, but for file_ready_ (set by pool workers)
  // and file_path_ (read by stats() and file_try_inline).
  op_list files_;  // leased transfers with pieces to issue or in flight
  bool file_dirty_ = false;  // something changed: look at every transfer
  bool file_posted_ = false;  // file_complete posted a transfer since rest() last found the spin budget spent: spin, as while in flight
  clock::time_point file_deadline_ = clock::time_point::max();
  unsigned pieces_live_ = 0;
  std::size_t copy_bytes_live_ = 0;  // bytes of buffered read pieces in flight (file_options::worker_in_flight_min)
  file_piece* free_pieces_ = nullptr;
  std::vector<std::unique_ptr<file_piece[]>> piece_blocks_;
  bool file_engine_kept_ = false;  // retained transfers: the engine and pieces outlive the reactor
  std::atomic<bool> file_ready_{false};
  std::atomic<std::uint8_t> file_path_{0};
  // The loop's engine and its first pieces are made ahead of the first
  // transfer that needs them: asked for (file_prepare_, raised once) by the
  // first read finished on a caller's thread, and set (file_prepared_) by
  // the loop once done, or once it gave up (file_done_on_caller, file_prepare).
  std::atomic<bool> file_prepare_{false};
  std::atomic<bool> file_prepared_{false};
  bool file_ring_made_ = false;  // the loop's: reported once by drive()
  // Last: destroyed first, so that pool workers (which call wake()) are
  // joined while the rest of the reactor exists.
  std::unique_ptr<file_engine> file_engine_;
};

}  // namespace xrtio::detail
