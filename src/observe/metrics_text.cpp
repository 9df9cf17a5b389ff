// The Prometheus text exposition (format 0.0.4) of a runtime's counters and
// histograms (xrtio/metrics.hpp).
#include <charconv>
#include <string>

#include "reactor/reactor.hpp"
#include "xrtio/memory_budget.hpp"
#include "xrtio/metrics.hpp"

namespace xrtio {

namespace {

// The shortest text that reads back as v.
void append_number(std::string& s, double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}
void append_number(std::string& s, std::uint64_t v) { s += std::to_string(v); }

void header(std::string& s, const char* name, const char* type, const char* help) {
  s += "# HELP ";
  s += name;
  s += ' ';
  s += help;
  s += "\n# TYPE ";
  s += name;
  s += ' ';
  s += type;
  s += '\n';
}

void scalar(std::string& s, const char* name, const char* type, const char* help, std::uint64_t v) {
  header(s, name, type, help);
  s += name;
  s += ' ';
  append_number(s, v);
  s += '\n';
}

void histogram(std::string& s, const char* name, const char* help, const detail::latency_histogram& h) {
  using lh = detail::latency_histogram;
  header(s, name, "histogram", help);
  auto snap = h.snapshot();
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < lh::buckets; ++i) {
    cumulative += snap.counts[i];
    s += name;
    s += "_bucket{le=\"";
    if (i < lh::bounds) append_number(s, double(lh::bound_ns(i)) / 1e9);
    else s += "+Inf";
    s += "\"} ";
    append_number(s, cumulative);
    s += '\n';
  }
  // _count is the +Inf bucket, so the two agree even while runs are added.
  s += name;
  s += "_sum ";
  append_number(s, double(snap.sum_ns) / 1e9);
  s += '\n';
  s += name;
  s += "_count ";
  append_number(s, cumulative);
  s += '\n';
}

}  // namespace

std::string metrics_text(const runtime& rt, const memory_budget* budget) {
  const auto& rx = *detail::access::reactor(rt);
  auto st = rx.stats();
  std::string s;
  s.reserve(8192);
  scalar(s, "xrtio_runs_submitted_total", "counter", "Runs handed to the runtime (started, or queued for leases).",
         st.submitted);
  scalar(s, "xrtio_runs_completed_total", "counter", "Runs whose final state was COMPLETED.", st.completed);
  scalar(s, "xrtio_runs_failed_total", "counter",
         "Runs that ended in another final state, were rejected at submission, or ended by shutdown.", st.failed);
  scalar(s, "xrtio_runs_timed_out_total", "counter", "Runs whose deadline passed (aborted or withdrawn).",
         st.timed_out);
  scalar(s, "xrtio_runs_cancelled_total", "counter", "Runs cancelled through their cancellation slot.", st.cancelled);
  scalar(s, "xrtio_runs_retained_total", "counter",
         "Runs whose abort was refused or too slow, kept for the life of the process.", st.retained);
  scalar(s, "xrtio_runs_in_flight", "gauge", "Runs now waiting for leases or on the device.", st.in_flight);
  scalar(s, "xrtio_polls_total", "counter", "Run state reads by the reactor.", st.polls);
  scalar(s, "xrtio_wakeups_total", "counter", "Reactor sleeps ended by a wake-up from a submitter or canceller.",
         st.wakeups);
  scalar(s, "xrtio_sleeps_total", "counter", "Times the reactor blocked.", st.sleeps);
  scalar(s, "xrtio_dozes_total", "counter",
         "Times the reactor slept while handlers were behind (runtime_options::backlog_doze).", st.dozes);
  scalar(s, "xrtio_completion_batches_total", "counter", "Completion batches posted to executors.", st.batches);
  const auto& m = rx.metrics();
  histogram(s, "xrtio_device_time_seconds",
            "Start on the device to the device's completion (to when it was seen, where the backend does not say).",
            m.device_time);
  histogram(s, "xrtio_lease_queueing_seconds",
            "Time runs waited for their leases before starting (0 for runs that acquired at once).",
            m.lease_queueing);
  if (const auto* o = rx.observer()) {
    if (o->latency())
      histogram(s, "xrtio_completion_to_resume_seconds",
                "Reactor observed the final state to the handler being called.", o->resume());
    if (const auto* ring = o->trace()) {
      auto ts = ring->stats();
      scalar(s, "xrtio_trace_events_recorded_total", "counter", "Trace events recorded.", ts.recorded);
      scalar(s, "xrtio_trace_events_dropped_total", "counter", "Trace events overwritten or lost.", ts.dropped);
    }
  }
  if (budget) {
    scalar(s, "xrtio_budget_in_use_bytes", "gauge", "Bytes charged to the memory budget.", budget->used());
    scalar(s, "xrtio_budget_ceiling_bytes", "gauge", "The memory budget's ceiling.", budget->ceiling());
  }
  return s;
}

std::string metrics_text(const runtime& rt) { return metrics_text(rt, nullptr); }

}  // namespace xrtio
