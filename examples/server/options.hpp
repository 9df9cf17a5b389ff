// xrtio-server's command line.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace server {

struct options {
  std::uint16_t port = 0;               ///< 0: any free port (printed)
  unsigned threads = 1;                 ///< io_context threads
  long sim_latency_us = 0;              ///< fixed device time of each simulated run
  bool baseline = false;                ///< blocking start()+wait() on a thread pool
  bool inloop = false;                  ///< one io thread drives the runtime (xrtio::run), no reactor thread:
                                        ///< the default with one io thread (docs/SERVER.md, "Threading")
  bool reactor = false;                 ///< --reactor: the runtime's reactor thread even with one io thread
  bool no_run = false;                  ///< requests are served without running their kernel (the HTTP stack's own cost)
  unsigned pool_threads = 16;           ///< the baseline's pool
  bool xrt_noop = false;                ///< XRT's no-op device instead of the simulator
  std::string trace_file;               ///< --trace FILE: the run timeline, written on exit
  std::size_t trace_capacity = 1u << 18;        ///< events the trace ring keeps (the oldest are dropped)
  std::chrono::milliseconds deadline{1000};     ///< default per-request deadline
  std::chrono::milliseconds grace{2000};        ///< shutdown: how long in-flight requests may finish
  std::size_t budget_bytes = 256u << 20;        ///< device memory budget
  std::size_t max_body = 16u << 20;             ///< larger request bodies get 413
  unsigned compute_units = 2;           ///< the simulated device's
  std::chrono::milliseconds idle_trim{100};     ///< no connection for this long: the heap's free memory goes back (0: never)
};

/// Parses argv. Returns nullopt after printing usage (to stderr, with the
/// reason) for an unknown flag or a bad value.
std::optional<options> parse_options(int argc, char** argv);

}  // namespace server
