// A timeline of a runtime's asynchronous runs (async_run, async_execute,
// chains), for Perfetto or chrome://tracing. Recording is enabled per runtime
// with runtime_options::trace_capacity (0, the default, = off); the events go
// to a ring of that many events, allocated when the runtime is made, and the
// oldest are overwritten (and counted as dropped) when it is full. Recording
// takes no lock and allocates nothing (docs/DESIGN.md, "Trace and metrics").
// Synchronous runs (xrtio::start) are not traced: no reactor sees them.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>
#include <vector>

#include "xrtio/run_state.hpp"

namespace xrtio {

class runtime;

/// What happened to a run, in the order it happens.
enum class trace_event_kind : std::uint8_t {
  submitted,         ///< async_run/async_execute handed the run to the runtime (or it was rejected)
  leases_granted,    ///< every argument's range was leased (at once, or after waiting)
  started,           ///< start() on the device (the time is run_result::submitted)
  device_completed,  ///< the device's own completion time (run_result::device_completed), where the backend knows it
  observed,          ///< the reactor saw the run final and hands it to its executor (run_result::observed)
  resumed,           ///< the handler is about to be called, on its executor's thread
  abort_begin,       ///< a deadline, cancellation or shutdown began an abort
  abort_end,         ///< the abort finished (or was refused, or outlived abort_grace)
  retained,          ///< the run is kept for the life of the process (invariant 5)
};

std::string_view to_string(trace_event_kind k) noexcept;

struct trace_event {
  std::uint64_t sequence = 0;  ///< order of recording in this runtime, from 0
  std::uint64_t run = 0;       ///< the run, numbered from 1 per runtime
  trace_event_kind kind = trace_event_kind::submitted;
  /// observed and retained: the run's state then (else new_).
  run_state state = run_state::new_;
  /// observed: the run completes with an error (timed out, cancelled, failed, rejected).
  bool failed = false;
  std::uint32_t thread = 0;  ///< Linux thread id of the recording thread
  std::chrono::steady_clock::time_point time{};
};

struct trace_stats {
  std::size_t capacity = 0;    ///< runtime_options::trace_capacity (0: not tracing)
  std::uint64_t recorded = 0;  ///< events handed to the ring since the runtime was made
  /// Events no longer in the ring: overwritten by newer ones, plus the rare
  /// event whose slot another writer still held (the ring wrapped around
  /// during one write; such an event is not waited for).
  std::uint64_t dropped = 0;
};

trace_stats trace_statistics(const runtime& rt) noexcept;

/// The events still in the ring, by sequence. Empty when not tracing.
std::vector<trace_event> trace_events(const runtime& rt);

/// Writes the ring's events as Chrome trace-event JSON (Perfetto UI,
/// chrome://tracing): one track per run, named "run N", holding a slice
/// "run" from its first to its last event with, in order, "leases"
/// (submitted to leases granted), "device" (started to device completion,
/// with "abort" inside it), "reactor" (device completion to observed) and
/// "resume" (observed to resumed), and an instant "retained". Stamps come
/// from several threads and clocks; a slice is clamped into its parent and
/// after its predecessor so that the slices always nest. Times are
/// microseconds since the first event. When not tracing it is still valid
/// JSON, with no run in it: the same object, whose `traceEvents` holds only
/// the process's name.
void write_chrome_trace(const runtime& rt, std::ostream& out);

}  // namespace xrtio
