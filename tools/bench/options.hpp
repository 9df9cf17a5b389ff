// xrtio-bench's command line: the options, their defaults (quick or full
// sweep) and the parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "measurement.hpp"

namespace bench {

struct options {
  bool quick = false, no_xrt = false;
  int repeat = 3;  // medians of 3, quick or not
  std::string json, plot, mkxclbin;
  std::vector<long> lats, cs;          // latencies L (us) and runs in flight C
  std::vector<std::string> contenders;  // in sweep order
  long xrt_delay_us = 0;
  bench_opts bench;  // window, warm-up, runtime_options

  // --io (io_bench.hpp): file reads instead of kernel runs.
  bool io = false;
  std::string io_dir;                              // where the test file is made
  std::uint64_t io_size = 0;                       // its size in bytes
  std::vector<std::string> io_cases, io_caches;  // rand4k/seq1m, hot/cold
  std::vector<long> io_depths;                     // queue depths
  std::int64_t io_inline_limit = -1;               // xrtio's inline_read_limit; -1: the default
  std::int64_t io_worker_min = -1;                 // xrtio's worker_read_min; -1: the default
  std::int64_t io_worker_floor = -1;               // xrtio's worker_in_flight_min; -1: the default

  bool wants(const std::string& contender) const;
  bool wants_xrt() const;  // any XRT contender asked for (and no --no-xrt)
};

// nullopt: an unknown option or one missing its value (the usage is
// printed), or a bad value ("xrtio-bench: OPTION: WHY (got 'TEXT')" is
// printed); exit with 2.
std::optional<options> parse_options(int argc, char** argv);

}  // namespace bench
