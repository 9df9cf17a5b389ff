// Parsing xrtio-bench's arguments and filling in the quick or full defaults.
#include "options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "contenders.hpp"

namespace bench {
namespace {

std::vector<long> parse_list(const char* s) {
  std::vector<long> v;
  for (const char* p = s; *p;) {
    char* e;
    v.push_back(std::strtol(p, &e, 10));
    p = *e == ',' ? e + 1 : e;
    if (e == p && *p) break;
  }
  return v;
}

std::vector<std::string> parse_names(const char* s) {
  std::vector<std::string> v;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || !*p) {
      if (!cur.empty()) v.push_back(cur);
      cur.clear();
      if (!*p) break;
    } else {
      cur += *p;
    }
  }
  return v;
}

void print_usage() {
  std::fprintf(stderr,
               "usage: xrtio-bench [--quick] [--repeat N] [--window SECONDS] [--json FILE] [--plot FILE.png]\n"
               "                   [--latencies US,..] [--in-flight C,..] [--contenders NAME,..]\n"
               "                   [--no-xrt] [--xrt-delay-us US] [--mkxclbin PATH] [--spin-us US] [--max-poll-us US] [--predict|--no-predict]\n"
               "                   [--trace-capacity N] [--latency-histograms]\n"
               "contenders: xrtio xrtio-inloop blocking-threads pool-offload loop-poll raw-xrt raw-xrt-wait xrtio@xrt\n"
               "            xrtio-prepared@xrt xrtio-inloop@xrt\n");
}

// Reads argv[i] (and its value, advancing i); false for an unknown option.
// --repeat and --window go to o.repeat and o.bench.window_s (defaults later).
bool parse_one(options& o, int argc, char** argv, int& i) {
  auto arg = [&](const char* n) { return !std::strcmp(argv[i], n) && i + 1 < argc; };
  auto& rt = o.bench.rt;
  if (!std::strcmp(argv[i], "--quick")) o.quick = true;
  else if (!std::strcmp(argv[i], "--no-xrt")) o.no_xrt = true;
  else if (arg("--repeat")) o.repeat = std::atoi(argv[++i]);
  else if (arg("--window")) o.bench.window_s = std::atof(argv[++i]);
  else if (arg("--json")) o.json = argv[++i];
  else if (arg("--plot")) o.plot = argv[++i];
  else if (arg("--latencies")) o.lats = parse_list(argv[++i]);
  else if (arg("--in-flight")) o.cs = parse_list(argv[++i]);
  else if (arg("--contenders")) o.contenders = parse_names(argv[++i]);
  else if (arg("--xrt-delay-us")) o.xrt_delay_us = std::atol(argv[++i]);
  else if (arg("--mkxclbin")) o.mkxclbin = argv[++i];
  else if (arg("--spin-us")) rt.spin_window = std::chrono::microseconds(std::atol(argv[++i]));
  else if (!std::strcmp(argv[i], "--no-predict")) rt.predict_completions = false;
  else if (!std::strcmp(argv[i], "--predict")) rt.predict_completions = true;
  else if (arg("--max-poll-us")) rt.max_poll_interval = std::chrono::microseconds(std::atol(argv[++i]));
  else if (arg("--trace-capacity")) rt.trace_capacity = static_cast<std::size_t>(std::atol(argv[++i]));
  else if (!std::strcmp(argv[i], "--latency-histograms")) rt.latency_histograms = true;
  else return false;
  return true;
}

}  // namespace

bool options::wants(const std::string& n) const {
  return std::find(contenders.begin(), contenders.end(), n) != contenders.end();
}

bool options::wants_xrt() const {
  return !no_xrt && (wants("raw-xrt") || wants("raw-xrt-wait") || wants("xrtio@xrt") || wants("xrtio-prepared@xrt") ||
                     wants("xrtio-inloop@xrt"));
}

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  o.repeat = -1;
  o.bench.window_s = -1;
  for (int i = 1; i < argc; ++i)
    if (!parse_one(o, argc, argv, i)) {
      print_usage();
      return std::nullopt;
    }
  if (o.lats.empty()) o.lats = o.quick ? std::vector<long>{0, 50} : std::vector<long>{0, 10, 50, 1000};
  if (o.cs.empty()) o.cs = o.quick ? std::vector<long>{1, 4096} : std::vector<long>{1, 64, 4096, 65536};
  if (o.repeat < 1) o.repeat = 3;  // medians of 3, quick or not
  if (!(o.bench.window_s > 0)) o.bench.window_s = o.quick ? 0.2 : 0.6;
  o.bench.warm_s = o.quick ? 0.05 : 0.15;
  if (o.contenders.empty()) o.contenders = all_contenders();
  return o;
}

}  // namespace bench
