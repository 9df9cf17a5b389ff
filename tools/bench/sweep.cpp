// Building the cells, running the repetitions over them, and the medians.
#include "sweep.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "cell_watchdog.hpp"
#include "contenders.hpp"

namespace bench {
namespace {

void run_cell(cell& c) {
  reset_cell();
  cell_watchdog_enter(c.contender + " L=" + std::to_string(c.latency_us) + " C=" + std::to_string(c.c));
  struct leave {
    ~leave() { cell_watchdog_leave(); }
  } on_exit;
  auto lat = std::chrono::microseconds(c.latency_us);
  result r;
  try {
    auto run = run_contender(c.contender, lat, c.c);
    if (!run) return;  // no such contender in this build
    r = *run;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s L=%ld C=%d: %s\n", c.contender.c_str(), c.latency_us, c.c, e.what());
    r.errors = 1;
  }
  r.contender = c.contender;
  r.latency_us = double(c.latency_us);
  r.in_flight = c.c;
  r.errors += g_errors.load();
  c.reps.push_back(r);
}

result median_of(const std::vector<result>& v) {
  result m = v.front();
  auto med = [&](double result::*f) {
    std::vector<double> x;
    for (auto& r : v) x.push_back(r.*f);
    return median(x);
  };
  for (double result::*f : {&result::runs_per_s, &result::p50, &result::p99, &result::p999, &result::cpu_us,
                            &result::app_cpu_us, &result::rx_cpu_us, &result::dev_cpu_us, &result::allocs,
                            &result::rss_per_run, &result::sleeps})
    m.*f = med(f);
  m.errors = 0;
  for (auto& r : v) m.errors += r.errors;
  return m;
}

}  // namespace

std::vector<cell> make_cells(const options& o, bool xrt) {
  std::vector<cell> cells;
  for (long l : o.lats)
    for (long c : o.cs)
      for (auto& n : o.contenders) {
        if (is_xrt_contender(n)) continue;
        cells.push_back({n, l, int(c), {}, {}});
      }
  if (xrt) {
    // The no-op delay is one per process: these cells have latency_us = the delay.
    for (long c : o.cs) {
      if (c > 4096) continue;  // one xrt::run (command buffer) per in-flight run
      for (auto& n : o.contenders)
        if (is_xrt_contender(n)) cells.push_back({n, o.xrt_delay_us, int(c), {}, {}});
    }
  }
  return cells;
}

void run_sweep(std::vector<cell>& cells, int repeat) {
  for (int rep = 0; rep < repeat; ++rep) {
    for (auto& c : cells) run_cell(c);
    std::fprintf(stderr, "repetition %d/%d done\n", rep + 1, repeat);
  }
}

void take_medians(std::vector<cell>& cells) {
  for (auto& c : cells)
    if (!c.reps.empty()) c.med = median_of(c.reps);
}

const cell* find_cell(const std::vector<cell>& cells, const std::string& contender, long l, int c) {
  for (auto& x : cells)
    if (x.contender == contender && x.latency_us == l && x.c == c && !x.reps.empty()) return &x;
  return nullptr;
}

}  // namespace bench
