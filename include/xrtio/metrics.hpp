// A runtime's counters and latency histograms in the Prometheus text
// exposition format (version 0.0.4), for a /metrics endpoint. Every value is
// updated without a lock as runs go; this reads them (docs/DESIGN.md, "Trace
// and metrics").
#pragma once

#include <string>

namespace xrtio {

class runtime;
class memory_budget;

/// Counters (xrtio_runs_*_total, xrtio_polls_total, xrtio_wakeups_total, ...),
/// the runs in flight (gauge), and histograms with fixed buckets (powers of
/// two from 1 us to 8.4 s) of device time (xrtio_device_time_seconds: start to the device's
/// completion, or to when it was seen where the backend does not say) and
/// queueing for leases (xrtio_lease_queueing_seconds: 0 for a run that
/// acquired at once), both for every run that reached a final state on the
/// device, and, only with runtime_options::latency_histograms, completion to
/// resume (xrtio_completion_to_resume_seconds). With tracing on, the trace
/// ring's recorded and dropped events.
std::string metrics_text(const runtime& rt);
/// The same, plus the bytes in use and the ceiling of `budget` (if not null).
std::string metrics_text(const runtime& rt, const memory_budget* budget);

}  // namespace xrtio
