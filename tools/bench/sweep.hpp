// The sweep: the cells (contender, L, C) in sweep order, run --repeat times,
// and each cell's medians over its repetitions.
#pragma once

#include <string>
#include <vector>

#include "measurement.hpp"
#include "options.hpp"

namespace bench {

struct cell {
  std::string contender;
  long latency_us;  // the XRT cells: the no-op device's delay
  int c;
  std::vector<result> reps;
  result med;  // medians over reps (take_medians)
};

// The sim cells for every L and C, then (xrt) the XRT cells for C <= 4096.
std::vector<cell> make_cells(const options& o, bool xrt);
// Runs every cell `repeat` times (a repetition is one pass over all cells).
void run_sweep(std::vector<cell>& cells, int repeat);
// Fills each run cell's med.
void take_medians(std::vector<cell>& cells);
// The run cell (contender, L, C), or null.
const cell* find_cell(const std::vector<cell>& cells, const std::string& contender, long l, int c);

}  // namespace bench
