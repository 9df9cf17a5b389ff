// xrtio-bench: measures xrtio's async_run on the simulated device.
//
//   xrtio-bench [--runs N] [--repeat R]
//
// Reports, as medians over R repetitions: runs per second at zero device
// latency (one io_context thread, 64 coroutines), completion-to-resume
// latency p50/p99 at 50 us device latency (device completion timestamp to
// the moment the coroutine resumes), heap allocations per run in steady
// state, CPU microseconds per run, and reactor wake-ups per second while
// idle. Baseline in the same run: `blocking-wait`, one thread per in-flight
// run blocking in run_handle::wait().
#include <sys/resource.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "xrtio/xrtio.hpp"

namespace {
std::atomic<std::uint64_t> g_allocs{0};
}
void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::aligned_alloc(static_cast<std::size_t>(a), (n + static_cast<std::size_t>(a) - 1) &
                                                                     ~(static_cast<std::size_t>(a) - 1)))
    return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(p * double(v.size())))];
}

struct sample {
  double runs_per_s, cpu_us_per_run, allocs_per_run, p50, p99;
};

// `workers` coroutines on one io_context each await `per` runs in a row.
sample run_xrtio(std::chrono::nanoseconds latency, int workers, int per) {
  xrtio::sim::device_config cfg;
  cfg.latency.fixed = latency;
  auto ctx = xrtio::sim::open(cfg);
  xrtio::runtime rt;
  ctx.bind(rt);
  auto k = ctx.kernel("noop");
  asio::io_context io(1);
  std::vector<double> resume;
  resume.reserve(std::size_t(workers) * per);
  std::uint64_t a0 = 0, a1 = 0;
  double c0 = 0, c1 = 0;
  clk::time_point t0, t1;
  int warm_done = 0;
  auto worker = [&](int) -> asio::awaitable<void> {
    for (int i = 0; i < 64; ++i) co_await xrtio::async_run(k, asio::use_awaitable);  // warm-up
    if (++warm_done == workers) {
      a0 = g_allocs.load();
      c0 = cpu_seconds();
      t0 = clk::now();
    }
    for (int i = 0; i < per; ++i) {
      auto r = co_await xrtio::async_run(k, asio::use_awaitable);
      auto now = clk::now();
      resume.push_back(std::chrono::duration<double, std::micro>(now - r.device_completed).count());
    }
  };
  for (int w = 0; w < workers; ++w) asio::co_spawn(io, worker(w), asio::detached);
  io.run();
  t1 = clk::now();
  c1 = cpu_seconds();
  a1 = g_allocs.load();
  double n = double(workers) * per;
  double secs = std::chrono::duration<double>(t1 - t0).count();
  sample s{n / secs, (c1 - c0) * 1e6 / n, double(a1 - a0) / n, pct(resume, 0.5), pct(resume, 0.99)};
  return s;
}

// Baseline: `workers` threads, each start() + wait() in a loop.
sample run_blocking(std::chrono::nanoseconds latency, int workers, int per) {
  xrtio::sim::device_config cfg;
  cfg.latency.fixed = latency;
  auto ctx = xrtio::sim::open(cfg);
  auto k = ctx.kernel("noop");
  std::vector<std::vector<double>> res(workers);
  auto c0 = cpu_seconds();
  auto a0 = g_allocs.load();
  auto t0 = clk::now();
  std::vector<std::thread> ts;
  for (int w = 0; w < workers; ++w)
    ts.emplace_back([&, w] {
      res[w].reserve(per);
      for (int i = 0; i < per; ++i) {
        auto h = xrtio::start(k);
        auto r = h.wait();
        res[w].push_back(std::chrono::duration<double, std::micro>(clk::now() - r.device_completed).count());
      }
    });
  for (auto& t : ts) t.join();
  auto t1 = clk::now();
  double n = double(workers) * per;
  std::vector<double> all;
  for (auto& r : res) all.insert(all.end(), r.begin(), r.end());
  return {n / std::chrono::duration<double>(t1 - t0).count(), (cpu_seconds() - c0) * 1e6 / n,
          double(g_allocs.load() - a0) / n, pct(all, 0.5), pct(all, 0.99)};
}

double idle_wakeups_per_s() {
  xrtio::runtime rt;
  auto ctx = xrtio::sim::open();
  ctx.bind(rt);
  asio::io_context io;
  asio::co_spawn(io, xrtio::async_run(ctx.kernel("noop"), asio::use_awaitable), asio::detached);
  io.run();
  std::this_thread::sleep_for(50ms);
  auto s0 = rt.stats();
  std::this_thread::sleep_for(1s);
  auto s1 = rt.stats();
  return double((s1.wakeups - s0.wakeups) + (s1.sleeps - s0.sleeps));
}
}  // namespace

int main(int argc, char** argv) {
  int runs = 20000, repeat = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: xrtio-bench [--runs N] [--repeat R]\n");
      return 2;
    }
  }
  std::printf("xrtio-bench: %d runs per cell, median of %d repetitions, %u cores\n\n", runs, repeat,
              std::thread::hardware_concurrency());
  std::printf("%-14s %-9s %-8s %12s %10s %10s %12s %12s\n", "contender", "latency", "in-fl.", "runs/s", "p50 us",
              "p99 us", "cpu us/run", "allocs/run");
  struct cell {
    const char* name;
    std::chrono::nanoseconds lat;
    int workers;
    bool blocking;
  };
  cell cells[] = {{"xrtio", 0ns, 64, false},       {"blocking-wait", 0ns, 64, true},
                  {"xrtio", 50us, 1, false},        {"blocking-wait", 50us, 1, true},
                  {"xrtio", 50us, 64, false},       {"blocking-wait", 50us, 64, true}};
  double xr0 = 0, bl0 = 0;
  for (auto& c : cells) {
    std::vector<double> rps, cpu, al, p50, p99;
    int per = std::max(1, runs / c.workers);
    for (int r = 0; r < repeat; ++r) {
      auto s = c.blocking ? run_blocking(c.lat, c.workers, per) : run_xrtio(c.lat, c.workers, per);
      rps.push_back(s.runs_per_s);
      cpu.push_back(s.cpu_us_per_run);
      al.push_back(s.allocs_per_run);
      p50.push_back(s.p50);
      p99.push_back(s.p99);
    }
    std::printf("%-14s %6lld us %8d %12.0f %10.1f %10.1f %12.2f %12.3f\n", c.name,
                static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(c.lat).count()),
                c.workers, median(rps), median(p50), median(p99), median(cpu), median(al));
    if (c.lat == 0ns) (c.blocking ? bl0 : xr0) = median(rps);
  }
  std::printf("\nthroughput ratio xrtio / blocking-wait at latency 0, 64 in flight: %.2f\n", bl0 > 0 ? xr0 / bl0 : 0);
  std::printf("idle reactor wake-ups + sleeps per second: %.0f\n", idle_wakeups_per_s());
  return 0;
}
