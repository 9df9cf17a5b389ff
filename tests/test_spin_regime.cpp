// Spin or sleep, tried both ways now and then (src/reactor/spin_regime.hpp;
// docs/DESIGN.md, "Spin or sleep: a trial now and then"): the policy fed
// with made-up epochs, then a runtime that runs its trials.
#include <doctest/doctest.h>

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "../src/reactor/reactor.hpp"
#include "../src/reactor/spin_regime.hpp"
#include "reactor_support.hpp"
#include "sim_runtime.hpp"
#include "xrtio/detail/io_linger.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using xrtio::detail::spin_regime;

namespace xrtio::detail {
// The reactor's regime, set from a test. Only before the runtime's first
// submission, once its loop has announced its first sleep: that sleep has
// no timer and nothing has ever notified the loop (no notify can be left
// pending), so it stays asleep until the test's first submission. The
// seq_cst load of the announcement orders the loop's passes before the
// write; the submission's intake orders the write before the next pass.
struct reactor_test_access {
  static void set_regime(reactor& r, const spin_regime& g) {
    REQUIRE(r.counters_.submitted.load() == 0);
    REQUIRE(rtest::eventually([&] { return r.sleeping_.load(std::memory_order_seq_cst); }, 10s));
    r.regime_ = g;
    r.publish_short_runs();
  }
  static bool asleep(const reactor& r) { return r.sleeping_.load(std::memory_order_seq_cst); }
  // Read while the loop sleeps after its last completions: an extra pass
  // (a notify left pending) completes nothing and learns nothing.
  static bool learned_short_runs(const reactor& r) { return r.resubmit_.short_runs(); }
};
}  // namespace xrtio::detail

namespace {
using clock = spin_regime::clock;

/// Feeds a regime whole epochs: each one `runs` runs long, at the rate of
/// the way the regime is on (spinning or not).
struct feeder {
  spin_regime& g;
  clock::time_point now;
  std::uint64_t finished = 0;
  explicit feeder(spin_regime& r, clock::time_point start = clock::time_point{} + 1s) : g(r), now(start) {
    g.tick(now, finished);
  }
  /// One epoch in which `spin_runs` runs finish if the regime spins, else
  /// `sleep_runs`.
  void epoch(std::uint64_t spin_runs, std::uint64_t sleep_runs) {
    auto n = g.spinning() ? spin_runs : sleep_runs;
    now += spin_regime::epoch;
    finished += n;
    g.tick(now, finished);
  }
  void epochs(int k, std::uint64_t spin_runs, std::uint64_t sleep_runs) {
    for (int i = 0; i < k; ++i) epoch(spin_runs, sleep_runs);
  }
};
}  // namespace

TEST_CASE("spin regime: spins, and after first_gap judged epochs tries one epoch without") {
  spin_regime g(true);
  feeder f(g);
  CHECK(g.spinning());
  f.epochs(spin_regime::first_gap - 1, 1000, 1000);
  CHECK(g.spinning());
  CHECK(g.trials() == 0);
  f.epoch(1000, 1000);  // the "before" epoch ends: the trial begins
  CHECK(g.trials() == 1);
  CHECK(g.in_trial());
  CHECK_FALSE(g.spinning());
  f.epoch(1000, 1000);  // the trial ends
  CHECK(g.spinning());
  f.epoch(1000, 1000);  // the epoch after: no better, no switch
  CHECK(g.spinning());
  CHECK(g.switches() == 0);
  CHECK(g.gap() == 2 * spin_regime::first_gap);
}

TEST_CASE("spin regime: a trial that finishes more runs per second by the margin wins, and the other way wins back") {
  spin_regime g(true);
  feeder f(g);
  // A busy host: without spinning, 3 times the runs.
  f.epochs(spin_regime::first_gap + 2, 500, 1500);
  CHECK(g.switches() == 1);
  CHECK_FALSE(g.usual_spins());
  CHECK_FALSE(g.spinning());
  CHECK(g.gap() == spin_regime::first_gap);
  // The host goes idle: now spinning finishes 3 times the runs. The next
  // trial (spinning) wins it back.
  f.epochs(spin_regime::first_gap + 2, 1500, 500);
  CHECK(g.switches() == 2);
  CHECK(g.usual_spins());
  CHECK(g.spinning());
}

TEST_CASE("spin regime: a trial within the margin loses, and trials grow apart up to max_gap") {
  spin_regime g(true);
  feeder f(g);
  // 10 % more without spinning: below the 15 % margin.
  unsigned expect = spin_regime::first_gap;
  for (int t = 0; t < 8; ++t) {
    f.epochs(int(g.gap()) + 2, 1000, 1100);
    expect = std::min(expect * 2, spin_regime::max_gap);
    CHECK(g.gap() == expect);
  }
  CHECK(g.trials() == 8);
  CHECK(g.switches() == 0);
  CHECK(g.gap() == spin_regime::max_gap);
  CHECK(g.spinning());
}

TEST_CASE("spin regime: a load that rises during the trial is not taken for the trial's win") {
  spin_regime g(true);
  feeder f(g);
  f.epochs(spin_regime::first_gap, 500, 500);  // before: 500
  REQUIRE(g.in_trial());
  f.epoch(1000, 1000);  // the trial: 1000, the load doubled meanwhile
  f.epoch(1000, 1000);  // after, spinning again: 1000 too
  CHECK(g.switches() == 0);
  CHECK(g.spinning());
}

TEST_CASE("spin regime: epochs with fewer than min_runs, or that the loop slept through, are not judged") {
  spin_regime g(true);
  feeder f(g);
  // Idle: no trial however long it lasts.
  f.epochs(100, spin_regime::min_runs - 1, spin_regime::min_runs - 1);
  CHECK(g.trials() == 0);
  // One long epoch with many runs (a sleep of 200 ms, then a burst).
  f.now += 200ms;
  f.finished += 100000;
  g.tick(f.now, f.finished);
  CHECK(g.trials() == 0);
  // A trial whose epoch is idle gives no verdict, and the next judged epoch
  // begins another.
  f.epochs(spin_regime::first_gap, 1000, 1000);
  REQUIRE(g.in_trial());
  f.epoch(0, 0);
  CHECK_FALSE(g.in_trial());
  CHECK(g.spinning());
  CHECK(g.switches() == 0);
  f.epoch(1000, 1000);
  CHECK(g.in_trial());
  CHECK(g.trials() == 2);
}

TEST_CASE("spin regime: ticks within an epoch change nothing, and a disabled regime never tries") {
  spin_regime g(true);
  feeder f(g);
  for (int i = 0; i < 1000; ++i) {
    f.now += 10us;
    f.finished += 1;
    CHECK_FALSE(g.tick(f.now, f.finished));
  }
  CHECK(g.trials() == 0);
  spin_regime off(false);
  feeder o(off);
  o.epochs(200, 500, 5000);
  CHECK(off.trials() == 0);
  CHECK(off.spinning());
}

namespace {
/// A closed loop of `workers` noop runs on `ctx`, for `length` on the clock.
xrtio::runtime_stats loop_for(sim_runtime& s, int workers, std::chrono::milliseconds length) {
  asio::io_context io;
  auto end = std::chrono::steady_clock::now() + length;
  struct worker {
    sim_runtime& s;
    asio::io_context& io;
    std::chrono::steady_clock::time_point end;
    void next() {
      xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [this](std::error_code ec, xrtio::run_result) {
                         REQUIRE_FALSE(ec);
                         if (std::chrono::steady_clock::now() < end) next();
                       }));
    }
  };
  std::vector<worker> ws(workers, worker{s, io, end});
  for (auto& w : ws) w.next();
  io.run();
  return s.rt.stats();
}
}  // namespace

TEST_CASE("spin regime: a reactor one epoch short of a trial runs it") {
  sim_runtime s;
  auto& r = *xrtio::detail::access::reactor(s.rt);
  // A regime one judged epoch short of a trial.
  spin_regime g(true);
  feeder f(g);
  f.epochs(spin_regime::first_gap - 1, 1000, 1000);
  REQUIRE(g.trials() == 0);
  xrtio::detail::reactor_test_access::set_regime(r, g);
  // The loop's own epochs (20 ms, 32 runs or more) begin it. Long enough
  // on a slow host (sanitizers, qemu) too.
  xrtio::runtime_stats st;
  for (int round = 0; round < 100 && st.spin_trials == 0; ++round) st = loop_for(s, 4, 50ms);
  MESSAGE("trials ", st.spin_trials, ", switches ", st.spin_switches, ", spinning now ", st.spinning);
  CHECK(st.spin_trials >= 1);
  CHECK(st.spin_switches <= st.spin_trials);
}

TEST_CASE("spin regime: off with spin_trials false, with no spin to try, and in in-loop mode") {
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    xrtio::runtime_options o;
    if (variant == 0) o.spin_trials = false;
    else if (variant == 1) o.spin_window = 0ns;
    else o.reactor_thread = false;
    sim_runtime s(o);
    xrtio::runtime_stats st;
    if (variant == 2) {
      asio::io_context io;
      auto end = std::chrono::steady_clock::now() + 300ms;
      std::function<void()> next = [&] {
        xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                           REQUIRE_FALSE(ec);
                           if (std::chrono::steady_clock::now() < end) next();
                         }));
      };
      next();
      xrtio::run(io, s.rt);
      st = s.rt.stats();
    } else {
      st = loop_for(s, 4, 300ms);
    }
    CHECK(st.spin_trials == 0);
    // Only spin_trials false leaves the reactor thread spinning.
    CHECK(st.spinning == (variant == 0));
  }
}

TEST_CASE("spin regime: while the reactor does not spin, the io thread does not linger either") {
  xrtio::runtime_options o;
  o.spin_window = 20ms;  // every simulated run is short
  sim_runtime s(o);
  auto& r = *xrtio::detail::access::reactor(s.rt);
  // A spinning regime lets the io thread linger for short runs (none
  // learned yet: runs count as short).
  xrtio::detail::reactor_test_access::set_regime(r, spin_regime(true));
  CHECK(xrtio::detail::linger_window(r) == 20ms);
  // A regime whose trial (no spin) won.
  spin_regime g(true);
  feeder f(g);
  f.epochs(spin_regime::first_gap + 2, 500, 1500);
  REQUIRE_FALSE(g.spinning());
  xrtio::detail::reactor_test_access::set_regime(r, g);
  CHECK(xrtio::detail::linger_window(r) == 0ns);
  // Short runs one after the other from an io_context's handlers: none
  // lingers, and the reactor sleeps between them (with a 20 ms window, a
  // spinning one would catch each next event and hardly sleep).
  auto sleeps_before = s.rt.stats().sleeps;
  std::thread([&] {
    asio::io_context io;
    int left = 100, lingered = 0;
    std::function<void()> next = [&] {
      xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
                         REQUIRE_FALSE(ec);
                         if (--left > 0) {
                           next();
                           if (xrtio::detail::linger_active_here()) ++lingered;
                         }
                       }));
    };
    next();
    io.run();
    CHECK(left == 0);
    CHECK(lingered == 0);
  }).join();
  auto sleeps = s.rt.stats().sleeps - sleeps_before;
  MESSAGE("reactor sleeps during 100 runs without spinning: ", sleeps);
  CHECK(sleeps >= 25);
}

TEST_CASE("spin regime: device times seen while the reactor does not spin are not learned") {
  // Without spinning the device's threads may fall asleep between runs, and
  // runs then look long: learned, they left the loop not spinning after a
  // trial without spins (the idle VM's noop runs one at a time stayed at
  // about a third of their rate), and a trial with spins, once not spinning
  // had won, would start without the spin for the next submission or the
  // linger. Ten runs of 3 ms, learned, take the moving average past a 1 ms
  // window; a spinning regime learns them (the control).
  enum class way { spinning, trial_without, not_spinning };
  for (auto w : {way::spinning, way::trial_without, way::not_spinning}) {
    CAPTURE(int(w));
    xrtio::runtime_options o;
    o.spin_window = 1ms;
    xrtio::sim::device_config slow;
    slow.latency.fixed = 3ms;
    sim_runtime s(o, slow);
    auto& r = *xrtio::detail::access::reactor(s.rt);
    spin_regime g(true);
    if (w == way::trial_without) {
      // Its trial's epoch begins an hour from now: it does not end during
      // this case, whatever the host's speed.
      feeder f(g, clock::now() + 1h - spin_regime::first_gap * spin_regime::epoch);
      f.epochs(spin_regime::first_gap, 1000, 1000);
      REQUIRE(g.in_trial());
    } else if (w == way::not_spinning) {
      feeder f(g);
      f.epochs(spin_regime::first_gap + 2, 500, 1500);
      REQUIRE_FALSE(g.usual_spins());
    }
    xrtio::detail::reactor_test_access::set_regime(r, g);
    REQUIRE(xrtio::detail::reactor_test_access::learned_short_runs(r));
    {
      asio::io_context io;
      for (int i = 0; i < 10; ++i)
        xrtio::async_run(s.ctx.kernel("noop"), asio::bind_executor(io, [](std::error_code ec, xrtio::run_result) {
                           REQUIRE_FALSE(ec);
                         }));
      io.run();
    }
    REQUIRE(rtest::eventually([&] { return xrtio::detail::reactor_test_access::asleep(r); }, 10s));
    CHECK(xrtio::detail::reactor_test_access::learned_short_runs(r) == (w != way::spinning));
  }
}
