#include "options.hpp"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace server {
namespace {

constexpr const char* usage =
    "usage: xrtio-server --port PORT [--threads N] [--sim-latency-us L] [--baseline] [--inloop | --reactor] [--no-run]\n"
    "                    [--pool-threads N] [--xrt-noop] [--trace FILE] [--trace-capacity EVENTS] [--deadline-ms MS] [--grace-ms MS]\n"
    "                    [--budget-bytes B] [--max-body B] [--compute-units N] [--idle-trim-ms MS]\n";

template <class T>
bool number(std::string_view s, T& out, T lo, T hi) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

std::optional<options> parse_options(int argc, char** argv) {
  options o;
  bool have_port = false;
  bool threads_given = false;
  auto fail = [](const std::string& why) {
    std::fprintf(stderr, "xrtio-server: %s\n%s", why.c_str(), usage);
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view& v) {
      if (i + 1 >= argc) return false;
      v = argv[++i];
      return true;
    };
    std::string_view v;
    long long n = 0;
    if (a == "--baseline") o.baseline = true;
    else if (a == "--inloop") o.inloop = true;
    else if (a == "--reactor") o.reactor = true;
    else if (a == "--no-run") o.no_run = true;
    else if (a == "--xrt-noop") o.xrt_noop = true;
    else if (a == "--help" || a == "-h") return fail("help");
    else if (!value(v)) return fail("unknown flag or missing value: " + std::string(a));
    else if (a == "--port") {
      if (!number<long long>(v, n, 0, 65535)) return fail("bad --port " + std::string(v));
      o.port = static_cast<std::uint16_t>(n);
      have_port = true;
    } else if (a == "--threads") {
      if (!number<unsigned>(v, o.threads, 1, 256)) return fail("bad --threads " + std::string(v));
      threads_given = true;
    } else if (a == "--pool-threads") {
      if (!number<unsigned>(v, o.pool_threads, 1, 4096)) return fail("bad --pool-threads " + std::string(v));
    } else if (a == "--compute-units") {
      if (!number<unsigned>(v, o.compute_units, 1, 64)) return fail("bad --compute-units " + std::string(v));
    } else if (a == "--sim-latency-us") {
      if (!number<long>(v, o.sim_latency_us, 0, 3600L * 1000 * 1000)) return fail("bad --sim-latency-us " + std::string(v));
    } else if (a == "--deadline-ms") {
      if (!number<long long>(v, n, 1, 3600LL * 1000)) return fail("bad --deadline-ms " + std::string(v));
      o.deadline = std::chrono::milliseconds(n);
    } else if (a == "--grace-ms") {
      if (!number<long long>(v, n, 0, 3600LL * 1000)) return fail("bad --grace-ms " + std::string(v));
      o.grace = std::chrono::milliseconds(n);
    } else if (a == "--idle-trim-ms") {
      if (!number<long long>(v, n, 0, 3600LL * 1000)) return fail("bad --idle-trim-ms " + std::string(v));
      o.idle_trim = std::chrono::milliseconds(n);
    } else if (a == "--budget-bytes") {
      if (!number<std::size_t>(v, o.budget_bytes, 1, std::size_t{1} << 40)) return fail("bad --budget-bytes " + std::string(v));
    } else if (a == "--max-body") {
      // At most 2^32 - 1: the kernels take their sizes as u32 (a 4 GiB
      // checksum body would have been n = 0; found by a helper's audit).
      if (!number<std::size_t>(v, o.max_body, 1, (std::size_t{1} << 32) - 1))
        return fail("bad --max-body " + std::string(v));
    } else if (a == "--trace-capacity") {
      if (!number<std::size_t>(v, o.trace_capacity, 1, std::size_t{1} << 26)) return fail("bad --trace-capacity " + std::string(v));
    } else if (a == "--trace") {
      o.trace_file = std::string(v);
    } else {
      return fail("unknown flag " + std::string(a));
    }
  }
  if (!have_port) return fail("--port is required (0 picks a free one)");
  if (o.inloop && o.baseline) return fail("--inloop and --baseline exclude each other (the baseline's runs bypass the runtime)");
  if (o.inloop && threads_given && o.threads != 1) return fail("--inloop drives the runtime from one io thread: --threads must be 1");
  if (o.inloop && o.reactor) return fail("--inloop and --reactor exclude each other");
  if (o.reactor && o.baseline) return fail("--reactor and --baseline exclude each other (the baseline's runs bypass the runtime)");
  if (o.inloop) o.threads = 1;
  // One io thread that serves every connection is the thread in-loop mode is
  // for: it observes its runs itself, with no reactor thread to wake it
  // (docs/SERVER.md, "Threading"). Several io threads share the reactor.
  if (o.threads == 1 && !o.reactor && !o.baseline) o.inloop = true;
  return o;
}

}  // namespace server
