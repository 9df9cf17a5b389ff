// Parsing xrtio-bench's arguments and filling in the quick or full defaults.
//
// Every value is checked where it is read: all of its text must be a number
// in the option's range (or a known name), else the bench prints
// "xrtio-bench: OPTION: WHY (got 'TEXT')" and exits with 2 before it
// measures anything. Values were read with atoi, atof and strtol before, so
// junk became 0, and 0 or a negative number became a default or a cell that
// measured nothing, all without a word.
#include "options.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "contenders.hpp"
#include "io_contenders.hpp"
#include "io_test_file.hpp"

namespace bench {
namespace {

// The longest time an option takes in microseconds: an hour. No latency,
// spin, doze or delay the bench measures comes near it, and the bound keeps
// the conversion to the runtime's nanoseconds far from overflowing.
constexpr long long max_us = 3'600'000'000LL;
// The longest window or warm-up in seconds: a day. The bound keeps the
// sleep's conversion to the clock's nanoseconds far from overflowing.
constexpr double max_seconds = 86400;

// One option's value as given. Its checks report a bad value naming the
// option and the whole text; a list's checks also name the bad item.
struct value {
  const char* opt;
  std::string_view text;

  // Prints the refusal; always false, so that a check can return it.
  bool refuse(std::string_view item, const std::string& why) const {
    std::string which = item == text ? "" : "'" + std::string(item) + "': ";
    std::fprintf(stderr, "xrtio-bench: %s: %s%s (got '%.*s')\n", opt, which.c_str(), why.c_str(), int(text.size()),
                 text.data());
    return false;
  }
};

// The range a value must be in, as the refusal says it.
std::string range_why(long long lo, long long hi, const char* unit) {
  if (hi == LLONG_MAX) return "must be at least " + std::to_string(lo) + unit;
  return "must be from " + std::to_string(lo) + " to " + std::to_string(hi) + unit;
}

// Reads all of `item` (the value or one item of its list) as a whole number
// from lo to hi.
bool whole_item(const value& v, std::string_view item, long long lo, long long hi, long long& out,
                const char* unit = "") {
  if (item.empty()) return v.refuse(item, item == v.text ? "empty" : "an empty item in the list");
  const char* end = item.data() + item.size();
  auto [ptr, ec] = std::from_chars(item.data(), end, out);
  if (ec == std::errc::invalid_argument || ptr != end) return v.refuse(item, "not a whole number");
  if (ec == std::errc::result_out_of_range || out < lo || out > hi) return v.refuse(item, range_why(lo, hi, unit));
  return true;
}

// The value as a whole number from lo to hi (at most what T holds).
template <class T>
bool whole(const value& v, long long lo, long long hi, T& out, const char* unit = "") {
  if (static_cast<unsigned long long>(std::numeric_limits<T>::max()) < static_cast<unsigned long long>(hi))
    hi = static_cast<long long>(std::numeric_limits<T>::max());
  long long n = 0;
  if (!whole_item(v, v.text, lo, hi, n, unit)) return false;
  out = static_cast<T>(n);
  return true;
}

constexpr const char* us_unit = " us (an hour)";

// A length of time in microseconds, from 0 (the runtime's "never" for its
// spins and dozes) to max_us.
template <class Duration>
bool micros(const value& v, Duration& out) {
  long long n = 0;
  if (!whole(v, 0, max_us, n, us_unit)) return false;
  out = std::chrono::microseconds(n);
  return true;
}

// The items of a comma-separated list; "" is one empty item.
std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> items;
  for (;;) {
    auto comma = s.find(',');
    items.push_back(s.substr(0, comma));
    if (comma == std::string_view::npos) return items;
    s.remove_prefix(comma + 1);
  }
}

// A comma-separated list of whole numbers, each from lo to hi.
bool whole_list(const value& v, long long lo, long long hi, std::vector<long>& out, const char* unit = "") {
  std::vector<long> list;
  for (auto item : split(v.text)) {
    long long n = 0;
    if (!whole_item(v, item, lo, hi, n, unit)) return false;
    list.push_back(long(n));
  }
  out = std::move(list);
  return true;
}

// "what (a, b, c)": what a name is not, and the names it could be.
std::string not_one_of(const char* what, const std::vector<std::string>& known) {
  std::string why = what;
  for (std::size_t i = 0; i < known.size(); ++i) why += (i ? ", " : " (") + known[i];
  return why + ")";
}

// A comma-separated list of names, each one of `known` (any name if empty:
// --contenders, whose names depend on --io, are checked at the end).
bool name_list(const value& v, const std::vector<std::string>& known, std::vector<std::string>& out) {
  std::vector<std::string> list;
  for (auto item : split(v.text)) {
    if (item.empty()) return v.refuse(item, item == v.text ? "empty" : "an empty item in the list");
    if (!known.empty() && std::find(known.begin(), known.end(), item) == known.end())
      return v.refuse(item, not_one_of("not a known name", known));
    list.emplace_back(item);
  }
  out = std::move(list);
  return true;
}

// A byte count with an optional K, M or G suffix (binary), from lo to hi.
bool byte_count(const value& v, std::uint64_t lo, std::uint64_t hi, std::uint64_t& out) {
  auto why = hi == std::numeric_limits<std::uint64_t>::max()
                 ? "must be at least " + std::to_string(lo) + (lo == 1 ? " byte" : " bytes")
                 : "must be from " + std::to_string(lo) + " to " + std::to_string(hi) + " bytes";
  // A negative count is out of range, not junk: say what the range is.
  if (v.text.starts_with('-')) return v.refuse(v.text, why);
  const char* end = v.text.data() + v.text.size();
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.text.data(), end, n);
  if (ec == std::errc::invalid_argument) return v.refuse(v.text, "not a byte count (digits, then K, M or G)");
  int shift = 0;
  if (ptr != end) {
    if (end - ptr != 1) return v.refuse(v.text, "not a byte count (digits, then K, M or G)");
    switch (*ptr) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return v.refuse(v.text, "not a byte count (digits, then K, M or G)");
    }
  }
  if (ec == std::errc::result_out_of_range || n > (hi >> shift) || (n << shift) < lo) return v.refuse(v.text, why);
  out = n << shift;
  return true;
}

// xrtio's byte limits for --io: 0 and up (-1 in options means the default).
bool io_limit(const value& v, std::int64_t& out) {
  std::uint64_t n = 0;
  if (!byte_count(v, 0, std::uint64_t(std::numeric_limits<std::int64_t>::max()), n)) return false;
  out = std::int64_t(n);
  return true;
}

// Seconds: more than 0 (a window) or at least 0 (a warm-up), at most max_seconds.
bool seconds(const value& v, bool zero_too, double& out) {
  const char* end = v.text.data() + v.text.size();
  double s = 0;
  auto [ptr, ec] = std::from_chars(v.text.data(), end, s);
  if (ec == std::errc::invalid_argument || ptr != end) return v.refuse(v.text, "not a number of seconds");
  bool low = zero_too ? s < 0 : s <= 0;
  if (ec == std::errc::result_out_of_range || !std::isfinite(s) || low || s > max_seconds) {
    std::string most = std::to_string(int(max_seconds)) + " seconds";
    return v.refuse(v.text, zero_too ? "must be from 0 to " + most : "must be more than 0 and at most " + most);
  }
  out = s;
  return true;
}

// A path, taken as it is: opening it says what is wrong with it.
bool text(const value& v, std::string& out) {
  out = v.text;
  return true;
}

// The options that take a value, and how each reads it. A refused value ends
// the parse, so what a check leaves half set is never used.
struct valued_option {
  const char* name;
  bool (*read)(options&, const value&);
};

const valued_option valued_options[] = {
    {"--repeat", [](options& o, const value& v) { return whole(v, 1, INT_MAX, o.repeat); }},
    {"--window", [](options& o, const value& v) { return seconds(v, false, o.bench.window_s); }},
    {"--warm", [](options& o, const value& v) { return seconds(v, true, o.bench.warm_s); }},
    {"--io-dir", [](options& o, const value& v) { return text(v, o.io_dir); }},
    {"--io-size", [](options& o, const value& v) { return byte_count(v, 1, UINT64_MAX, o.io_size); }},
    {"--io-cases", [](options& o, const value& v) { return name_list(v, {"rand4k", "seq1m"}, o.io_cases); }},
    {"--io-cache", [](options& o, const value& v) { return name_list(v, {"hot", "cold"}, o.io_caches); }},
    // 1 to 4096: the bound --io checked before.
    {"--io-depths", [](options& o, const value& v) { return whole_list(v, 1, 4096, o.io_depths); }},
    {"--io-inline-limit", [](options& o, const value& v) { return io_limit(v, o.io_inline_limit); }},
    {"--io-worker-min", [](options& o, const value& v) { return io_limit(v, o.io_worker_min); }},
    {"--io-worker-floor", [](options& o, const value& v) { return io_limit(v, o.io_worker_floor); }},
    {"--json", [](options& o, const value& v) { return text(v, o.json); }},
    {"--plot", [](options& o, const value& v) { return text(v, o.plot); }},
    {"--latencies", [](options& o, const value& v) { return whole_list(v, 0, max_us, o.lats, us_unit); }},
    // A cell's workers are counted in an int.
    {"--in-flight", [](options& o, const value& v) { return whole_list(v, 1, INT_MAX, o.cs); }},
    {"--contenders", [](options& o, const value& v) { return name_list(v, {}, o.contenders); }},
    {"--xrt-delay-us", [](options& o, const value& v) { return whole(v, 0, max_us, o.xrt_delay_us, us_unit); }},
    {"--mkxclbin", [](options& o, const value& v) { return text(v, o.mkxclbin); }},
    {"--spin-us", [](options& o, const value& v) { return micros(v, o.bench.rt.spin_window); }},
    {"--sim-idle-poll-us",
     [](options& o, const value& v) { return micros(v, o.bench.sim_idle_poll.emplace()); }},
    {"--doze-us", [](options& o, const value& v) { return micros(v, o.bench.rt.backlog_doze); }},
    {"--max-poll-us", [](options& o, const value& v) { return micros(v, o.bench.rt.max_poll_interval); }},
    {"--trace-capacity",
     [](options& o, const value& v) { return whole(v, 0, LLONG_MAX, o.bench.rt.trace_capacity); }},
};

// The names --contenders may give: every contender of the mode, whether
// this build has it or not (an XRT contender in a build without XRT gives
// no rows), and for --io the two xrtio rows left out of its default list.
std::vector<std::string> known_contenders(const options& o) {
  if (!o.io) return all_contenders();
  auto names = io::all_io_contenders();
  names.insert(names.end(), {"xrtio-noreg", "xrtio-inloop-noreg"});
  return names;
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

enum class step { ok, unknown, missing, bad };

// Reads argv[i] and, for an option that takes one, its value (advancing i).
// --repeat, --window and --warm go to o.repeat and o.bench (defaults later).
step parse_one(options& o, int argc, char** argv, int& i) {
  std::string_view a = argv[i];
  auto& rt = o.bench.rt;
  if (a == "--quick") o.quick = true;
  else if (a == "--no-xrt") o.no_xrt = true;
  else if (a == "--io") o.io = true;
  else if (a == "--no-spin-trials") rt.spin_trials = false;
  else if (a == "--no-predict") rt.predict_completions = false;
  else if (a == "--predict") rt.predict_completions = true;
  else if (a == "--latency-histograms") rt.latency_histograms = true;
  else {
    auto opt = std::find_if(std::begin(valued_options), std::end(valued_options),
                            [&](const valued_option& v) { return a == v.name; });
    if (opt == std::end(valued_options)) {
      std::fprintf(stderr, "xrtio-bench: unknown option '%s'\n", argv[i]);
      return step::unknown;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "xrtio-bench: %s: needs a value\n", argv[i]);
      return step::missing;
    }
    ++i;
    return opt->read(o, value{opt->name, argv[i]}) ? step::ok : step::bad;
  }
  return step::ok;
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
void io_defaults(options& o) {
  if (o.io_cases.empty()) o.io_cases = {"rand4k", "seq1m"};
  if (o.io_caches.empty()) o.io_caches = o.quick ? std::vector<std::string>{"hot"} : std::vector<std::string>{"hot", "cold"};
  if (o.io_depths.empty()) o.io_depths = o.quick ? std::vector<long>{1, 128} : std::vector<long>{1, 16, 128};
  if (!o.io_size) o.io_size = o.quick ? 256ull << 20 : 1ull << 30;
  if (o.io_dir.empty()) o.io_dir = bench::io::default_io_dir();
  if (!(o.bench.window_s > 0)) o.bench.window_s = o.quick ? 0.2 : 0.4;
  if (!(o.bench.warm_s >= 0)) o.bench.warm_s = o.quick ? 0.05 : 0.1;
  if (o.contenders.empty()) o.contenders = bench::io::all_io_contenders();
  if (o.repeat < 1) o.repeat = 3;
}

// Values given are checked as they are read, so what is still unset here
// (empty, or the negative marks below) takes the mode's default.
std::optional<options> parse_options(int argc, char** argv) {
  options o;
  o.repeat = -1;
  o.bench.window_s = -1;
  o.bench.warm_s = -1;
  const char* contenders = nullptr;  // the last --contenders value, checked once --io is known
  for (int i = 1; i < argc; ++i) {
    int at = i;
    switch (parse_one(o, argc, argv, i)) {
      case step::ok:
        if (!std::strcmp(argv[at], "--contenders")) contenders = argv[i];
        break;
      case step::unknown:
      case step::missing:
        print_usage();
        return std::nullopt;
      case step::bad:
        return std::nullopt;
    }
  }
  // The names are those of the mode, which a later --io may choose.
  auto known = known_contenders(o);
  for (auto& n : o.contenders)
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      value{"--contenders", contenders}.refuse(n,
                                               not_one_of(o.io ? "not an --io contender" : "not a contender", known));
      return std::nullopt;
    }
  if (o.io) {
    io_defaults(o);
    return o;
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
