// The text report on stdout: preamble, host limits, the table, the ratios
// (throughput, and resume p50 against the host limits), the process summary.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "contenders.hpp"
#include "process_usage.hpp"
#include "report.hpp"

namespace bench {
namespace {

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "?";
  char line[512];
  std::string m = "?";
  while (std::fgets(line, sizeof line, f))
    if (!std::strncmp(line, "model name", 10)) {
      const char* c = std::strchr(line, ':');
      m = c ? c + 2 : line;
      while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
      break;
    }
  std::fclose(f);
  return m;
}

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void print_header() {
  std::printf("%-18s %5s %7s %7s %11s %9s %9s %9s %8s %7s %7s %7s %7s %8s %8s\n", "contender", "L us", "C", "eff.C",
              "runs/s", "p50 us", "p99 us", "p99.9 us", "cpu/run", "app", "reactor", "device", "sleeps", "allocs",
              "B/run");
}

void print_row(const cell& c) {
  auto& m = c.med;
  std::printf("%-18s %5ld %7d %7d %11s %9s %9s %9s %8s %7s %7s %7s %7s %8s %8s%s\n", c.contender.c_str(), c.latency_us, c.c,
              m.effective, fmt(m.runs_per_s, "%.0f").c_str(), fmt(m.p50, "%.1f").c_str(), fmt(m.p99, "%.1f").c_str(),
              fmt(m.p999, "%.1f").c_str(), fmt(m.cpu_us, "%.2f").c_str(), fmt(m.app_cpu_us, "%.2f").c_str(),
              fmt(m.rx_cpu_us, "%.2f").c_str(), fmt(m.dev_cpu_us, "%.2f").c_str(), fmt(m.sleeps, "%.2f").c_str(),
              fmt(m.allocs, "%.3f").c_str(),
              fmt(m.rss_per_run, "%.0f").c_str(), m.errors ? "  ERRORS" : "");
  std::fflush(stdout);
}

void print_sim_ratios(const std::vector<cell>& cells, const options& o) {
  for (const char* xn : {"xrtio", "xrtio-inloop"})
    for (long l : o.lats)
      for (long cc : o.cs) {
        auto* x = find_cell(cells, xn, l, int(cc));
        if (!x) continue;
        for (auto& n : o.contenders) {
          if (n == "xrtio" || n == "xrtio-inloop" || is_xrt_contender(n)) continue;
          auto* other = find_cell(cells, n, l, int(cc));
          if (!other || other->med.runs_per_s <= 0) continue;
          std::printf("  L=%4ld us C=%5ld  %-12s / %-16s throughput %7.2fx  cpu/run %7.2fx\n", l, cc, xn, n.c_str(),
                      x->med.runs_per_s / other->med.runs_per_s, x->med.cpu_us / std::max(1e-9, other->med.cpu_us));
        }
      }
}

void print_xrt_ratios(const std::vector<cell>& cells, const options& o) {
  const long d = o.xrt_delay_us;
  for (long cc : o.cs)
    for (const char* xn : {"xrtio@xrt", "xrtio-prepared@xrt", "xrtio-inloop@xrt"})
      for (const char* on : {"raw-xrt", "raw-xrt-wait"})
        if (auto *x = find_cell(cells, xn, d, int(cc)), *other = find_cell(cells, on, d, int(cc)); x && other)
          std::printf("  XRT no-op (%ld us) C=%5ld  %-18s / %-12s throughput %.3fx\n", d, cc, xn, on,
                      x->med.runs_per_s / std::max(1.0, other->med.runs_per_s));
}

}  // namespace

void print_preamble(const options& o, bool xrt) {
  unsigned ncores = std::thread::hardware_concurrency();
  std::printf("xrtio-bench: %s sweep, %u cores (%s), window %.2f s per cell, median of %d repetitions\n",
              o.quick ? "quick" : "full", ncores, cpu_model().c_str(), o.bench.window_s, o.repeat);
  std::printf("blocking-threads: at most %d threads; pool-offload: thread_pool of %d threads; sim device: 2 compute units\n",
              max_threads, pool_size());
  if (xrt)
    std::printf("XRT no-op device: completion delay %ld us, kernel vadd (3 read-only buffers + scalar)\n",
                o.xrt_delay_us);
  std::printf("cpu/run: process CPU us per run; app / reactor / device: the contender's own threads, the xrtio\n"
              "reactor thread, the simulated device's threads (us per run); sleeps: times any thread blocked,\n"
              "per run (voluntary context switches: each costs a wake-up); allocs: operator new calls per run;\n"
              "B/run: resident memory growth per in-flight run; p50/p99/p99.9: device completion -> code resumed\n\n");
}

void print_host_limits(const host_limits& h) {
  std::printf("host limits (median of %d samples each, measured before the sweep):\n", h.samples);
  std::printf("  spin_pingpong_p50_us      %8s  two threads spinning on two CPUs bounce one atomic: round trip\n",
              fmt(h.spin_pingpong_p50_us, "%.2f").c_str());
  std::printf("  eventfd_pingpong_p50_us   %8s  two threads on one CPU, blocked in read(), wake each other by eventfd:\n"
              "                                      round trip\n",
              fmt(h.eventfd_pingpong_p50_us, "%.2f").c_str());
  std::printf("  asio_post_sleeping_p50_us %8s  asio::post from a spinning thread into an io_context asleep in run()\n"
              "                                      on the same CPU: post -> handler runs\n",
              fmt(h.asio_post_sleeping_p50_us, "%.2f").c_str());
  std::printf("  (median of %d rounds each, every thread asleep before a round, not pinned:)\n", h.chain_samples);
  std::printf("  eventfd_wake_p50_us       %8s  one hop, as a thread blocked on its run pays it: a thread asleep in\n"
              "                                      read() on an eventfd runs once it is written (its CPU: %s us per\n"
              "                                      round, eventfd_wake_cpu_us)\n",
              fmt(h.eventfd_wake_p50_us, "%.2f").c_str(), fmt(h.eventfd_wake_cpu_us, "%.2f").c_str());
  std::printf("  relay_post_sleeping_p50_us %7s  two hops, as a completion reactor thread pays them: a thread asleep\n"
              "                                      in io_uring_enter on a poll of an eventfd wakes at its write, reads\n"
              "                                      it, posts into an io_context asleep in run(): write -> handler runs\n"
              "                                      (the two threads' CPU: %s us per round, relay_post_sleeping_cpu_us)\n",
              fmt(h.relay_post_sleeping_p50_us, "%.2f").c_str(), fmt(h.relay_post_sleeping_cpu_us, "%.2f").c_str());
  std::printf("  relay_one_core_p50_us     %8s  the same two hops with the three threads pinned to one CPU: no\n"
              "                                      wake-up lands on an idle core\n\n",
              fmt(h.relay_one_core_p50_us, "%.2f").c_str());
  if (!h.relay_not_measured.empty())
    std::printf("  relay_post_sleeping: not measured: %s\n\n", h.relay_not_measured.c_str());
  std::fflush(stdout);
}

void print_table(const std::vector<cell>& cells) {
  print_header();
  long last_l = -1;
  for (auto& c : cells) {
    if (c.reps.empty()) continue;
    if (c.latency_us != last_l && last_l != -1) std::printf("\n");
    last_l = c.latency_us;
    print_row(c);
  }
}

void print_ratios(const std::vector<cell>& cells, const options& o, bool xrt) {
  std::printf("\nratios (medians):\n");
  print_sim_ratios(cells, o);
  if (xrt) print_xrt_ratios(cells, o);
}

void print_limit_ratios(const std::vector<cell>& cells, const host_limits& h) {
  bool first = true;
  for (auto& c : cells) {
    if (c.reps.empty() || c.c != 1 || std::isnan(c.med.p50)) continue;
    if (first)
      std::printf("\nresume p50 at C = 1 against the host limits (p50 over asio_post_sleeping_p50_us, "
                  "relay_post_sleeping_p50_us,\neventfd_wake_p50_us and spin_pingpong_p50_us):\n");
    first = false;
    char where[48];
    if (is_xrt_contender(c.contender)) std::snprintf(where, sizeof where, "XRT no-op (%ld us)", c.latency_us);
    else std::snprintf(where, sizeof where, "L=%4ld us", c.latency_us);
    std::printf("  %-18s %-18s p50 %7.1f us  %6sx asio-post-sleeping  %6sx relay  %6sx wake  %7sx spin-pingpong\n",
                where, c.contender.c_str(), c.med.p50, fmt(c.med.p50 / h.asio_post_sleeping_p50_us, "%.2f").c_str(),
                fmt(c.med.p50 / h.relay_post_sleeping_p50_us, "%.2f").c_str(),
                fmt(c.med.p50 / h.eventfd_wake_p50_us, "%.2f").c_str(),
                fmt(c.med.p50 / h.spin_pingpong_p50_us, "%.1f").c_str());
  }
}

void print_process_summary(double idle_wakeups_per_s) {
  std::printf("\nidle reactor wake-ups + sleeps per second (runtime::stats()): %.1f\n", idle_wakeups_per_s);
  std::printf("peak RSS of the process: %.1f MiB\n", peak_rss_bytes() / 1048576.0);
}

}  // namespace bench
