// The sampling window shared by all contenders: completion and error counters,
// resume-latency samples, and the controller that measures one window of a
// cell (warm-up, runs/s, CPU per run and per thread role, allocations, memory).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xrtio/xrtio.hpp"

namespace bench {

using clk = std::chrono::steady_clock;

extern std::atomic<std::uint64_t> g_completed;  // runs completed (any time)
extern std::atomic<std::uint64_t> g_errors;
extern std::atomic<bool> g_measuring;
extern std::atomic<bool> g_stop;  // the workers stop when set (end of the window)
constexpr std::size_t sample_cap = std::size_t(1) << 22;
extern float* g_samples;  // resume latencies (us) recorded in the window
extern std::atomic<std::size_t> g_nsamples;

// Handlers that may be writing g_samples. The controller clears g_measuring
// and then waits for this to reach zero before it reads the samples: a
// handler that saw g_measuring == true just before the store must not write
// into the array while it is sorted (an introsort over changing elements can
// run past the array's end). Both sides are seq_cst, so either the handler
// sees the cleared flag or the controller sees the handler counted.
extern std::atomic<int> g_recording;

inline void record(const xrtio::run_result& r) noexcept {
  g_completed.fetch_add(1, std::memory_order_relaxed);
  if (!g_measuring.load(std::memory_order_relaxed)) return;  // cheap early out
  if (r.device_completed == clk::time_point{}) return;       // the backend does not know
  g_recording.fetch_add(1, std::memory_order_seq_cst);
  if (g_measuring.load(std::memory_order_seq_cst)) {
    auto us = std::chrono::duration<float, std::micro>(clk::now() - r.device_completed).count();
    std::size_t i = g_nsamples.fetch_add(1, std::memory_order_relaxed);
    if (i < sample_cap) g_samples[i] = us;
  }
  g_recording.fetch_sub(1, std::memory_order_release);
}

// Ends the sampling window: after this returns no handler writes g_samples
// until the next window opens.
void stop_sampling() noexcept;
inline void record_count_only() noexcept { g_completed.fetch_add(1, std::memory_order_relaxed); }

// One measured window of one cell (or, in a cell, the medians of its windows).
struct result {
  std::string contender;
  double latency_us = 0;
  int in_flight = 0;
  int effective = 0;  // runs actually in flight (blocking-threads: capped by threads)
  double runs_per_s = 0, p50 = NAN, p99 = NAN, p999 = NAN, cpu_us = 0, app_cpu_us = 0, rx_cpu_us = 0, dev_cpu_us = 0,
         allocs = 0, rss_per_run = 0, sleeps = 0;
  std::uint64_t runs = 0, errors = 0;
};

struct bench_opts {
  double warm_s = 0.15, window_s = 1.0;
  xrtio::runtime_options rt;  // --spin-us, --max-poll-us, --no-predict, --trace-capacity, --latency-histograms
  std::optional<std::chrono::nanoseconds> sim_idle_poll;  // --sim-idle-poll-us; unset: the sim's default
};
extern bench_opts g_opts;

void init_sampling();  // allocates g_samples, once
void reset_cell();     // clears the counters before a cell

// The controller (main thread): waits for the warm-up (every worker has
// completed at least one run, and warm_s passed), measures one window, stops.
// rss_before: resident bytes before the cell's device was made; B/run divides
// the growth by in_flight (when > 0) or else by effective.
result measure(int effective, std::size_t rss_before, int in_flight = -1);

// Median of the values that are not NaN (NaN when none is).
double median(std::vector<double> v);

}  // namespace bench
