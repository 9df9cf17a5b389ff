// Exactly once (invariant 1) over many randomized runs mixing deadlines,
// cancellations of every type, lease conflicts and injected faults.
#include <doctest/doctest.h>

#include <asio.hpp>
#include <map>
#include <random>

#include "introspection.hpp"
#include "reactor_support.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using rtest::dev;
namespace sim = xrtio::sim;

TEST_CASE("reactor: every handler is called exactly once over many randomized runs (timeouts, cancellations, "
          "faults, conflicts)") {
  const int total = rtest::sanitized ? 20000 : 100000;
  MESSAGE("randomized runs: " << total << std::string(rtest::sanitized ? " (sanitizer build)" : ""));

  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.latency.jitter = 100us;  // 0 .. 100 us per run
  cfg.latency.seed = 42;
  // Per device run number: 6 % fail, 8 % hang 0.1 .. 2.1 ms then complete, the rest run normally.
  cfg.fault_selector = [](std::string_view, std::uint64_t n) -> sim::fault_rule {
    auto x = rtest::mix(n * 7919) % 100;
    if (x < 6) return {.kernel = "", .what = sim::fault::fail};
    if (x < 14) return {.kernel = "", .what = sim::fault::hang, .duration = std::chrono::microseconds(100 + rtest::mix(n) % 2000)};
    return {};
  };
  rtest::mode_runtime rt;
  auto ctx = sim::open(std::move(cfg));
  ctx.bind(rt);
  auto vadd = ctx.kernel("vadd");
  auto noop = ctx.kernel("noop");
  std::vector<xrtio::buffer> ins, outs;
  for (int i = 0; i < 8; ++i) ins.push_back(ctx.alloc(64));
  for (int i = 0; i < 24; ++i) outs.push_back(ctx.alloc(64));

  struct rec {
    asio::cancellation_signal sig;
    int calls = 0;
    std::size_t pos = 0;  // in `pending`
  };
  std::vector<rec> recs(total);
  std::vector<int> pending;
  std::mt19937_64 rng(12345);
  asio::io_context io;
  int launched = 0, finished = 0, inconsistent = 0, emits = 0;
  const std::size_t window = 64;
  std::map<std::string, int> outcomes;
  int ok = 0, timed_out = 0, aborted = 0, run_error = 0, in_use = 0, other = 0;

  auto random_cancel = [&](int id) {
    static constexpr asio::cancellation_type types[] = {
        asio::cancellation_type::terminal, asio::cancellation_type::partial, asio::cancellation_type::total};
    recs[id].sig.emit(types[rng() % 3]);
    ++emits;
  };

  std::function<void()> launch_one;
  auto last_done = rtest::clock::now();
  auto max_gap = rtest::clock::duration::zero();
  auto on_done = [&](int id, std::error_code ec, const xrtio::run_result& r) {
    auto now = rtest::clock::now();
    max_gap = std::max(max_gap, now - last_done);
    last_done = now;
    auto& me = recs[id];
    ++me.calls;
    ++finished;
    if (me.calls == 1) {  // unlink from pending
      auto last = pending.back();
      pending[me.pos] = last;
      recs[last].pos = me.pos;
      pending.pop_back();
    }
    if (!ec != (r.state == xrtio::run_state::completed)) ++inconsistent;  // invariant 3
    if (!ec) ++ok;
    else if (ec == xrtio::errc::timed_out) ++timed_out;
    else if (ec == asio::error::operation_aborted) ++aborted;
    else if (ec == xrtio::errc::run_error) ++run_error;
    else if (ec == xrtio::errc::range_in_use) ++in_use;
    else {
      ++other;
      ++outcomes[ec.message()];
    }
    if (!pending.empty() && rng() % 100 < 15) random_cancel(pending[rng() % pending.size()]);
    while (launched < total && pending.size() < window) launch_one();
  };
  launch_one = [&] {
    int id = launched++;
    auto& me = recs[id];
    me.pos = pending.size();
    pending.push_back(id);
    xrtio::run_options o;
    if (rng() % 100 < 25) o.timeout = std::chrono::microseconds(50 + rng() % 2000);
    o.on_conflict = rng() % 2 ? xrtio::conflict_policy::wait : xrtio::conflict_policy::fail;
    auto token = asio::bind_cancellation_slot(
        me.sig.slot(),
        asio::bind_executor(io, [&on_done, id](std::error_code ec, xrtio::run_result r) { on_done(id, ec, r); }));
    if (rng() % 10 == 0) {
      xrtio::async_run(noop, o, token);
    } else {
      auto& a = ins[rng() % ins.size()];
      auto& b = ins[rng() % ins.size()];
      auto& c = outs[rng() % outs.size()];
      xrtio::async_run(vadd, xrtio::in(a), xrtio::in(b), xrtio::out(c), std::uint32_t{16}, o, token);
    }
    if (rng() % 100 < 3) random_cancel(id);  // before the reactor even saw it
  };

  auto t0 = rtest::clock::now();
  last_done = t0;
  asio::post(io, [&] {
    while (launched < total && pending.size() < window) launch_one();
  });
  io.run();
  auto secs = std::chrono::duration<double>(rtest::clock::now() - t0).count();

  MESSAGE("took " << secs << " s; ok " << ok << ", timed_out " << timed_out << ", cancelled " << aborted
                  << ", run_error " << run_error << ", range_in_use " << in_use << ", other " << other
                  << "; cancellation emits " << emits);
  for (auto& [what, n] : outcomes) MESSAGE("other outcome: " << what << " x" << n);
  auto gap_ms = std::chrono::duration<double, std::milli>(max_gap).count();
  MESSAGE("longest time between two completions: " << gap_ms << " ms");
  CHECK(gap_ms < 900.0);  // no stall (e.g. a lost wake-up rescued only by the 1 s abort grace)
  CHECK(launched == total);
  CHECK(finished == total);
  int not_once = 0;
  for (auto& r : recs)
    if (r.calls != 1) ++not_once;
  CHECK(not_once == 0);
  CHECK(pending.empty());
  CHECK(inconsistent == 0);
  CHECK(ok + timed_out + aborted + run_error + in_use + other == total);
  CHECK(other == 0);
  // Every outcome kind actually happened.
  CHECK(ok > 0);
  CHECK(timed_out > 0);
  CHECK(aborted > 0);
  CHECK(run_error > 0);
  CHECK(in_use > 0);

  auto s = rt.stats();
  CHECK(s.in_flight == 0);
  CHECK(s.completed == std::uint64_t(ok));
  CHECK(s.timed_out == std::uint64_t(timed_out));
  CHECK(s.cancelled == std::uint64_t(aborted));
  CHECK(s.failed == std::uint64_t(run_error + in_use + other));
  CHECK(s.retained == 0);
  CHECK(s.submitted == std::uint64_t(total - in_use));  // conflicts are refused before submission
  for (auto& b : ins) {
    CHECK(xtest::tracker(b).active_count() == 0);
    CHECK(xtest::tracker(b).waiting_count() == 0);
  }
  for (auto& b : outs) {
    CHECK(xtest::tracker(b).active_count() == 0);
    CHECK(xtest::tracker(b).waiting_count() == 0);
  }
  auto d = dev(ctx).stats();
  CHECK(d.completed + d.failed + d.aborted == d.started);  // nothing left on the device
  CHECK(d.started <= s.submitted);
}
