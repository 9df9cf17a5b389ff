// The completion reactor (docs/DESIGN.md, "The reactor"): one thread per runtime
// that polls in-flight runs, enforces deadlines, runs aborts off its loop and
// hands completions to executors in batches.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace xrtio {

namespace detail {
class reactor;
struct access;
}

struct runtime_options {
  /// Keep polling without sleeping for up to this long after the last
  /// activity while runs are in flight. Adaptive: a spin that finds nothing
  /// halves the next one (down to none); activity within the window restores
  /// it (docs/DESIGN.md, "Adaptive spinning"). While recent runs took less
  /// than this on the device, the reactor also waits this long at most for
  /// the next submission after posting completions, and an io_context thread
  /// that submitted a run from one of its handlers lingers in its io_context
  /// for the completion ("The io thread lingers"). 0 = never spin or linger.
  std::chrono::nanoseconds spin_window = std::chrono::microseconds(40);
  /// Whether the reactor tries, now and then, the other way: one epoch of
  /// 20 ms without any spin or linger while it spins (or with them while it
  /// does not), keeping whichever finished more runs per second by 15 %
  /// over the epochs before and after. Which way is faster depends on the
  /// host: spinning saves wake-ups that are slow on idle cores, and takes
  /// cores that a busy host needs for the device's and the handlers'
  /// threads. Trials start after 4 epochs with at least 32 runs finished
  /// each, and grow up to 64 such epochs apart while they lose (docs/DESIGN.md,
  /// "Spin or sleep: a trial now and then"). runtime_stats::spin_trials,
  /// spin_switches and spinning show what it did. Reactor-thread mode only;
  /// false: always the spin above.
  bool spin_trials = true;
  /// While the handlers of runs it has completed have a backlog (posted to
  /// their executors and not yet begun: at least 2 x max_batch and 128, or a
  /// quarter of the runs in flight and unbegun if that is fewer, but at
  /// least 16), the reactor sleeps up to this long instead of spinning or
  /// polling: the handlers' threads are busy anyway, and the runs that
  /// finish meanwhile are handed over in fuller batches. It wakes early when
  /// the backlog falls to half that, for a cancellation, a lease release, an
  /// abort's end, file pool completions or the runtime's destruction, and
  /// dozes again only after half a batch of handlers began and, after two
  /// dozes in a row during which none began, only once handlers for half
  /// the backlog began (so a backlog nobody runs costs other clients a doze
  /// per backlog / 2 of their runs; below 2 x max_batch and 128, one doze in
  /// all, after which the full threshold applies until it falls). Meanwhile
  /// new submissions (from any thread; file transfers start only at its
  /// end), device completions and the deadlines of runs not yet taken in
  /// wait for its end (docs/DESIGN.md, "The reactor dozes while handlers are
  /// behind"). 1 ms: at thousands of runs in flight, 100 us let the reactor
  /// wake, pass and post between the handlers' drains (docs/PERFORMANCE.md,
  /// "A longer doze"). 0 = never.
  std::chrono::nanoseconds backlog_doze = std::chrono::milliseconds(1);
  /// Longest sleep between polls while runs are in flight on a device that
  /// offers no completion event (and a safety net when it does).
  std::chrono::nanoseconds max_poll_interval = std::chrono::milliseconds(1);
  /// While every run in flight is on a device that signals completions
  /// (backend event fd), the reactor sleeps until a signal, a deadline, or
  /// this safety interval.
  std::chrono::nanoseconds event_poll_interval = std::chrono::milliseconds(10);
  /// Timer slack of the reactor thread (PR_SET_TIMERSLACK): sleeps end this
  /// close to their deadline.
  std::chrono::nanoseconds timer_slack = std::chrono::microseconds(1);
  /// An abort that has not finished after this long retains the run (invariant 5).
  std::chrono::nanoseconds abort_grace = std::chrono::seconds(1);
  /// How long the runtime's destructor waits for in-flight runs to reach a
  /// final state (after aborting them) before retaining the rest.
  std::chrono::nanoseconds shutdown_grace = std::chrono::seconds(2);
  /// Fallback for backends whose state() alone does not advance: every
  /// refresh_interval, one bounded wait_for(refresh_wait) on the run at the
  /// head of the reactor's device list (the newest). 0 = off.
  std::chrono::nanoseconds refresh_interval{0};
  std::chrono::nanoseconds refresh_wait = std::chrono::milliseconds(1);
  /// Most completions handed to one executor in one batch.
  unsigned max_batch = 64;
  /// Predict when runs will finish from how long the same kernel's recent
  /// runs took (device completion time - start), and while they are due
  /// sleep only until shortly before the predicted time, then poll, instead
  /// of sleeping until the device signals. The completion is then seen
  /// without a wake-up hop, for a spin of the reactor's timer lateness plus
  /// prediction_margin per prediction. Off (the default): the reactor sleeps
  /// on the device's event (or its poll backoff) once its spin ends. Measured
  /// on a 2-core VM at 50 us runs, one in flight: 2-3x lower resume p50 when
  /// wake-ups are slow, ~2 us lower when they are fast, for 1.05-2.5x the CPU
  /// per run (docs/PERFORMANCE.md, "Completion prediction"): for latency
  /// first, prefer in-loop mode.
  bool predict_completions = false;
  /// Extra time added to the measured timer lateness when waking before a
  /// predicted completion; also how long past it the reactor keeps polling
  /// before it gives up on a prediction and sleeps.
  std::chrono::nanoseconds prediction_margin = std::chrono::microseconds(10);
  /// Predict only while at most this many runs are in flight on this runtime:
  /// with more, completions are frequent, event wake-ups serve whole batches,
  /// and spinning towards each prediction would cost more CPU than it saves.
  unsigned predict_max_in_flight = 4;
  /// Predict only for kernels whose runs take at most this long on average.
  /// The hop saved is a fixed few to tens of microseconds, while the polling
  /// before a prediction grows with the run time's spread and the host's
  /// timer lateness: measured on a 2-core VM, a 50 us kernel resumed 2.7x
  /// sooner (p50) for 5% more CPU, a 1 ms kernel no sooner for 2x the CPU.
  std::chrono::nanoseconds predict_max_run_time = std::chrono::microseconds(250);
  /// Wait on an io_uring ring (else eventfd + ppoll). Falls back by itself
  /// when io_uring is unavailable.
  bool use_io_uring = true;
  /// true: the runtime has its own reactor thread (the default mode).
  /// false: in-loop mode: no thread; xrtio::run(io, rt) drives the runtime
  /// from an io_context thread between its handlers (xrtio/inloop.hpp).
  bool reactor_thread = true;
  /// In-loop mode: while runs are in flight and no handler is ready, the
  /// driver keeps polling them for this long after the last activity before
  /// it sleeps (backing off up to max_poll_interval). The default covers
  /// kernels of up to predict_max_run_time: their completions are then seen
  /// within a poll, at the CPU cost of a shared-loop poller. Not while only
  /// file transfers on the io_uring are in flight: their completions wake
  /// the driver, which then sleeps at once.
  std::chrono::nanoseconds inloop_spin = std::chrono::microseconds(250);
  /// Record a timeline of the asynchronous runs (xrtio/trace.hpp) in a ring
  /// of this many events, allocated here, once; when it is full the oldest
  /// events are overwritten and counted as dropped. 0 (the default) = off:
  /// then recording costs one predictable branch per event site, no clock
  /// read, no atomic. On, it costs a few clock reads and atomics per run
  /// (docs/DESIGN.md, "Trace and metrics").
  std::size_t trace_capacity = 0;
  /// Keep the completion-to-resume histogram of xrtio/metrics.hpp: one clock
  /// read and an atomic add per run, on the handler's thread, just before
  /// the handler is called. Off by default (measured at 5-10% of the
  /// throughput with 4096 runs in flight); the device-time and lease-queueing
  /// histograms reuse the reactor's own stamps and are always kept.
  bool latency_histograms = false;
  /// File transfers (xrtio/file.hpp) on a ring of the runtime's own. false:
  /// always on the thread pool below, as where io_uring is refused (seccomp,
  /// old kernels, qemu-user): for tests, and for hosts that forbid io_uring.
  bool file_io_uring = true;
  /// Threads of the file thread pool (used only without io_uring), made at
  /// the first transfer.
  unsigned file_threads = 4;
};

/// How a runtime performs file transfers: not yet decided (no transfer
/// so far), on its io_uring ring, or on its pread/pwrite thread pool.
enum class file_io_path : std::uint8_t { none, io_uring, thread_pool };

struct runtime_stats {
  // Every run ends in exactly one of completed, failed, timed_out,
  // cancelled and retained. A run refused at submission (bad arguments, a
  // lease conflict under conflict_policy::fail, a runtime shutting down)
  // counts as failed and not as submitted.
  std::uint64_t submitted = 0;  ///< runs handed to the reactor
  std::uint64_t completed = 0;  ///< final state COMPLETED
  std::uint64_t failed = 0;     ///< ERROR (or ABORT, by the runtime's shutdown), or refused at submission
  std::uint64_t timed_out = 0;  ///< deadline passed, aborted
  std::uint64_t cancelled = 0;  ///< cancellation slot: withdrawn or aborted
  std::uint64_t retained = 0;   ///< abort refused or too slow (invariant 5)
  std::uint64_t in_flight = 0;  ///< now waiting for leases or on the device
  std::uint64_t polls = 0;      ///< state() calls
  std::uint64_t wakeups = 0;    ///< wake-ups by submitters or cancellations
  std::uint64_t sleeps = 0;     ///< times the reactor blocked (not counting dozes)
  std::uint64_t dozes = 0;      ///< sleeps while handlers had a backlog (runtime_options::backlog_doze)
  std::uint64_t batches = 0;    ///< completion batches posted to executors
  std::uint64_t predicted_wakeups = 0;  ///< timed sleeps ended early for a predicted completion
  std::uint64_t predictions_missed = 0;  ///< predictions given up (run still not final past the margin)
  /// Epochs run the other way (runtime_options::spin_trials), and how many
  /// of them won, turning the reactor's spinning off or back on.
  std::uint64_t spin_trials = 0;
  std::uint64_t spin_switches = 0;
  /// The reactor thread's waits spin now: false while a trial without
  /// spins runs or since one won, with spin_window 0, and in in-loop mode
  /// (no reactor thread).
  bool spinning = true;
  bool io_uring = false;        ///< the wait primitive is io_uring (else eventfd + ppoll)
  // File transfers (xrtio/file.hpp). They also count in submitted,
  // completed, failed, timed_out, cancelled, retained and in_flight above.
  file_io_path file_path = file_io_path::none;  ///< where they are performed
  std::uint64_t file_reads = 0;          ///< read transfers finished (any outcome; refused at submission: in failed only)
  std::uint64_t file_writes = 0;         ///< write transfers finished (any outcome; refused at submission: in failed only)
  std::uint64_t file_bytes_read = 0;     ///< bytes read by successful transfers
  std::uint64_t file_bytes_written = 0;  ///< bytes written by successful transfers
  std::uint64_t file_pieces = 0;         ///< requests handed to the ring or the pool
  std::uint64_t file_cancels = 0;        ///< pieces the reactor asked to cancel
  std::uint64_t file_inline_reads = 0;   ///< reads done on the caller's thread, whole or to the end of the file (file_options::inline_read_limit)
  /// Reads within inline_read_limit not done alone at once, because other
  /// candidate reads of the caller's context were in flight: those of up to
  /// 64 KiB gathered instead (below), or sent to the ring in in-loop mode,
  /// where their pieces share submissions; those of at least
  /// file_options::worker_read_min sent to the ring, whose pieces go to the
  /// kernel's workers. io_uring engine only: 0 on the thread pool.
  std::uint64_t file_inline_declined = 0;
  /// Declined reads done whole on a thread running their handlers' context,
  /// together: with a reactor thread, the reads a handler issues are
  /// gathered and, once it returns, read with one io_uring submission
  /// (RWF_NOWAIT) on that thread; a read not all cached goes to the ring.
  std::uint64_t file_gathered_reads = 0;
  std::uint64_t file_gathered_submissions = 0;  ///< the submissions that read them
  std::uint64_t file_submissions = 0;    ///< engine flushes that handed it pieces or cancellations (io_uring: one io_uring_submit each)
  // Registration with the ring (file_options::register_with_ring; io_uring only).
  std::uint64_t file_registered_files = 0;    ///< files registered with the ring (once per file)
  std::uint64_t file_registered_buffers = 0;  ///< buffers' memory registered as fixed buffers (once per allocation)
  std::uint64_t file_registrations_refused = 0;  ///< files or memory not registered: table full, refused, > 1 GiB
  std::uint64_t file_pieces_fixed_file = 0;      ///< pieces that named a registered file (IOSQE_FIXED_FILE)
  std::uint64_t file_pieces_fixed_buffer = 0;    ///< pieces into or from a fixed buffer (READ_FIXED, WRITE_FIXED)
  /// Read pieces handed to the kernel's io_uring workers
  /// (file_options::worker_read_min and worker_in_flight_min; IOSQE_ASYNC).
  std::uint64_t file_pieces_to_workers = 0;
};

/// Owns one reactor thread (or, with runtime_options::reactor_thread false,
/// none: xrtio::run drives it). Destroying it aborts what is in flight, waits up
/// to shutdown_grace, retains the rest, and never hangs. Runs find their
/// runtime through run_options::runtime, else the context's (context::bind),
/// else default_runtime().
class runtime {
 public:
  /// Errors: errc::invalid_option for a negative duration in `options`.
  explicit runtime(runtime_options options = {});
  ~runtime();
  runtime(const runtime&) = delete;
  runtime& operator=(const runtime&) = delete;

  runtime_stats stats() const noexcept;
  const runtime_options& options() const noexcept;
 private:
  friend struct detail::access;
  std::shared_ptr<detail::reactor> reactor_;
};

/// A process-wide runtime made on first use with default options, never
/// destroyed (its thread sleeps with no timer while idle).
runtime& default_runtime();

}  // namespace xrtio
