#include "options.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace soak {
namespace {
constexpr const char* usage =
    "usage: xrtio-soak [--runs N] [--seed S] [--threads T] [--round-runs R]\n"
    "                  [--mode mixed|thread|inloop] [--abort-grace-ms G]\n"
    "                  [--hang-limit-s H] [--quiet]\n"
    "A randomized soak of xrtio on the simulated device (docs/RELIABILITY.md, \"Soak\").\n"
    "Exit status: 0 when no check was violated, 1 on any violation, 2 on bad usage.\n";

bool number(const char* s, std::uint64_t& out) {
  if (!s || !*s) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return false;
  out = v;
  return true;
}
}  // namespace

std::optional<options> parse_options(int argc, char** argv, int& exit_code) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    std::uint64_t n = 0;
    auto need = [&](bool ok) {
      if (!ok) {
        std::fprintf(stderr, "xrtio-soak: %s needs a valid value (got %s)\n%s", argv[i], v ? v : "nothing", usage);
        exit_code = 2;
      }
      return ok;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      exit_code = 0;
      return std::nullopt;
    } else if (a == "--quiet") {
      o.quiet = true;
      continue;
    } else if (a == "--runs") {
      if (!need(number(v, n) && n > 0)) return std::nullopt;
      o.runs = n;
    } else if (a == "--seed") {
      if (!need(number(v, n))) return std::nullopt;
      o.seed = n;
    } else if (a == "--threads") {
      if (!need(number(v, n) && n > 0 && n <= 64)) return std::nullopt;
      o.threads = static_cast<unsigned>(n);
    } else if (a == "--round-runs") {
      if (!need(number(v, n) && n >= 10)) return std::nullopt;
      o.round_runs = n;
    } else if (a == "--abort-grace-ms") {
      if (!need(number(v, n) && n >= 10 && n <= 10000)) return std::nullopt;
      o.abort_grace = std::chrono::milliseconds(n);
    } else if (a == "--hang-limit-s") {
      if (!need(number(v, n) && n >= 5 && n <= 3600)) return std::nullopt;
      o.hang_limit_s = static_cast<unsigned>(n);
    } else if (a == "--mode") {
      std::string_view m = v ? v : "";
      if (m == "mixed") o.mode = reactor_mode::mixed;
      else if (m == "thread") o.mode = reactor_mode::thread;
      else if (m == "inloop") o.mode = reactor_mode::inloop;
      else if (!need(false)) return std::nullopt;
    } else {
      std::fprintf(stderr, "xrtio-soak: unknown argument %s\n%s", argv[i], usage);
      exit_code = 2;
      return std::nullopt;
    }
    ++i;
  }
  return o;
}

}  // namespace soak
