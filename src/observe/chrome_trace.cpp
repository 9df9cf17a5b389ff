// The trace's public readers: statistics, the events, and the Chrome
// trace-event JSON export (xrtio/trace.hpp).
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <ostream>

#include "reactor/reactor.hpp"
#include "xrtio/trace.hpp"

namespace xrtio {

namespace {

const detail::trace_ring* ring_of(const runtime& rt) noexcept {
  const auto* o = detail::access::reactor(rt)->observer();
  return o ? o->trace() : nullptr;
}

constexpr std::size_t kinds = static_cast<std::size_t>(trace_event_kind::retained) + 1;

// One run's events: the first time of each kind, and what it ended as.
struct run_events {
  std::array<std::optional<std::int64_t>, kinds> at{};
  std::array<std::uint32_t, kinds> thread{};
  std::int64_t first = 0, last = 0;
  run_state state = run_state::new_;
  bool failed = false;
  std::optional<std::int64_t> get(trace_event_kind k) const { return at[static_cast<std::size_t>(k)]; }
};

struct slice {
  const char* name;
  std::int64_t begin, end;
};

// Nanoseconds as microseconds with three decimals (exact).
void write_us(std::ostream& out, std::int64_t ns) {
  if (ns < 0) {
    out << '-';
    ns = -ns;
  }
  char frac[4] = {char('0' + ns / 100 % 10), char('0' + ns / 10 % 10), char('0' + ns % 10), 0};
  out << ns / 1000 << '.' << frac;
}

class json_writer {
 public:
  json_writer(std::ostream& out, std::int64_t base) : out_(out), base_(base) {}
  void complete(std::uint64_t run, const slice& s, const run_events* args) {
    open();
    out_ << R"({"name":")" << s.name << R"(","cat":"xrtio","ph":"X","pid":1,"tid":)" << run << R"(,"ts":)";
    write_us(out_, s.begin - base_);
    out_ << R"(,"dur":)";
    write_us(out_, s.end - s.begin);
    if (args) {
      auto th = [&](trace_event_kind k) { return args->thread[static_cast<std::size_t>(k)]; };
      out_ << R"(,"args":{"run":)" << run << R"(,"state":")" << to_string(args->state) << R"(","failed":)"
           << (args->failed ? "true" : "false") << R"(,"submit_thread":)" << th(trace_event_kind::submitted)
           << R"(,"observe_thread":)" << th(trace_event_kind::observed) << R"(,"resume_thread":)"
           << th(trace_event_kind::resumed) << '}';
    }
    out_ << '}';
  }
  void instant(std::uint64_t run, const char* name, std::int64_t t) {
    open();
    out_ << R"({"name":")" << name << R"(","cat":"xrtio","ph":"i","s":"t","pid":1,"tid":)" << run << R"(,"ts":)";
    write_us(out_, t - base_);
    out_ << '}';
  }
  void meta(const char* what, std::uint64_t tid, const std::string& name) {
    open();
    out_ << R"({"name":")" << what << R"(","ph":"M","pid":1,"tid":)" << tid << R"(,"args":{"name":")" << name
         << R"("}})";
  }

 private:
  void open() {
    out_ << (first_ ? "\n" : ",\n");
    first_ = false;
  }
  std::ostream& out_;
  std::int64_t base_;
  bool first_ = true;
};

// The slices of one run, nested and in order whatever the stamps say: each
// phase starts no earlier than the previous one ended, and a child lies
// within its parent.
void write_run(json_writer& w, std::uint64_t id, const run_events& r) {
  using tk = trace_event_kind;
  slice run{"run", r.first, r.last};
  w.complete(id, run, &r);
  std::int64_t cursor = run.begin;
  auto phase = [&](const char* name, std::int64_t b, std::int64_t e) {
    b = std::clamp(std::max(b, cursor), run.begin, run.end);
    e = std::clamp(e, b, run.end);
    cursor = e;
    slice s{name, b, e};
    w.complete(id, s, nullptr);
    return s;
  };
  auto sub = r.get(tk::submitted), leases = r.get(tk::leases_granted), started = r.get(tk::started);
  auto dc = r.get(tk::device_completed), obs = r.get(tk::observed), res = r.get(tk::resumed);
  auto ab = r.get(tk::abort_begin), ae = r.get(tk::abort_end);
  if (sub && leases) phase("leases", *sub, *leases);
  std::optional<std::int64_t> device_end;
  if (started) {
    std::int64_t e = dc ? *dc : ae ? *ae : obs ? *obs : r.last;
    if (ae) e = std::max(e, *ae);
    auto dev = phase("device", *started, e);
    device_end = dev.end;
    if (ab) {
      std::int64_t b = std::clamp(*ab, dev.begin, dev.end);
      slice abort{"abort", b, std::clamp(ae ? *ae : dev.end, b, dev.end)};
      w.complete(id, abort, nullptr);
    }
  }
  if (device_end && obs) phase("reactor", *device_end, *obs);
  if (obs && res) phase("resume", *obs, *res);
  if (auto t = r.get(tk::retained)) w.instant(id, "retained", std::clamp(*t, run.begin, run.end));
}

}  // namespace

std::string_view to_string(trace_event_kind k) noexcept {
  switch (k) {
    case trace_event_kind::submitted: return "submitted";
    case trace_event_kind::leases_granted: return "leases_granted";
    case trace_event_kind::started: return "started";
    case trace_event_kind::device_completed: return "device_completed";
    case trace_event_kind::observed: return "observed";
    case trace_event_kind::resumed: return "resumed";
    case trace_event_kind::abort_begin: return "abort_begin";
    case trace_event_kind::abort_end: return "abort_end";
    case trace_event_kind::retained: return "retained";
  }
  return "unknown";
}

trace_stats trace_statistics(const runtime& rt) noexcept {
  const auto* ring = ring_of(rt);
  return ring ? ring->stats() : trace_stats{};
}

std::vector<trace_event> trace_events(const runtime& rt) {
  const auto* ring = ring_of(rt);
  return ring ? ring->snapshot() : std::vector<trace_event>{};
}

void write_chrome_trace(const runtime& rt, std::ostream& out) {
  auto events = trace_events(rt);
  auto stats = trace_statistics(rt);
  std::map<std::uint64_t, run_events> runs;
  std::int64_t base = 0;
  for (const auto& e : events) {
    std::int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(e.time.time_since_epoch()).count();
    base = (&e == &events.front()) ? t : std::min(base, t);
    auto [it, fresh] = runs.try_emplace(e.run);
    auto& r = it->second;
    if (fresh) r.first = r.last = t;
    r.first = std::min(r.first, t);
    r.last = std::max(r.last, t);
    auto k = static_cast<std::size_t>(e.kind);
    if (!r.at[k]) {
      r.at[k] = t;
      r.thread[k] = e.thread;
    }
    if (e.kind == trace_event_kind::observed || e.kind == trace_event_kind::retained) {
      r.state = e.state;
      r.failed = r.failed || e.failed || e.kind == trace_event_kind::retained;
    }
  }
  out << R"({"displayTimeUnit":"ns","otherData":{"recorded":)" << stats.recorded << R"(,"dropped":)" << stats.dropped
      << R"(,"capacity":)" << stats.capacity << R"(},"traceEvents":[)";
  json_writer w(out, base);
  w.meta("process_name", 0, "xrtio runtime");
  for (const auto& [id, r] : runs) {
    w.meta("thread_name", id, "run " + std::to_string(id));
    write_run(w, id, r);
  }
  out << "\n]}\n";
}

}  // namespace xrtio
