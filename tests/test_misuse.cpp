// Bad input and API misuse not covered by the other suites: options out of
// range, empty (default-constructed or moved-from) handles, rebinding while
// runs are in flight, a runtime that is gone. Each must end in its own errc
// with a message naming the value, never a crash, a hang or a leak
// (docs/DESIGN.md, invariant 8; docs/RELIABILITY.md, "Bad input").
#include <doctest/doctest.h>

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <memory>

#include "foundation_support.hpp"
#include "introspection.hpp"
#include "reactor_support.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using ftest::error_of;
using xrtio::errc;
namespace sim = xrtio::sim;

namespace {

struct outcome {
  int calls = 0;
  std::error_code ec{errc::run_error};
  xrtio::run_result result;
  auto handler(asio::io_context& io) {
    return asio::bind_executor(io, [this](std::error_code e, xrtio::run_result r) {
      ++calls;
      ec = e;
      result = r;
    });
  }
};

constexpr auto huge = std::chrono::nanoseconds::max();

}  // namespace

// ---- options -----------------------------------------------------------------------

TEST_CASE("misuse: a negative run_options::timeout is refused with invalid_option (async_run, start, prepare, "
          "async_execute)") {
  rtest::fixture f;
  auto a = f.ctx.alloc(64);
  xrtio::run_options bad{.timeout = -1ms};
  asio::io_context io;
  outcome o;
  xrtio::async_run(f.ctx.kernel("noop"), bad, o.handler(io));
  io.run();
  CHECK(o.calls == 1);
  CHECK(o.ec == errc::invalid_option);
  CHECK(o.result.state == xrtio::run_state::new_);

  auto what = error_of([&] { (void)xrtio::start(f.ctx.kernel("noop"), bad); }, errc::invalid_option);
  CHECK_CONTAINS(what, "run_options::timeout");
  CHECK_CONTAINS(what, "-1000000 ns");
  error_of([&] { (void)xrtio::prepare(f.ctx.kernel("noop"), bad); }, errc::invalid_option);

  // Options given per execution are checked too.
  auto p = xrtio::prepare(f.ctx.kernel("noop"));
  outcome e;
  io.restart();
  xrtio::async_execute(p, bad, e.handler(io));
  io.run();
  CHECK(e.calls == 1);
  CHECK(e.ec == errc::invalid_option);
  CHECK_FALSE(p.in_flight());  // the refused execution does not hold the prepared run
  CHECK(xrtio::async_execute(p, asio::use_future).get().state == xrtio::run_state::completed);
  CHECK(rtest::dev(f.ctx).stats().started == 1);
  CHECK(xtest::tracker(a).active_count() == 0);
}

TEST_CASE("misuse: a huge run_options::timeout means no deadline, it does not overflow into one already passed") {
  sim::device_config cfg;
  cfg.latency.fixed = 2ms;
  rtest::fixture f(cfg);
  asio::io_context io;
  outcome o;
  xrtio::async_run(f.ctx.kernel("noop"), xrtio::run_options{.timeout = huge}, o.handler(io));
  io.run();
  CHECK(o.calls == 1);
  CHECK(!o.ec);
  CHECK(o.result.state == xrtio::run_state::completed);
  CHECK(f.rt.stats().timed_out == 0);

  auto h = xrtio::start(f.ctx.kernel("noop"), xrtio::run_options{.timeout = huge});
  CHECK(h.wait().state == xrtio::run_state::completed);
  auto h2 = xrtio::start(f.ctx.kernel("noop"), xrtio::run_options{.timeout = huge});
  CHECK(h2.wait(huge).state == xrtio::run_state::completed);
  CHECK(rtest::dev(f.ctx).stats().aborted == 0);
}

TEST_CASE("misuse: wait() with a negative timeout is refused with invalid_option and the run goes on") {
  sim::device_config cfg;
  cfg.latency.fixed = 2ms;
  auto ctx = sim::open(cfg);
  auto h = xrtio::start(ctx.kernel("noop"));
  auto what = error_of([&] { h.wait(-5ms); }, errc::invalid_option);
  CHECK_CONTAINS(what, "-5000000 ns");
  std::error_code ec;
  h.wait(-1ns, ec);
  CHECK(ec == errc::invalid_option);
  CHECK(h.wait().state == xrtio::run_state::completed);  // not aborted by the refused waits
  CHECK(sim::device_of(ctx).stats().aborted == 0);
}

TEST_CASE("misuse: a zero memory budget refuses every allocation with budget_exceeded naming it, and 0 bytes "
          "reserve") {
  xrtio::memory_budget budget(0);
  CHECK(budget.reserve(0).size() == 0);
  auto ctx = sim::open({}, budget);
  auto what = error_of([&] { (void)ctx.alloc(1); }, errc::budget_exceeded);
  CHECK_CONTAINS(what, "reserving 1 bytes");
  CHECK_CONTAINS(what, "0 of 0 bytes");
  CHECK(budget.used() == 0);
  std::byte mem[64]{};
  CHECK(ctx.import_user_memory(mem, sizeof mem).size() == 64);  // imports carry no charge
}

// ---- empty handles -----------------------------------------------------------------

TEST_CASE("misuse: an empty context refuses alloc, import, kernel, bind and budget with invalid_size") {
  xrtio::context ctx;
  auto moved = sim::open();
  xrtio::context taken = std::move(moved);
  for (xrtio::context* c : {&ctx, &moved}) {
    CHECK_FALSE(*c);
    auto what = error_of([&] { (void)c->alloc(64); }, errc::invalid_size);
    CHECK_CONTAINS(what, "empty context");
    std::byte mem[64]{};
    error_of([&] { (void)c->import_user_memory(mem, sizeof mem); }, errc::invalid_size);
    error_of([&] { (void)c->import_dmabuf(0, 64); }, errc::invalid_size);
    error_of([&] { (void)c->kernel("noop"); }, errc::invalid_size);
    xrtio::runtime rt;
    error_of([&] { c->bind(rt); }, errc::invalid_size);
    error_of([&] { (void)c->budget(); }, errc::invalid_size);
  }
  CHECK(taken.alloc(64).size() == 64);
}

TEST_CASE("misuse: an empty kernel is refused with invalid_size by async_run, start and prepare") {
  rtest::fixture f;
  xrtio::kernel k;
  CHECK_FALSE(k);
  auto good = f.ctx.kernel("noop");
  CHECK(good);
  xrtio::kernel moved = good;
  xrtio::kernel taken = std::move(moved);
  CHECK(taken);
  asio::io_context io;
  outcome o, m;
  xrtio::async_run(k, o.handler(io));
  xrtio::async_run(moved, xrtio::run_options{.runtime = &f.rt}, m.handler(io));
  io.run();
  CHECK(o.calls == 1);
  CHECK(o.ec == errc::invalid_size);
  CHECK(m.calls == 1);
  CHECK(m.ec == errc::invalid_size);
  auto what = error_of([&] { (void)xrtio::start(k); }, errc::invalid_size);
  CHECK_CONTAINS(what, "empty kernel");
  error_of([&] { (void)xrtio::prepare(moved); }, errc::invalid_size);
  CHECK(rtest::dev(f.ctx).stats().started == 0);
}

TEST_CASE("misuse: an empty prepared_run is refused with invalid_size by async_execute and async_run_chain") {
  rtest::fixture f;
  xrtio::prepared_run p;
  CHECK_FALSE(p);
  CHECK_FALSE(p.in_flight());
  asio::io_context io;
  outcome o, r;
  xrtio::async_execute(p, o.handler(io));
  xrtio::async_execute(p, xrtio::run_options{.runtime = &f.rt}, r.handler(io));
  int chain_calls = 0;
  std::error_code chain_ec;
  xrtio::chain_result chain;
  auto good = xrtio::prepare(f.ctx.kernel("noop"));
  xrtio::async_run_chain({good, p, good}, asio::bind_executor(io, [&](std::error_code ec, xrtio::chain_result c) {
                           ++chain_calls;
                           chain_ec = ec;
                           chain = c;
                         }));
  io.run();
  CHECK(o.calls == 1);
  CHECK(o.ec == errc::invalid_size);
  CHECK(r.calls == 1);
  CHECK(r.ec == errc::invalid_size);
  CHECK(chain_calls == 1);
  CHECK(chain_ec == errc::invalid_size);
  CHECK(chain.completed == 1);
  CHECK(chain.failed_index == 1);
  CHECK(rtest::dev(f.ctx).stats().started == 1);
}

TEST_CASE("misuse: wait() on an empty or moved-from run_handle throws invalid_size saying so") {
  auto ctx = sim::open();
  auto h = xrtio::start(ctx.kernel("noop"));
  xrtio::run_handle taken = std::move(h);
  CHECK_FALSE(h.valid());
  auto what = error_of([&] { h.wait(); }, errc::invalid_size);
  CHECK_CONTAINS(what, "empty run_handle");
  CHECK(h.state() == xrtio::run_state::new_);
  CHECK(taken.wait().state == xrtio::run_state::completed);
  CHECK(taken.wait().state == xrtio::run_state::completed);  // twice: the same outcome
}

TEST_CASE("misuse: a moved-from buffer is an empty handle: host access and run arguments fail with invalid_size") {
  rtest::fixture f;
  auto a = f.ctx.alloc(64);
  auto b = std::move(a);
  CHECK_FALSE(a);
  std::uint32_t x = 1;
  error_of([&] { a.write(std::span<const std::uint32_t>(&x, 1)); }, errc::invalid_size);
  auto what = error_of(
      [&] { (void)xrtio::start(f.ctx.kernel("vadd"), xrtio::in(a), xrtio::in(b), xrtio::out(b), std::uint32_t{1}); },
      errc::invalid_size);
  CHECK_CONTAINS(what, "argument 0");
  CHECK_CONTAINS(what, "empty buffer handle");
  asio::io_context io;
  outcome o;
  xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(b), xrtio::in(a), xrtio::out(b), std::uint32_t{1}, o.handler(io));
  io.run();
  CHECK(o.ec == errc::invalid_size);
  CHECK(xtest::tracker(b).active_count() == 0);
  CHECK(rtest::dev(f.ctx).stats().started == 0);
}

// ---- binding and runtimes ----------------------------------------------------------

TEST_CASE("misuse: bind() while runs are in flight: they complete on the runtime they started on, new runs use "
          "the new one") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .run_number = 1, .what = sim::fault::hang});
  rtest::mode_runtime first, second;
  auto ctx = sim::open(cfg);
  ctx.bind(first);
  asio::io_context io;
  outcome hung, later;
  xrtio::async_run(ctx.kernel("noop"), xrtio::run_options{.timeout = 20ms}, hung.handler(io));
  ctx.bind(second);
  xrtio::async_run(ctx.kernel("noop"), later.handler(io));
  io.run();
  CHECK(hung.ec == errc::timed_out);  // the first runtime's deadline still applied
  CHECK(!later.ec);
  CHECK(first.stats().submitted == 1);
  CHECK(first.stats().timed_out == 1);
  CHECK(second.stats().submitted == 1);
  CHECK(second.stats().completed == 1);
}

TEST_CASE("misuse: a context bound to a runtime that is gone completes new runs with shut_down") {
  auto ctx = sim::open();
  auto a = ctx.alloc(64);
  {
    rtest::mode_runtime rt;
    ctx.bind(rt);
  }
  asio::io_context io;
  outcome o;
  xrtio::async_run(ctx.kernel("vadd"), xrtio::in(a), xrtio::in(a), xrtio::out(ctx.alloc(64)), std::uint32_t{16},
                   o.handler(io));
  io.run();
  CHECK(o.calls == 1);
  CHECK(o.ec == errc::shut_down);
  CHECK(xtest::tracker(a).active_count() == 0);
  CHECK(sim::device_of(ctx).stats().started == 0);
  // The synchronous API needs no runtime.
  CHECK(xrtio::start(ctx.kernel("noop")).wait().state == xrtio::run_state::completed);
}

TEST_CASE("misuse: negative runtime_options durations are refused with invalid_option naming the option") {
  auto what = error_of([] { xrtio::runtime rt(xrtio::runtime_options{.abort_grace = -1ms}); }, errc::invalid_option);
  CHECK_CONTAINS(what, "abort_grace");
  CHECK_CONTAINS(what, "-1000000 ns");
  what = error_of([] { xrtio::runtime rt(xrtio::runtime_options{.spin_window = -1ns}); }, errc::invalid_option);
  CHECK_CONTAINS(what, "spin_window");
  what = error_of([] { xrtio::runtime rt(xrtio::runtime_options{.shutdown_grace = -5s}); }, errc::invalid_option);
  CHECK_CONTAINS(what, "shutdown_grace");
}

TEST_CASE("misuse: huge abort_grace and shutdown_grace saturate instead of overflowing, and max_batch 0 still "
          "completes every run") {
  // abort_grace = max: a slow abort is waited for, not retained at once by an
  // overflowed deadline.
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "noop", .run_number = 1, .what = sim::fault::slow_abort, .abort_delay = 20ms});
  rtest::fixture f(cfg, xrtio::runtime_options{.abort_grace = huge, .max_batch = 0});
  asio::io_context io;
  outcome slow;
  std::vector<outcome> rest(50);
  xrtio::async_run(f.ctx.kernel("noop"), xrtio::run_options{.timeout = 5ms}, slow.handler(io));
  for (auto& o : rest) xrtio::async_run(f.ctx.kernel("noop"), o.handler(io));
  io.run();
  CHECK(slow.ec == errc::timed_out);
  CHECK(f.rt.stats().retained == 0);
  for (auto& o : rest) {
    CHECK(o.calls == 1);
    CHECK(!o.ec);
  }
  // shutdown_grace = max: destroying the runtime waits for the run's abort
  // (the device's own delay) and retains nothing.
  sim::device_config cfg2;
  cfg2.faults.push_back({.kernel = "noop", .what = sim::fault::slow_abort, .abort_delay = 20ms});
  auto ctx = sim::open(cfg2);
  outcome aborted;
  {
    rtest::mode_runtime rt(xrtio::runtime_options{.shutdown_grace = huge});
    ctx.bind(rt);
    xrtio::async_run(ctx.kernel("noop"), aborted.handler(io));
    CHECK(rtest::eventually([&] { return rtest::dev(ctx).stats().started == 1; }));
  }
  io.restart();
  io.run();
  CHECK(aborted.calls == 1);
  CHECK(aborted.ec == errc::shut_down);
  CHECK(rtest::dev(ctx).stats().aborted == 1);
}

TEST_CASE("misuse: two runtimes with runs on one device each see their own runs complete") {
  // Runs of one context may go to different runtimes (run_options::runtime,
  // or bind() while runs are in flight). Each runtime's reactor must learn of
  // its own runs' completions even while the other one watches the device
  // too: the device's completion indication is a count each reactor reads,
  // not a flag the first one to look clears.
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "vadd", .what = sim::fault::hang});
  rtest::mode_runtime a, b;
  auto ctx = sim::open(cfg);
  auto v = rtest::make_vadd(ctx);
  asio::io_context io;
  outcome hung;
  asio::cancellation_signal sig;
  xrtio::async_run(ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n,
                   xrtio::run_options{.runtime = &a}, asio::bind_cancellation_slot(sig.slot(), hung.handler(io)));
  const int rounds = rtest::sanitized ? 50 : 200;
  int late = 0;
  for (int i = 0; i < rounds; ++i) {
    auto f = xrtio::async_run(ctx.kernel("noop"), xrtio::run_options{.runtime = &b}, asio::use_future);
    if (f.wait_for(5s) != std::future_status::ready) {
      ++late;
      break;  // the run's handler would never come: stop here rather than hang
    }
    CHECK(f.get().state == xrtio::run_state::completed);
  }
  CHECK(late == 0);
  sig.emit(asio::cancellation_type::terminal);
  io.run();
  CHECK(hung.ec == asio::error::operation_aborted);
  CHECK(b.stats().completed == std::uint64_t(rounds - late));
}
