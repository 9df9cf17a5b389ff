// How the handler side of a run reports to its runtime's trace and
// completion-to-resume histogram (xrtio/trace.hpp, xrtio/metrics.hpp). A run
// carries a pointer to its runtime's observer only while the runtime records
// one of them; otherwise the pointer is null and resuming costs one branch.
#pragma once

#include <chrono>
#include <cstdint>

namespace xrtio::detail {

class run_observer;  // src/observe/run_observer.hpp

/// Called on the handler's thread just before a run's handler is invoked
/// (the op still exists, so its runtime does too): records the run's
/// `resumed` trace event and the time since `observed`.
void observe_resume(run_observer& o, std::uint64_t run_id, std::chrono::steady_clock::time_point observed) noexcept;

}  // namespace xrtio::detail
