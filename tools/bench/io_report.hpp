// What `xrtio-bench --io` prints (io_report_text.cpp) and writes to --json
// (io_report_json.cpp).
#pragma once

#include <string>
#include <vector>

#include "io_sweep.hpp"
#include "io_test_file.hpp"
#include "options.hpp"

namespace bench::io {

// A cell's bandwidth over the best contender's in its (case, cache, depth)
// (raw-uring, the host limit, is no contender), its CPU per GiB over
// pread-pool's, and its bandwidth over raw-uring's; NaN when missing.
double bw_ratio_to_best(const std::vector<io_cell>& cells, const io_cell& c);
double bw_ratio_to_best_alternative(const std::vector<io_cell>& cells, const io_cell& c);
double cpu_ratio_to_pool(const std::vector<io_cell>& cells, const io_cell& c);
double bw_ratio_to_host(const std::vector<io_cell>& cells, const io_cell& c);

// The sweep's parameters, the file, and a loud line when cold cells cannot run.
void print_io_preamble(const options& o, const test_file& f, double warm_s, double window_s);
// The table (medians), then the skipped cells and xrtio's goals.
void print_io_table(const std::vector<io_cell>& cells);
void print_io_goals(const std::vector<io_cell>& cells);

// The JSON array: one object per cell that ran, then {"io_file": ...}, then
// {"skipped": [...]}. False (message on stderr) if not written.
bool write_io_json(const std::string& path, const std::vector<io_cell>& cells, const test_file& f);

}  // namespace bench::io
