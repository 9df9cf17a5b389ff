// The --io text report: preamble, table with the ratios, skipped cells, goals.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "io_contenders.hpp"
#include "io_report.hpp"

namespace bench::io {
namespace {

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

const char* cache_name(bool cold) { return cold ? "cold" : "hot"; }

}  // namespace

double bw_ratio_to_best(const std::vector<io_cell>& cells, const io_cell& c) {
  double best = 0;
  for (auto& o : cells)
    if (!o.reps.empty() && !is_reference(o.contender) && o.kind == c.kind && o.cold == c.cold && o.depth == c.depth)
      best = std::max(best, o.med.gib_per_s);
  return best > 0 ? c.med.gib_per_s / best : NAN;
}

// Over the best of the alternatives (neither xrtio mode, nor a reference row): the goal's ratio.
double bw_ratio_to_best_alternative(const std::vector<io_cell>& cells, const io_cell& c) {
  double best = 0;
  for (auto& o : cells)
    if (!o.reps.empty() && !is_reference(o.contender) && !is_xrtio(o.contender) && o.kind == c.kind &&
        o.cold == c.cold && o.depth == c.depth)
      best = std::max(best, o.med.gib_per_s);
  return best > 0 ? c.med.gib_per_s / best : NAN;
}

double cpu_ratio_to_pool(const std::vector<io_cell>& cells, const io_cell& c) {
  auto* p = find_io_cell(cells, "pread-pool", c.kind, c.cold, c.depth);
  return p && p->med.cpu_us_per_gib > 0 ? c.med.cpu_us_per_gib / p->med.cpu_us_per_gib : NAN;
}

double bw_ratio_to_host(const std::vector<io_cell>& cells, const io_cell& c) {
  auto* h = find_io_cell(cells, "raw-uring", c.kind, c.cold, c.depth);
  return h && h->med.gib_per_s > 0 ? c.med.gib_per_s / h->med.gib_per_s : NAN;
}

void print_io_preamble(const options& o, const test_file& f, double warm_s, double window_s) {
  std::printf("xrtio-bench --io: %s sweep, %u cores, warm-up %.2f s + window %.2f s per cell, median of %d "
              "repetitions\n",
              o.quick ? "quick" : "full", std::thread::hardware_concurrency(), warm_s, window_s, o.repeat);
  std::printf("test file: %s, %.0f MiB; hot: buffered, the file read through the page cache before each repetition; "
              "cold: O_DIRECT, aligned buffers\n",
              f.path.c_str(), double(f.size) / 1048576.0);
  if (o.io_worker_min >= 0)
    std::printf("xrtio: file_options::worker_read_min = %lld bytes (--io-worker-min)\n",
                static_cast<long long>(o.io_worker_min));
  if (o.io_worker_floor >= 0)
    std::printf("xrtio: file_options::worker_in_flight_min = %lld bytes (--io-worker-floor)\n",
                static_cast<long long>(o.io_worker_floor));
  if (o.io_inline_limit >= 0)
    std::printf("xrtio: file_options::inline_read_limit = %lld bytes (--io-inline-limit)\n",
                static_cast<long long>(o.io_inline_limit));
  bool wants_cold = std::find(o.io_caches.begin(), o.io_caches.end(), "cold") != o.io_caches.end();
  if (wants_cold && !f.direct_ok)
    std::printf("\n*** cold: skipped, no O_DIRECT reads in %s: %s ***\n\n", o.io_dir.c_str(),
                f.direct_reason.c_str());
  std::printf("pread-thread: one thread, blocking pread (one request in flight at any depth) into QD destinations in turn, "
              "as the others fill; pread-thread-1buf: the same into one buffer that stays in the CPU's cache; "
              "pread-post: pread on the io thread, completion posted through it (a bound: xrtio's cached reads minus "
              "the library's work); pread-pool: %d threads, "
              "depth requests outstanding from one io_context thread; asio-file: asio::random_access_file "
              "(io_uring), child process; raw-uring: bare liburing loop, the host limit\n",
              pool_threads);
  std::printf("cpu/GiB: process CPU us per GiB read (asio-file: the child's); p50/p99: request issued -> completion "
              "seen by the issuing thread; allocs/req: operator new calls per request; bw/best: bandwidth over the "
              "best contender's in the cell (raw-uring, pread-thread-1buf, pread-post excluded); cpu/pool: cpu/GiB over pread-pool's; bw/host: "
              "bandwidth over raw-uring's\n\n");
  std::fflush(stdout);
}

void print_io_table(const std::vector<io_cell>& cells) {
  std::printf("%-6s %-5s %4s %-17s %8s %10s %11s %9s %9s %9s %6s %7s %8s %7s\n", "case", "cache", "QD", "contender",
              "GiB/s", "IOPS", "cpu us/GiB", "p50 us", "p99 us", "allocs/req", "eff.QD", "bw/best", "cpu/pool",
              "bw/host");
  const io_cell* last = nullptr;
  for (auto& c : cells) {
    if (c.reps.empty()) continue;
    if (last && (last->kind != c.kind || last->cold != c.cold || last->depth != c.depth)) std::printf("\n");
    last = &c;
    auto& m = c.med;
    std::printf("%-6s %-5s %4d %-17s %8s %10s %11s %9s %9s %9s %6d %7s %8s %7s%s\n", case_name(c.kind),
                cache_name(c.cold), c.depth, c.contender.c_str(), fmt(m.gib_per_s, "%.3f").c_str(),
                fmt(m.iops, "%.0f").c_str(), fmt(m.cpu_us_per_gib, "%.0f").c_str(), fmt(m.p50_us, "%.1f").c_str(),
                fmt(m.p99_us, "%.1f").c_str(), fmt(m.allocs_per_request, "%.3f").c_str(), m.effective_depth,
                fmt(bw_ratio_to_best(cells, c), "%.2fx").c_str(), fmt(cpu_ratio_to_pool(cells, c), "%.2fx").c_str(),
                fmt(bw_ratio_to_host(cells, c), "%.2fx").c_str(),
                m.errors ? "  ERRORS" : (m.verified ? "" : "  NOT VERIFIED"));
  }
  bool first = true;
  for (auto& c : cells)
    if (!c.skipped.empty()) {
      if (first) std::printf("\nskipped:\n");
      first = false;
      std::printf("  %-17s %-6s %-4s QD=%-4d %s\n", c.contender.c_str(), case_name(c.kind), cache_name(c.cold),
                  c.depth, c.skipped.c_str());
    }
  std::fflush(stdout);
}

void print_io_goals(const std::vector<io_cell>& cells) {
  int bw_met = 0, bw_n = 0, cpu_met = 0, cpu_n = 0, alloc_met = 0, alloc_n = 0;
  std::printf("\nxrtio's goals (medians; bandwidth over the best of pread-thread, pread-pool, asio-file):\n");
  for (auto& c : cells) {
    if (c.reps.empty() || !is_xrtio(c.contender)) continue;
    double bw = bw_ratio_to_best_alternative(cells, c), cpu = cpu_ratio_to_pool(cells, c);
    bool alloc_ok = c.med.allocs_per_request == 0;
    ++alloc_n, alloc_met += alloc_ok;
    // A ratio with nothing to divide by (the alternatives, or pread-pool, not
    // among --contenders, or skipped) is no verdict: said so, and not counted.
    if (std::isnan(bw)) {
      std::printf("  %-12s %-6s %-4s QD=%-4d bandwidth not judged (no alternative ran in this cell)", c.contender.c_str(),
                  case_name(c.kind), cache_name(c.cold), c.depth);
    } else {
      bool bw_ok = bw >= 1.0;
      ++bw_n, bw_met += bw_ok;
      std::printf("  %-12s %-6s %-4s QD=%-4d bandwidth %6sx best (goal >= 1.0x: %s)", c.contender.c_str(),
                  case_name(c.kind), cache_name(c.cold), c.depth, fmt(bw, "%.2f").c_str(), bw_ok ? "met" : "MISSED");
    }
    if (c.depth == 128) {
      if (std::isnan(cpu)) {
        std::printf("  cpu/GiB not judged (pread-pool did not run)");
      } else {
        bool cpu_ok = cpu <= 0.5;
        ++cpu_n, cpu_met += cpu_ok;
        std::printf("  cpu/GiB %6sx pread-pool (goal <= 0.5x: %s)", fmt(cpu, "%.2f").c_str(), cpu_ok ? "met" : "MISSED");
      }
    }
    std::printf("  allocs/req %s (goal 0: %s)\n", fmt(c.med.allocs_per_request, "%.3f").c_str(),
                alloc_ok ? "met" : "MISSED");
  }
  if (!alloc_n) std::printf("  no xrtio cells ran\n");
  else
    std::printf("  met (both modes together): bandwidth %d of %d cells, CPU at QD 128 %d of %d, allocations %d of %d\n", bw_met, bw_n,
                cpu_met, cpu_n, alloc_met, alloc_n);
}

}  // namespace bench::io
