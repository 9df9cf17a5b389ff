// Parsing xrtio-bench's arguments and filling in the quick or full defaults.
#include "options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "contenders.hpp"
#include "io_contenders.hpp"
#include "io_test_file.hpp"

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

// A byte count with an optional K, M or G suffix (binary).
std::uint64_t parse_size(const char* s) {
  char* e;
  auto v = std::strtoull(s, &e, 10);
  switch (*e) {
    case 'k': case 'K': return v << 10;
    case 'm': case 'M': return v << 20;
    case 'g': case 'G': return v << 30;
    default: return v;
  }
}

void print_usage() {
  std::fprintf(stderr,
               "usage: xrtio-bench [--quick] [--repeat N] [--window SECONDS] [--json FILE] [--plot FILE.png]\n"
               "                   [--latencies US,..] [--in-flight C,..] [--contenders NAME,..]\n"
               "                   [--no-xrt] [--xrt-delay-us US] [--mkxclbin PATH] [--spin-us US] [--no-spin-trials] [--doze-us US] [--max-poll-us US] [--predict|--no-predict]\n"
               "                   [--sim-idle-poll-us US]\n"
               "                   [--trace-capacity N] [--latency-histograms]\n"
               "       xrtio-bench --io [--quick] [--repeat N] [--window S] [--warm S] [--json FILE] [--io-dir DIR]\n"
               "                   [--io-size BYTES[K|M|G]] [--io-cases rand4k,seq1m] [--io-cache hot,cold]\n"
               "                   [--io-depths D,..] [--io-inline-limit BYTES[K|M]] [--io-worker-min BYTES[K|M]]\n"
               "                   [--io-worker-floor BYTES[K|M]] [--contenders NAME,..]\n"
               "io contenders: xrtio xrtio-inloop pread-thread pread-thread-1buf pread-post pread-pool\n"
               "               asio-file raw-uring\n"
               "               (also xrtio-noreg xrtio-inloop-noreg: register_with_ring off)\n"
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
  else if (arg("--warm")) o.bench.warm_s = std::atof(argv[++i]);
  else if (!std::strcmp(argv[i], "--io")) o.io = true;
  else if (arg("--io-dir")) o.io_dir = argv[++i];
  else if (arg("--io-size")) o.io_size = parse_size(argv[++i]);
  else if (arg("--io-cases")) o.io_cases = parse_names(argv[++i]);
  else if (arg("--io-cache")) o.io_caches = parse_names(argv[++i]);
  else if (arg("--io-depths")) o.io_depths = parse_list(argv[++i]);
  else if (arg("--io-inline-limit")) o.io_inline_limit = static_cast<std::int64_t>(parse_size(argv[++i]));
  else if (arg("--io-worker-min")) o.io_worker_min = static_cast<std::int64_t>(parse_size(argv[++i]));
  else if (arg("--io-worker-floor")) o.io_worker_floor = static_cast<std::int64_t>(parse_size(argv[++i]));
  else if (arg("--json")) o.json = argv[++i];
  else if (arg("--plot")) o.plot = argv[++i];
  else if (arg("--latencies")) o.lats = parse_list(argv[++i]);
  else if (arg("--in-flight")) o.cs = parse_list(argv[++i]);
  else if (arg("--contenders")) o.contenders = parse_names(argv[++i]);
  else if (arg("--xrt-delay-us")) o.xrt_delay_us = std::atol(argv[++i]);
  else if (arg("--mkxclbin")) o.mkxclbin = argv[++i];
  else if (arg("--spin-us")) rt.spin_window = std::chrono::microseconds(std::atol(argv[++i]));
  else if (arg("--sim-idle-poll-us")) o.bench.sim_idle_poll = std::chrono::microseconds(std::atol(argv[++i]));
  else if (arg("--doze-us")) rt.backlog_doze = std::chrono::microseconds(std::atol(argv[++i]));
  else if (!std::strcmp(argv[i], "--no-spin-trials")) rt.spin_trials = false;
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

// The --io defaults. Quick: hot cache, depths 1 and 128, a 256 MiB file,
// windows of 0.2 s; full: hot and cold, depths 1, 16 and 128, 1 GiB, 0.4 s
// (60 cells x 3 repetitions in about 2 minutes on 2 cores).
bool io_defaults(options& o) {
  if (o.io_cases.empty()) o.io_cases = {"rand4k", "seq1m"};
  if (o.io_caches.empty()) o.io_caches = o.quick ? std::vector<std::string>{"hot"} : std::vector<std::string>{"hot", "cold"};
  if (o.io_depths.empty()) o.io_depths = o.quick ? std::vector<long>{1, 128} : std::vector<long>{1, 16, 128};
  if (!o.io_size) o.io_size = o.quick ? 256ull << 20 : 1ull << 30;
  if (o.io_dir.empty()) o.io_dir = bench::io::default_io_dir();
  if (!(o.bench.window_s > 0)) o.bench.window_s = o.quick ? 0.2 : 0.4;
  if (!(o.bench.warm_s >= 0)) o.bench.warm_s = o.quick ? 0.05 : 0.1;
  if (o.contenders.empty()) o.contenders = bench::io::all_io_contenders();
  if (o.repeat < 1) o.repeat = 3;
  for (auto& c : o.io_cases)
    if (c != "rand4k" && c != "seq1m") return false;
  for (auto& c : o.io_caches)
    if (c != "hot" && c != "cold") return false;
  for (long d : o.io_depths)
    if (d < 1 || d > 4096) return false;
  return true;
}

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  o.repeat = -1;
  o.bench.window_s = -1;
  o.bench.warm_s = -1;
  for (int i = 1; i < argc; ++i)
    if (!parse_one(o, argc, argv, i)) {
      print_usage();
      return std::nullopt;
    }
  if (o.io) {
    if (io_defaults(o)) return o;
    print_usage();
    return std::nullopt;
  }
  if (o.lats.empty()) o.lats = o.quick ? std::vector<long>{0, 50} : std::vector<long>{0, 10, 50, 1000};
  if (o.cs.empty()) o.cs = o.quick ? std::vector<long>{1, 4096} : std::vector<long>{1, 64, 4096, 65536};
  if (o.repeat < 1) o.repeat = 3;  // medians of 3, quick or not
  if (!(o.bench.window_s > 0)) o.bench.window_s = o.quick ? 0.2 : 0.6;
  if (!(o.bench.warm_s >= 0)) o.bench.warm_s = o.quick ? 0.05 : 0.15;
  if (o.contenders.empty()) o.contenders = all_contenders();
  return o;
}

}  // namespace bench
