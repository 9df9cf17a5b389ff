// xrtio-soak's command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace soak {

enum class reactor_mode { mixed, thread, inloop };

struct options {
  std::uint64_t runs = 10000;   ///< runs to launch in all
  std::uint64_t seed = 1;       ///< every random choice derives from it
  unsigned threads = 2;         ///< io_context threads (reactor-thread rounds)
  std::uint64_t round_runs = 2000;  ///< runs per round (a runtime, an io_context, a device)
  reactor_mode mode = reactor_mode::mixed;
  std::chrono::milliseconds abort_grace{250};
  unsigned hang_limit_s = 60;  ///< seconds of running time without progress that count as a hang
  bool quiet = false;
};

/// Parses argv; returns nothing (after printing why, or the usage) when the
/// program should exit, with `exit_code` set.
std::optional<options> parse_options(int argc, char** argv, int& exit_code);

}  // namespace soak
