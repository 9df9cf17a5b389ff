// The --io measurement window, shared by every I/O contender (and by the
// asio-file child process, so this file must not include Asio or xrtio):
// completion, error and verification counters, per-request latency samples,
// and the controller that measures one window of a cell.
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace bench::io {

using clk = std::chrono::steady_clock;

extern std::atomic<std::uint64_t> g_done;      // requests completed with the full byte count (any time)
extern std::atomic<std::uint64_t> g_failed;    // requests that failed, came up short, or read wrong data
extern std::atomic<std::uint64_t> g_verified;  // requests whose sampled words matched the file
extern std::atomic<bool> g_stop;               // the workers stop issuing when set (end of the window)
extern std::atomic<bool> g_sampling;           // inside the window: latencies are recorded
constexpr std::size_t sample_cap = std::size_t(1) << 22;
extern float* g_lat;  // latencies (us) of the window's requests
extern std::atomic<std::size_t> g_nlat;
// Recorders inside the sample array; the controller waits for 0 after it
// clears g_sampling and before it sorts (see measurement.hpp's g_recording).
extern std::atomic<int> g_writers;

// A request issued at `issued` completed now with `ok` (full count, data verified).
inline void complete(clk::time_point issued, bool ok) noexcept {
  if (!ok) {
    g_failed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  g_done.fetch_add(1, std::memory_order_relaxed);
  g_verified.fetch_add(1, std::memory_order_relaxed);
  if (!g_sampling.load(std::memory_order_relaxed)) return;
  g_writers.fetch_add(1, std::memory_order_seq_cst);
  if (g_sampling.load(std::memory_order_seq_cst)) {
    auto us = std::chrono::duration<float, std::micro>(clk::now() - issued).count();
    std::size_t i = g_nlat.fetch_add(1, std::memory_order_relaxed);
    if (i < sample_cap) g_lat[i] = us;
  }
  g_writers.fetch_sub(1, std::memory_order_release);
}

inline bool stopping() noexcept { return g_stop.load(std::memory_order_relaxed); }

// One window of one cell (or the medians of a cell's windows).
struct io_result {
  double gib_per_s = 0, iops = 0, cpu_us_per_gib = NAN, p50_us = NAN, p99_us = NAN, allocs_per_request = NAN;
  std::uint64_t requests = 0;  // in the window
  std::uint64_t verified = 0, errors = 0;  // over the whole cell (warm-up included)
  int effective_depth = 0;  // requests actually in flight at most (pread-thread: 1; pread-pool: min(depth, 4))
  bool direct = false;      // the file was read with O_DIRECT
};

// Clears the counters before a cell (allocates the sample array once).
void reset_cell();
// The controller: waits for the warm-up (warm_s passed and a request
// completed, at most 10 s), measures one window of window_s seconds (requests,
// process CPU time, allocations, latencies), then sets g_stop. The window is
// extended (its real length used) until at least min_requests completed in
// it, at most 10 s: completions can come in bursts of a whole queue depth
// (io_uring completes buffered reads of cached data inside the submitting
// call), and a short window could otherwise fall between two bursts. The
// caller joins its workers, then fills verified/errors with finish_cell().
io_result measure_window(double warm_s, double window_s, std::size_t request_bytes, std::uint64_t min_requests);
// After the workers stopped: the cell's verified and error counts.
void finish_cell(io_result& r);

}  // namespace bench::io
