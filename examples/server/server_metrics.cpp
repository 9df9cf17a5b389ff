#include "server_metrics.hpp"

#include <malloc.h>

#include "xrtio/metrics.hpp"

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
  // The process's heap as glibc sees it (every arena; mallinfo2 takes each
  // arena's lock once, on a scrape only). RSS alone cannot tell a leak from
  // memory the allocator keeps for reuse (the trim threshold, main.cpp): in
  // use returns to its level after a load if nothing leaks. Free counts
  // what a trim gave back too (madvise keeps the address range): it is the
  // heap's size, not what is resident.
  auto mi = ::mallinfo2();
  metric(out, "xrtio_server_heap_in_use_bytes", "gauge", "Heap bytes allocated and not freed (malloc'd and mmap'd).",
         mi.uordblks + mi.hblkhd);
  metric(out, "xrtio_server_heap_free_bytes", "gauge", "Free bytes in the heap's arenas, resident or not (a trim gives the pages back but keeps the range).",
         mi.fordblks);
}

std::string metrics_page(const xrtio::runtime& rt, const xrtio::memory_budget& budget, const server_counters& c,
                         std::uint64_t heap_trims) {
  std::string out;
  out = xrtio::metrics_text(rt, &budget);
  c.append_to(out);
  metric(out, "xrtio_server_heap_trims_total", "counter",
         "Times the heap's free memory was given back after the server had no connection (--idle-trim-ms).",
         heap_trims);
  return out;
}

}  // namespace server
