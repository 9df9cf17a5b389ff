// The --json file: one object per (contender, L, C) cell with its medians,
// then the host limits and the idle wake-ups.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "report.hpp"

namespace bench {
namespace {

void write_cell(FILE* f, const cell& c) {
  auto& m = c.med;
  std::fprintf(f,
               "  {\"contender\": \"%s\", \"latency_us\": %ld, \"in_flight\": %d, \"runs_per_s\": %s, "
               "\"resume_p50_us\": %s, \"resume_p99_us\": %s, \"resume_p999_us\": %s, \"cpu_us_per_run\": %s, "
               "\"allocs_per_run\": %s, \"effective_in_flight\": %d, \"app_cpu_us_per_run\": %s, "
               "\"reactor_cpu_us_per_run\": %s, \"device_cpu_us_per_run\": %s, \"rss_bytes_per_in_flight\": %s, "
               "\"sleeps_per_run\": %s, "
               "\"repetitions\": %zu, \"errors\": %llu},\n",
               c.contender.c_str(), c.latency_us, c.c, jnum(m.runs_per_s).c_str(), jnum(m.p50).c_str(),
               jnum(m.p99).c_str(), jnum(m.p999).c_str(), jnum(m.cpu_us).c_str(), jnum(m.allocs).c_str(), m.effective,
               jnum(m.app_cpu_us).c_str(), jnum(m.rx_cpu_us).c_str(), jnum(m.dev_cpu_us).c_str(),
               jnum(m.rss_per_run).c_str(), jnum(m.sleeps).c_str(), c.reps.size(), static_cast<unsigned long long>(m.errors));
}

void write_limits(FILE* f, const host_limits& h) {
  std::fprintf(f,
               "  {\"limits\": {\"spin_pingpong_p50_us\": %s, \"eventfd_pingpong_p50_us\": %s, "
               "\"asio_post_sleeping_p50_us\": %s, \"eventfd_wake_p50_us\": %s, "
               "\"relay_post_sleeping_p50_us\": %s, \"eventfd_wake_cpu_us\": %s, "
               "\"relay_post_sleeping_cpu_us\": %s, \"relay_one_core_p50_us\": %s}},\n",
               jnum(h.spin_pingpong_p50_us).c_str(), jnum(h.eventfd_pingpong_p50_us).c_str(),
               jnum(h.asio_post_sleeping_p50_us).c_str(), jnum(h.eventfd_wake_p50_us).c_str(),
               jnum(h.relay_post_sleeping_p50_us).c_str(), jnum(h.eventfd_wake_cpu_us).c_str(),
               jnum(h.relay_post_sleeping_cpu_us).c_str(), jnum(h.relay_one_core_p50_us).c_str());
}

}  // namespace

std::string jnum(double v) {
  if (std::isnan(v) || std::isinf(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

bool write_json(const std::string& path, const std::vector<cell>& cells, const host_limits& h,
                double idle_wakeups_per_s) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "xrtio-bench: --json: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(f, "[\n");
  for (auto& c : cells)
    if (!c.reps.empty()) write_cell(f, c);
  write_limits(f, h);
  std::fprintf(f, "  {\"idle_wakeups_per_s\": %s}\n]\n", jnum(idle_wakeups_per_s).c_str());
  std::fclose(f);
  std::printf("json written: %s\n", path.c_str());
  return true;
}

}  // namespace bench
