// The sampling window: the shared counters and samples, stop_sampling(), and
// measure(), which turns one window into a result.
#include "measurement.hpp"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "alloc_count.hpp"
#include "process_usage.hpp"

using namespace std::chrono_literals;

namespace bench {

std::atomic<std::uint64_t> g_completed{0};
std::atomic<std::uint64_t> g_errors{0};
std::atomic<bool> g_measuring{false};
std::atomic<bool> g_stop{false};
float* g_samples = nullptr;
std::atomic<std::size_t> g_nsamples{0};
std::atomic<int> g_recording{0};
bench_opts g_opts;

void stop_sampling() noexcept {
  g_measuring.store(false, std::memory_order_seq_cst);
  while (g_recording.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::atomic_thread_fence(std::memory_order_acquire);
}

void init_sampling() {
  g_samples = static_cast<float*>(std::malloc(sample_cap * sizeof(float)));
  // Touched now: the pages would otherwise be mapped at first write, inside
  // the first cell's windows (as in --io's sample array, io_measure.cpp).
  if (g_samples) std::memset(g_samples, 0, sample_cap * sizeof(float));
}

void reset_cell() {
  g_completed.store(0);
  g_errors.store(0);
  g_measuring.store(false);
  g_stop.store(false);
  g_nsamples.store(0);
  malloc_trim(0);
}

namespace {

struct snapshot {
  clk::time_point t;
  std::uint64_t completed, allocs;
  double cpu, sleeps;
  cpu_split threads;
};
snapshot take() {
  snapshot s;
  s.threads = thread_cpu();
  s.cpu = process_cpu();
  s.sleeps = process_sleeps();
  s.allocs = allocations();
  s.completed = g_completed.load();
  s.t = clk::now();
  return s;
}

// The snapshots at the window's ends and the resident bytes at its end.
struct window {
  snapshot a, b;
  double rss;
};

void wait_for_warm_up(int effective) {
  auto t_start = clk::now();
  auto warm = std::chrono::duration<double>(g_opts.warm_s);
  while (clk::now() - t_start < warm ||
         (g_completed.load() < std::uint64_t(effective) && clk::now() - t_start < 10s))
    std::this_thread::sleep_for(2ms);
}

// Opens the window, sleeps through it, closes it and tells the workers to stop.
window measure_window() {
  g_nsamples.store(0);
  g_measuring.store(true);
  window w;
  w.a = take();
  trace_allocations(true);
  std::this_thread::sleep_for(std::chrono::duration<double>(g_opts.window_s));
  trace_allocations(false);
  w.b = take();
  stop_sampling();
  w.rss = rss_bytes();
  g_stop.store(true);
  return w;
}

void per_run_costs(result& r, const window& w, std::size_t rss_before, int in_flight) {
  const snapshot &a = w.a, &b = w.b;
  r.runs = b.completed - a.completed;
  double n = double(std::max<std::uint64_t>(r.runs, 1));
  r.runs_per_s = double(r.runs) / std::chrono::duration<double>(b.t - a.t).count();
  r.cpu_us = (b.cpu - a.cpu) * 1e6 / n;
  r.app_cpu_us = (b.threads.app - a.threads.app) * 1e6 / n;
  r.rx_cpu_us = (b.threads.rx - a.threads.rx) * 1e6 / n;
  r.dev_cpu_us = (b.threads.dev - a.threads.dev) * 1e6 / n;
  r.allocs = double(b.allocs - a.allocs) / n;
  r.sleeps = (b.sleeps - a.sleeps) / n;
  r.rss_per_run = (w.rss - double(rss_before)) / double(std::max(in_flight > 0 ? in_flight : r.effective, 1));
}

// p50/p99/p99.9 of the window's resume samples (stop_sampling() has run).
void resume_percentiles(result& r) {
  std::size_t ns = std::min(g_nsamples.load(), sample_cap);
  if (!ns) return;
  std::sort(g_samples, g_samples + ns);
  auto at = [&](double p) { return double(g_samples[std::min(ns - 1, std::size_t(p * double(ns)))]); };
  r.p50 = at(0.5);
  r.p99 = at(0.99);
  r.p999 = at(0.999);
}

}  // namespace

result measure(int effective, std::size_t rss_before, int in_flight) {
  wait_for_warm_up(effective);
  window w = measure_window();
  result r;
  r.effective = effective;
  per_run_costs(r, w, rss_before, in_flight);
  resume_percentiles(r);
  return r;
}

double median(std::vector<double> v) {
  std::vector<double> f;
  for (double x : v)
    if (!std::isnan(x)) f.push_back(x);
  if (f.empty()) return NAN;
  std::sort(f.begin(), f.end());
  return f.size() % 2 ? f[f.size() / 2] : 0.5 * (f[f.size() / 2 - 1] + f[f.size() / 2]);
}

}  // namespace bench
