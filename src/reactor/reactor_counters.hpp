// The reactor's statistics: written by the reactor thread alone (so a plain
// load + store, no locked read-modify-write), read from any thread by
// runtime::stats().
#pragma once

#include <atomic>
#include <cstdint>

#include "xrtio/runtime.hpp"

namespace xrtio::detail {

struct reactor_counters {
  using counter = std::atomic<std::uint64_t>;
  counter submitted{0}, completed{0}, failed{0}, timed_out{0}, cancelled{0}, retained{0}, in_flight{0}, polls{0},
      wakeups{0}, sleeps{0}, dozes{0}, batches{0}, predicted_wakeups{0}, predictions_missed{0}, file_reads{0}, file_writes{0},
      file_bytes_read{0}, file_bytes_written{0}, file_pieces{0}, file_cancels{0}, files_registered{0}, buffers_registered{0},
      registrations_refused{0}, pieces_fixed_file{0}, pieces_fixed_buffer{0}, pieces_to_workers{0}, file_submissions{0},
      spin_trials{0}, spin_switches{0};
  std::atomic<bool> spinning{true};

  // Written by submitting threads (file_try_inline) and by the threads that
  // flush gathered reads, so added atomically; snapshot() folds them into
  // the loop's counters.
  counter inline_reads{0}, inline_bytes{0}, inline_declined{0}, gathered_reads{0}, gathered_bytes{0},
      gathered_submissions{0};

  /// Single writer: adds without a locked instruction.
  static void bump(counter& c, std::uint64_t by = 1) noexcept {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  static void drop(counter& c) noexcept { bump(c, std::uint64_t(-1)); }

  runtime_stats snapshot() const noexcept {
    auto v = [](const counter& c) { return c.load(std::memory_order_relaxed); };
    runtime_stats s;
    s.submitted = v(submitted), s.completed = v(completed), s.failed = v(failed), s.timed_out = v(timed_out);
    s.cancelled = v(cancelled), s.retained = v(retained), s.in_flight = v(in_flight), s.polls = v(polls);
    s.wakeups = v(wakeups), s.sleeps = v(sleeps), s.dozes = v(dozes), s.batches = v(batches);
    s.predicted_wakeups = v(predicted_wakeups), s.predictions_missed = v(predictions_missed);
    s.file_reads = v(file_reads), s.file_writes = v(file_writes), s.file_bytes_read = v(file_bytes_read);
    s.file_bytes_written = v(file_bytes_written), s.file_pieces = v(file_pieces), s.file_cancels = v(file_cancels);
    s.file_registered_files = v(files_registered), s.file_registered_buffers = v(buffers_registered);
    s.file_registrations_refused = v(registrations_refused);
    s.file_pieces_fixed_file = v(pieces_fixed_file), s.file_pieces_fixed_buffer = v(pieces_fixed_buffer);
    s.file_pieces_to_workers = v(pieces_to_workers);
    s.file_submissions = v(file_submissions), s.file_inline_declined = v(inline_declined);
    s.spin_trials = v(spin_trials), s.spin_switches = v(spin_switches);
    // Inline and gathered reads never pass the loop: each is submitted,
    // completed and a finished read at once.
    auto in = v(inline_reads), ga = v(gathered_reads);
    s.submitted += in + ga, s.completed += in + ga, s.file_reads += in + ga;
    s.file_inline_reads = in, s.file_gathered_reads = ga;
    s.file_bytes_read += v(inline_bytes) + v(gathered_bytes);
    s.file_gathered_submissions = v(gathered_submissions);
    return s;
  }};

}  // namespace xrtio::detail
