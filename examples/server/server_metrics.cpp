#include "server_metrics.hpp"

namespace server {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, std::uint64_t v) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
  out += name;
  out += ' ';
  out += std::to_string(v);
  out += '\n';
}

// The runtime's counters from runtime::stats(), until the library exports
// its own (issue 13, item 2).
void runtime_metrics(std::string& out, const xrtio::runtime& rt, const xrtio::memory_budget& budget) {
  auto s = rt.stats();
  metric(out, "xrtio_runs_submitted_total", "counter", "Runs handed to the reactor.", s.submitted);
  metric(out, "xrtio_runs_completed_total", "counter", "Runs that ended COMPLETED.", s.completed);
  metric(out, "xrtio_runs_failed_total", "counter", "Runs that ended in another state or were rejected.", s.failed);
  metric(out, "xrtio_runs_timed_out_total", "counter", "Runs aborted at their deadline.", s.timed_out);
  metric(out, "xrtio_runs_cancelled_total", "counter", "Runs withdrawn or aborted through cancellation.", s.cancelled);
  metric(out, "xrtio_runs_retained_total", "counter", "Runs retained after a refused or slow abort.", s.retained);
  metric(out, "xrtio_runs_in_flight", "gauge", "Runs waiting for leases or on the device.", s.in_flight);
  metric(out, "xrtio_reactor_polls_total", "counter", "Device state polls.", s.polls);
  metric(out, "xrtio_reactor_wakeups_total", "counter", "Reactor wake-ups by submitters or cancellations.", s.wakeups);
  metric(out, "xrtio_budget_bytes_in_use", "gauge", "Device memory charged to the budget.", budget.used());
  metric(out, "xrtio_budget_bytes_ceiling", "gauge", "The budget's ceiling.", budget.ceiling());
}

}  // namespace

void server_counters::response(int status) noexcept {
  std::size_t i = 0;
  while (i + 1 < statuses.size() && statuses[i] != status) ++i;
  by_status_[i].fetch_add(1, std::memory_order_relaxed);
}

void server_counters::append_to(std::string& out) const {
  out += "# HELP xrtio_server_responses_total HTTP responses sent, by status (0: any other).\n"
         "# TYPE xrtio_server_responses_total counter\n";
  for (std::size_t i = 0; i < statuses.size(); ++i)
    out += "xrtio_server_responses_total{code=\"" + std::to_string(statuses[i]) + "\"} " +
           std::to_string(by_status_[i].load(std::memory_order_relaxed)) + "\n";
  metric(out, "xrtio_server_disconnects_total", "counter", "Clients that went away while their run was in flight.",
         disconnects_.load(std::memory_order_relaxed));
  metric(out, "xrtio_server_connections", "gauge", "Open client connections.",
         static_cast<std::uint64_t>(std::max<std::int64_t>(0, connections())));
}

std::string metrics_page(const xrtio::runtime& rt, const xrtio::memory_budget& budget, const server_counters& c) {
  std::string out;
  out.reserve(4096);
  runtime_metrics(out, rt, budget);
  c.append_to(out);
  return out;
}

}  // namespace server
