// The --io measurement window: counters, samples, and one window's figures.
#include "io_measure.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "alloc_count.hpp"
#include "process_usage.hpp"

using namespace std::chrono_literals;

namespace bench::io {

std::atomic<std::uint64_t> g_done{0};
std::atomic<std::uint64_t> g_failed{0};
std::atomic<std::uint64_t> g_verified{0};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_sampling{false};
float* g_lat = nullptr;
std::atomic<std::size_t> g_nlat{0};
std::atomic<int> g_writers{0};

void reset_cell() {
  if (!g_lat) {
    g_lat = static_cast<float*>(std::malloc(sample_cap * sizeof(float)));
    // Touched now, before any window: the kernel maps the array's pages at
    // first write, and a window that wrote them first would pay those faults
    // on its io thread (seen in a profile of the first contender, 1.8 % of
    // its thread's samples), which the contenders after it do not.
    if (g_lat) std::memset(g_lat, 0, sample_cap * sizeof(float));
  }
  g_done.store(0);
  g_failed.store(0);
  g_verified.store(0);
  g_stop.store(false);
  g_sampling.store(false);
  g_nlat.store(0);
}

namespace {

struct snapshot {
  clk::time_point t;
  std::uint64_t done, allocs;
  double cpu;
};
snapshot take() {
  snapshot s;
  s.cpu = process_cpu();
  s.allocs = allocations();
  s.done = g_done.load();
  s.t = clk::now();
  return s;
}

void stop_sampling() noexcept {
  g_sampling.store(false, std::memory_order_seq_cst);
  while (g_writers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::atomic_thread_fence(std::memory_order_acquire);
}

}  // namespace

io_result measure_window(double warm_s, double window_s, std::size_t request_bytes, std::uint64_t min_requests) {
  auto t0 = clk::now();
  auto warm = std::chrono::duration<double>(warm_s);
  while ((clk::now() - t0 < warm || g_done.load() == 0) && clk::now() - t0 < 10s && g_failed.load() == 0)
    std::this_thread::sleep_for(1ms);
  g_nlat.store(0);
  g_sampling.store(true);
  snapshot a = take();
  trace_allocations(true);  // XRTIO_BENCH_ALLOC_TRACE: the window's allocations, with their stacks
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  while (g_done.load() - a.done < min_requests && clk::now() - a.t < 10s && g_failed.load() == 0)
    std::this_thread::sleep_for(1ms);
  trace_allocations(false);
  snapshot b = take();
  stop_sampling();
  g_stop.store(true);

  io_result r;
  r.requests = b.done - a.done;
  double secs = std::chrono::duration<double>(b.t - a.t).count();
  double bytes = double(r.requests) * double(request_bytes);
  double gib = bytes / double(1ull << 30);
  r.iops = double(r.requests) / secs;
  r.gib_per_s = gib / secs;
  if (r.requests) {
    r.cpu_us_per_gib = (b.cpu - a.cpu) * 1e6 / gib;
    r.allocs_per_request = double(b.allocs - a.allocs) / double(r.requests);
  }
  std::size_t n = std::min(g_nlat.load(), sample_cap);
  if (n) {
    std::sort(g_lat, g_lat + n);
    auto at = [&](double p) { return double(g_lat[std::min(n - 1, std::size_t(p * double(n)))]); };
    r.p50_us = at(0.5);
    r.p99_us = at(0.99);
  }
  return r;
}

void finish_cell(io_result& r) {
  r.verified = g_verified.load();
  r.errors = g_failed.load();
}

}  // namespace bench::io
