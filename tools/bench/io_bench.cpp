// `xrtio-bench --io`: the test file, the sweep, the report.
//
// Cells: every (case, cache, queue depth, contender). Cases: rand4k (4 KiB
// reads at uniformly random 4 KiB-aligned offsets) and seq1m (1 MiB reads in
// file order, wrapping). Cache: hot (buffered; the file is read through the
// page cache before each repetition) and cold (O_DIRECT, aligned buffers:
// every read reaches the device). In a cell a contender keeps queue_depth
// requests in flight (or as many as its shape allows, eff.QD) until the end
// of one window after the warm-up. Every request's buffer is poisoned at
// three words before the read and those words are checked against the file
// after it (io_pattern.hpp): a contender that reads nothing or the wrong
// bytes counts errors, not bandwidth. Each metric is the median over
// --repeat passes.
#include "io_bench.hpp"

#include <cstdio>

#include "io_report.hpp"
#include "io_sweep.hpp"
#include "io_test_file.hpp"

namespace bench::io {

int run_io_bench(const options& o) {
  double window = o.bench.window_s, warm = o.bench.warm_s;
  test_file f;
  std::string err;
  if (!make_test_file(o.io_dir, o.io_size, f, err)) {
    std::fprintf(stderr, "xrtio-bench --io: %s\n", err.c_str());
    return 1;
  }
  print_io_preamble(o, f, warm, window);
  auto cells = make_io_cells(o, f);
  run_io_sweep(cells, o.repeat, f, warm, window, xrtio_knobs{o.io_inline_limit, o.io_worker_min, o.io_worker_floor});
  take_io_medians(cells);
  print_io_table(cells);
  print_io_goals(cells);
  if (!o.json.empty() && !write_io_json(o.json, cells, f)) return 1;
  return 0;
}

}  // namespace bench::io
