// Building the --io cells, running the repetitions, the medians.
#include "io_sweep.hpp"

#include <cstdio>
#include <string>

#include "cell_watchdog.hpp"
#include "io_contenders.hpp"
#include "measurement.hpp"

namespace bench::io {
namespace {

io_result median_of(const std::vector<io_result>& v) {
  io_result m = v.front();
  auto med = [&](double io_result::*f) {
    std::vector<double> x;
    for (auto& r : v) x.push_back(r.*f);
    return median(x);
  };
  for (double io_result::*f : {&io_result::gib_per_s, &io_result::iops, &io_result::cpu_us_per_gib,
                               &io_result::p50_us, &io_result::p99_us, &io_result::allocs_per_request})
    m.*f = med(f);
  m.verified = m.errors = m.requests = 0;
  for (auto& r : v) {
    m.verified += r.verified;
    m.errors += r.errors;
    m.requests += r.requests;
  }
  return m;
}

}  // namespace

std::vector<io_cell> make_io_cells(const options& o, const test_file& f) {
  std::vector<io_cell> cells;
  for (auto& cs : o.io_cases)
    for (auto& cache : o.io_caches)
      for (long d : o.io_depths)
        for (auto& n : o.contenders) {
          bool cold = cache == "cold";
          cells.push_back({n, cs == "seq1m" ? io_case::seq1m : io_case::rand4k, cold, int(d), {}, {},
                           cold && !f.direct_ok ? "cold: skipped, " + f.direct_reason : ""});
        }
  return cells;
}

void run_io_sweep(std::vector<io_cell>& cells, int repeat, const test_file& f, double warm_s, double window_s,
                  const xrtio_knobs& knobs) {
  for (int rep = 0; rep < repeat; ++rep) {
    warm_page_cache(f);  // the hot cells' state; O_DIRECT (cold) reads bypass the cache anyway
    for (auto& c : cells) {
      if (!c.skipped.empty()) continue;
      io_spec s;
      s.kind = c.kind;
      s.cold = c.cold;
      s.depth = c.depth;
      s.path = f.path;
      s.file_size = f.size;
      s.warm_s = warm_s;
      s.window_s = window_s;
      s.knobs = knobs;
      std::string why;
      cell_watchdog_enter(c.contender + " " + case_name(c.kind) + (c.cold ? " cold" : " hot") +
                          " QD=" + std::to_string(c.depth));
      auto r = run_io_contender(c.contender, s, why);
      cell_watchdog_leave();
      if (!r) {
        c.skipped = why.empty() ? "not available" : why;
        std::fprintf(stderr, "%s %s %s QD=%d: skipped, %s\n", c.contender.c_str(), case_name(c.kind),
                     c.cold ? "cold" : "hot", c.depth, c.skipped.c_str());
        continue;
      }
      c.reps.push_back(*r);
    }
    std::fprintf(stderr, "io repetition %d/%d done\n", rep + 1, repeat);
  }
}

void take_io_medians(std::vector<io_cell>& cells) {
  for (auto& c : cells)
    if (!c.reps.empty()) c.med = median_of(c.reps);
}

const io_cell* find_io_cell(const std::vector<io_cell>& cells, const std::string& contender, io_case kind, bool cold,
                            int depth) {
  for (auto& c : cells)
    if (c.contender == contender && c.kind == kind && c.cold == cold && c.depth == depth && !c.reps.empty()) return &c;
  return nullptr;
}

}  // namespace bench::io
