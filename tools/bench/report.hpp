// What the bench prints and writes: the preamble, host limits, table and
// ratios on stdout (report_text.cpp), the JSON file (report_json.cpp) and the
// gnuplot PNG (report_plot.cpp).
#pragma once

#include <string>
#include <vector>

#include "host_limits.hpp"
#include "options.hpp"
#include "sweep.hpp"

namespace bench {

// The sweep's parameters and what the columns mean (before the sweep runs).
void print_preamble(const options& o, bool xrt);
// The "host limits" block (before the table).
void print_host_limits(const host_limits& h);
// The table of the cells' medians, a blank line between latencies.
void print_table(const std::vector<cell>& cells);
// Throughput ratios: xrtio against each sim contender, xrtio@xrt and
// xrtio-prepared@xrt against raw-xrt and raw-xrt-wait.
void print_ratios(const std::vector<cell>& cells, const options& o, bool xrt);
// Each contender's resume p50 at C = 1 over asio_post_sleeping, the relay
// (two hops), the one-hop wake and spin_pingpong.
void print_limit_ratios(const std::vector<cell>& cells, const host_limits& h);
// Idle reactor wake-ups and the process's peak RSS.
void print_process_summary(double idle_wakeups_per_s);

// A JSON number (null for NaN and infinities).
std::string jnum(double v);
// The JSON array: one object per run cell, {"limits": ...}, then
// {"idle_wakeups_per_s": ...} last. False (message on stderr) if not written.
bool write_json(const std::string& path, const std::vector<cell>& cells, const host_limits& h,
                double idle_wakeups_per_s);

// Throughput and resume p99 against C, one panel per latency (the XRT cells
// in their own); needs gnuplot, else says so and returns true. False
// (message on stderr) if its data, its script or the PNG was not written.
bool plot_sweep(const std::string& png, std::vector<cell> cells, const options& o, bool xrt);

}  // namespace bench
