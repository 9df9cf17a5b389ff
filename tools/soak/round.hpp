// One round of the soak: a runtime (reactor thread or in-loop), an
// io_context, a thread pool, a simulated device (reopened when lost), and
// lanes that launch runs through every completion token until the round's
// quota is met or its ending (drain, io_context destroyed, runtime
// destroyed) cuts it short; then the round's checks.
#pragma once

#include <cstdint>

#include "options.hpp"
#include "tally.hpp"
#include "xrtio/memory_budget.hpp"

namespace soak {

class stall_detector;

enum class round_end { drain, destroy_io, destroy_runtime };

struct round_spec {
  std::uint64_t index = 0;       ///< round number (seeds its devices)
  std::uint64_t first_run = 0;   ///< plan index of its first run
  std::uint64_t quota = 0;       ///< runs to launch at most
  bool inloop = false;
  round_end end = round_end::drain;
};

/// Runs one round; returns how many runs it launched.
/// Runs one round; returns how many runs it launched. `stalls` tells it
/// whether the process stalled meanwhile (the retention count is then only
/// checked to be at least the refused aborts).
std::uint64_t run_round(const options& o, const round_spec& spec, xrtio::memory_budget& budget, tally& t,
                        const stall_detector& stalls);

}  // namespace soak
