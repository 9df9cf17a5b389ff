// `xrtio-bench --io`: file reads into memory, xrtio's async_read_file
// against the ways people read files without it (issue 14's benchmarks).
#pragma once

#include "options.hpp"

namespace bench::io {

// Makes the test file, runs the sweep, reports; the exit status of main.
int run_io_bench(const options& o);

}  // namespace bench::io
