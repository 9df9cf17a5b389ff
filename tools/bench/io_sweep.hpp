// The --io sweep: its cells (contender, case, cache, queue depth), run
// --repeat times, and each cell's medians.
#pragma once

#include <string>
#include <vector>

#include "io_measure.hpp"
#include "io_test_file.hpp"
#include "io_workload.hpp"
#include "options.hpp"

namespace bench::io {

struct io_cell {
  std::string contender;
  io_case kind;
  bool cold;
  int depth;
  std::vector<io_result> reps;
  io_result med;        // medians over reps (take_io_medians)
  std::string skipped;  // why the contender could not run here (no reps then)
};

// Every (case, cache, depth, contender) the options ask for; where the file
// does not allow O_DIRECT the cold cells are made skipped, with the reason.
std::vector<io_cell> make_io_cells(const options& o, const test_file& f);
// `repeat` passes over all cells; each pass warms the page cache first.
// knobs: the xrtio contenders' file_options (negative: the defaults).
void run_io_sweep(std::vector<io_cell>& cells, int repeat, const test_file& f, double warm_s, double window_s,
                  const xrtio_knobs& knobs = {});
void take_io_medians(std::vector<io_cell>& cells);
// The cell that ran, or null.
const io_cell* find_io_cell(const std::vector<io_cell>& cells, const std::string& contender, io_case kind, bool cold,
                            int depth);

}  // namespace bench::io
