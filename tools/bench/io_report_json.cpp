// The --io JSON file: one object per cell with its medians and ratios, then
// the test file, then the skipped cells.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io_report.hpp"
#include "report.hpp"

namespace bench::io {
namespace {

std::string jstr(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    o += ch;
  }
  return o + "\"";
}

void write_cell(FILE* f, const std::vector<io_cell>& cells, const io_cell& c) {
  auto& m = c.med;
  std::fprintf(f,
               "  {\"contender\": %s, \"case\": \"%s\", \"cache\": \"%s\", \"queue_depth\": %d, \"gib_per_s\": %s, "
               "\"iops\": %s, \"cpu_us_per_gib\": %s, \"p50_us\": %s, \"p99_us\": %s, \"allocs_per_request\": %s, "
               "\"bw_ratio_to_best\": %s, \"cpu_ratio_to_pread_pool\": %s, \"bw_ratio_to_raw_uring\": %s, "
               "\"effective_queue_depth\": %d, \"request_bytes\": %zu, \"direct\": %s, \"requests_in_windows\": %llu, "
               "\"verified_requests\": %llu, \"errors\": %llu, \"repetitions\": %zu},\n",
               jstr(c.contender).c_str(), case_name(c.kind), c.cold ? "cold" : "hot", c.depth,
               jnum(m.gib_per_s).c_str(), jnum(m.iops).c_str(), jnum(m.cpu_us_per_gib).c_str(), jnum(m.p50_us).c_str(),
               jnum(m.p99_us).c_str(), jnum(m.allocs_per_request).c_str(), jnum(bw_ratio_to_best(cells, c)).c_str(),
               jnum(cpu_ratio_to_pool(cells, c)).c_str(), jnum(bw_ratio_to_host(cells, c)).c_str(),
               m.effective_depth, request_bytes(c.kind), m.direct ? "true" : "false",
               static_cast<unsigned long long>(m.requests), static_cast<unsigned long long>(m.verified),
               static_cast<unsigned long long>(m.errors), c.reps.size());
}

}  // namespace

bool write_io_json(const std::string& path, const std::vector<io_cell>& cells, const test_file& tf) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "xrtio-bench: --json: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(f, "[\n");
  for (auto& c : cells)
    if (!c.reps.empty()) write_cell(f, cells, c);
  std::fprintf(f, "  {\"io_file\": {\"path\": %s, \"bytes\": %llu, \"direct_supported\": %s, \"direct_reason\": %s}},\n",
               jstr(tf.path).c_str(), static_cast<unsigned long long>(tf.size), tf.direct_ok ? "true" : "false",
               jstr(tf.direct_reason).c_str());
  std::fprintf(f, "  {\"skipped\": [");
  bool first = true;
  for (auto& c : cells)
    if (!c.skipped.empty()) {
      std::fprintf(f, "%s\n    {\"contender\": %s, \"case\": \"%s\", \"cache\": \"%s\", \"queue_depth\": %d, "
                      "\"reason\": %s}",
                   first ? "" : ",", jstr(c.contender).c_str(), case_name(c.kind), c.cold ? "cold" : "hot", c.depth,
                   jstr(c.skipped).c_str());
      first = false;
    }
  std::fprintf(f, "%s]}\n]\n", first ? "" : "\n  ");
  std::fclose(f);
  std::printf("json written: %s\n", path.c_str());
  return true;
}

}  // namespace bench::io
