// Leases of asynchronous runs: conflicts, FIFO waiting, and leases that
// outlive the awaiting coroutine, its io_context and the runtime
// (docs/DESIGN.md, invariants 2, 5, 6).
#include <doctest/doctest.h>

#include <asio.hpp>
#include <optional>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string_view>

#include "introspection.hpp"
#include "kernel_gate.hpp"
#include "reactor_support.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
using rtest::dev;
using rtest::make_vadd;
using rtest::vadd_ok;
namespace sim = xrtio::sim;

namespace {
using rtest::fixture;

template <class Token>
auto run_vadd(xrtio::context& ctx, const rtest::vadd_set& v, xrtio::run_options o, Token&& tok) {
  return xrtio::async_run(ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n, o,
                          std::forward<Token>(tok));
}

using gate = rtest::kernel_gate;
using rtest::open_at_exit;

/// A device whose kernel `name` (a built-in one) waits for `g` first.
sim::device_config gated(std::string_view name, gate& g) {
  sim::device_config cfg;
  for (auto& k : cfg.kernels)
    if (k.name == name)
      k.fn = [&g, fn = std::move(k.fn)](sim::kernel_call& c) {
        g.wait();
        fn(c);
      };
  return cfg;
}

/// How long a test waits for handlers that are due at once or as soon as a
/// gate opens: only a regression waits this long, which then fails a CHECK
/// instead of hanging until the suite's watchdog.
constexpr auto limit = 30s;

/// Runs io's handlers until `done()`, io runs out of work, or `limit` passes;
/// returns done().
template <class Pred>
bool run_until(asio::io_context& io, Pred done) {
  auto until = rtest::clock::now() + limit;
  while (!done() && !io.stopped() && rtest::clock::now() < until) io.run_one_for(10ms);
  return done();
}
}  // namespace

// ---- 7. conflicts and waiting leases ------------------------------------------------

TEST_CASE("reactor: conflict_policy::fail completes a conflicting run with range_in_use") {
  // Run 1 holds its leases on the device until the test has seen run 2
  // refused (a gate, not a latency that can pass before run 2 is submitted).
  gate g;
  fixture f(gated("vadd", g));
  open_at_exit opener{g};
  auto v = make_vadd(f.ctx);
  asio::io_context io;
  std::vector<std::pair<int, std::error_code>> got;
  run_vadd(f.ctx, v, {}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
             got.emplace_back(1, ec);
           }));
  run_vadd(f.ctx, v, {.on_conflict = xrtio::conflict_policy::fail},
           asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
             CHECK(r.state == xrtio::run_state::new_);
             got.emplace_back(2, ec);
           }));
  CHECK(dev(f.ctx).stats().started == 1);  // run 2 never reached the device
  // At once: run 1 is still on the device.
  CHECK(run_until(io, [&] { return !got.empty(); }));
  REQUIRE(got.size() == 1);
  CHECK(got[0] == std::pair<int, std::error_code>(2, xrtio::errc::range_in_use));
  g.open();
  io.run_for(limit);
  CHECK(io.stopped());
  REQUIRE(got.size() == 2);
  CHECK(got[1] == std::pair<int, std::error_code>(1, std::error_code{}));
  CHECK(dev(f.ctx).stats().started == 1);
  // Two readers of the same buffer do not conflict: the first is held on the
  // device while the second takes its leases (both run, nothing fails).
  g.close();  // no kernel waits on it: run 1 has completed
  auto o1 = f.ctx.alloc(64), o2 = f.ctx.alloc(64);
  int ok = 0;
  for (auto& o : {o1, o2})
    run_vadd(f.ctx, rtest::vadd_set{v.a, v.a, o, 16, 0}, {}, asio::bind_executor(io, [&](std::error_code ec,
                                                                                            xrtio::run_result) {
               CHECK(!ec);
               ++ok;
             }));
  g.open();
  io.restart();
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(ok == 2);
  CHECK(dev(f.ctx).stats().started == 3);
}

TEST_CASE("reactor: conflict_policy::wait runs the second writer after the first finishes") {
  // The first writer stays on the device until the test has seen the second
  // waiting (a gate, not a latency that can pass before it is submitted).
  gate g;
  fixture f(gated("vadd", g));
  open_at_exit opener{g};
  auto v = make_vadd(f.ctx);
  asio::io_context io;
  std::vector<int> order;
  xrtio::run_result r1, r2;
  run_vadd(f.ctx, v, {}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
             CHECK(!ec);
             r1 = r;
             order.push_back(1);
           }));
  run_vadd(f.ctx, v, {.on_conflict = xrtio::conflict_policy::wait},
           asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result r) {
             CHECK(!ec);
             r2 = r;
             order.push_back(2);
           }));
  CHECK(dev(f.ctx).stats().started == 1);  // the second waits
  CHECK(xtest::tracker(v.c).waiting_count() == 1);
  g.open();
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(order == std::vector<int>{1, 2});
  CHECK(r2.state == xrtio::run_state::completed);
  CHECK(r2.submitted >= r1.device_completed);  // started only after the first let go
  CHECK(dev(f.ctx).stats().started == 2);
  CHECK(vadd_ok(v));
  CHECK(xtest::tracker(v.c).active_count() == 0);
  CHECK(xtest::tracker(v.c).waiting_count() == 0);
}

TEST_CASE("reactor: waiting leases are FIFO: a queued writer is not starved by later readers") {
  // R1 stays on the device until all three are submitted (a gate, not a
  // latency that can pass first: then W would not have to wait, and R2
  // would have nothing to overtake).
  gate g;
  fixture f(gated("checksum", g));
  open_at_exit opener{g};
  constexpr std::uint32_t n = 64;
  auto x = f.ctx.alloc(n * 4);
  std::vector<std::uint32_t> init(n, 1);
  x.write(std::span<const std::uint32_t>(init));
  auto v = make_vadd(f.ctx, n, 5);
  v.c = x;  // W writes x
  auto sum1 = f.ctx.alloc(8), sum2 = f.ctx.alloc(8);
  asio::io_context io;
  std::vector<std::string> order;
  auto wait = xrtio::run_options{.on_conflict = xrtio::conflict_policy::wait};
  auto note = [&](std::string who) {
    return asio::bind_executor(io, [&, who](std::error_code ec, xrtio::run_result r) {
      CHECK(!ec);
      CHECK(r.state == xrtio::run_state::completed);
      order.push_back(who);
    });
  };
  auto checksum = f.ctx.kernel("checksum");
  xrtio::async_run(checksum, xrtio::in(x), xrtio::out(sum1), n * 4, wait, note("R1"));  // holds x until g opens
  run_vadd(f.ctx, v, wait, note("W"));                                                 // queued behind R1
  xrtio::async_run(checksum, xrtio::in(x), xrtio::out(sum2), n * 4, wait, note("R2"));  // must not overtake W
  CHECK(dev(f.ctx).stats().started == 1);
  g.open();
  io.run_for(limit);
  CHECK(io.stopped());
  CHECK(order == std::vector<std::string>{"R1", "W", "R2"});
  // R1 saw the initial contents, R2 saw W's output.
  std::vector<std::uint32_t> after(n);
  for (std::uint32_t i = 0; i < n; ++i) after[i] = 3 * i + 5;
  std::uint64_t h1 = 0, h2 = 0;
  sum1.read(std::span<std::uint64_t>(&h1, 1));
  sum2.read(std::span<std::uint64_t>(&h2, 1));
  CHECK(h1 == rtest::fnv1a(std::as_bytes(std::span<const std::uint32_t>(init))));
  CHECK(h2 == rtest::fnv1a(std::as_bytes(std::span<const std::uint32_t>(after))));
  CHECK(xtest::tracker(x).active_count() == 0);
  CHECK(xtest::tracker(x).waiting_count() == 0);
}

// ---- 8. leases live in the operation (invariant 2) ---------------------------------------

TEST_CASE("reactor: destroying an io_context with a run pending destroys the coroutine, keeps the leases until "
          "the device is final") {
  // The device holds the run until the test opens the gate: a timed hang
  // (30 ms) could end while the test thread was preempted, before it looked
  // at the leases.
  gate g;
  fixture f(gated("vadd", g));
  open_at_exit opener{g};
  auto v = make_vadd(f.ctx);
  struct probe {
    bool* flag;
    ~probe() { *flag = true; }
  };
  bool resumed = false, frame_destroyed = false;
  auto io = std::make_unique<asio::io_context>();
  asio::co_spawn(
      *io,
      [&]() -> asio::awaitable<void> {
        probe p{&frame_destroyed};
        co_await run_vadd(f.ctx, v, {}, asio::use_awaitable);
        resumed = true;
      },
      asio::detached);
  io->poll();  // runs the coroutine up to its co_await: the run is on the device
  REQUIRE(dev(f.ctx).stats().started == 1);
  CHECK(!frame_destroyed);
  io.reset();
  CHECK(frame_destroyed);  // the handler (and its frame) destroyed, not invoked
  CHECK(!resumed);
  // The device still holds the run: its ranges stay leased.
  CHECK(rtest::host_write(v.c) == xrtio::errc::range_in_use);
  CHECK(rtest::host_write(v.a) == xrtio::errc::range_in_use);
  CHECK(dev(f.ctx).stats().completed == 0);
  g.open();  // the device finishes the run
  bool freed = rtest::eventually([&] { return !rtest::host_write(v.c); }, 5000ms);
  CHECK(freed);
  CHECK(dev(f.ctx).stats().completed == 1);  // freed no earlier than the device's final state
  CHECK(!resumed);
  CHECK(rtest::eventually([&] { return f.rt.stats().in_flight == 0; }));
  CHECK(xtest::tracker(v.c).active_count() == 0);
  CHECK(xtest::tracker(v.a).active_count() == 0);
}

TEST_CASE("reactor: destroying an io_context with a callback run pending destroys the handler without calling "
          "it, leases held until final") {
  // The device holds the run until the test opens the gate: a latency
  // (30 ms) could end while the test thread was preempted, before it looked
  // at the leases.
  gate g;
  fixture f(gated("vadd", g));
  open_at_exit opener{g};
  auto v = make_vadd(f.ctx);
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  int calls = 0;
  {
    asio::io_context io;
    run_vadd(f.ctx, v, {}, asio::bind_executor(io, [&calls, keep = std::move(alive)](std::error_code,
                                                                                      xrtio::run_result) {
               ++calls;
             }));
    CHECK(!watch.expired());
  }
  CHECK(watch.expired());  // handler destroyed with the io_context
  CHECK(calls == 0);
  CHECK(rtest::host_write(v.c) == xrtio::errc::range_in_use);
  g.open();  // the device finishes the run
  CHECK(rtest::eventually([&] { return !rtest::host_write(v.c); }, 5000ms));
  CHECK(calls == 0);
  // The run did complete (c[0] was overwritten by the host write above).
  std::vector<std::uint32_t> c(16);
  v.c.read(std::span<std::uint32_t>(c));
  for (std::uint32_t i = 1; i < 16; ++i) CHECK(c[i] == 3 * i);
  CHECK(rtest::eventually([&] { return f.rt.stats().in_flight == 0; }));
}

TEST_CASE("reactor: an io_context made where a destroyed one was still gets its pending handlers destroyed with it") {
  // A thread remembers the last context it registered runs with. One
  // destroyed and another made at the same address (an optional emplaced
  // twice) must not be taken for the old one: runs registered with the old,
  // dead registry would be posted to the new context after it is gone.
  sim::device_config cfg;
  cfg.latency.fixed = 30ms;
  fixture f(cfg);
  auto v = make_vadd(f.ctx);
  std::optional<asio::io_context> io;
  io.emplace();
  auto* first = &*io;
  bool ran = false;
  run_vadd(f.ctx, v, {}, asio::bind_executor(*io, [&](std::error_code ec, xrtio::run_result) { ran = !ec; }));
  io->run();
  CHECK(ran);
  io.reset();
  io.emplace();
  REQUIRE(&*io == first);  // the same address
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  int calls = 0;
  run_vadd(f.ctx, v, {}, asio::bind_executor(*io, [&calls, keep = std::move(alive)](std::error_code,
                                                                                     xrtio::run_result) { ++calls; }));
  io.reset();
  CHECK(watch.expired());  // destroyed with the second io_context
  CHECK(calls == 0);
  CHECK(rtest::eventually([&] { return f.rt.stats().in_flight == 0; }));
  CHECK(calls == 0);
}

TEST_CASE("reactor: destroying the runtime with runs in flight aborts them, completes every handler, retains "
          "refused ones, and returns within shutdown_grace") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "vadd", .run_number = 3, .what = sim::fault::refuse_abort});
  cfg.faults.push_back({.kernel = "vadd", .run_number = 4, .what = sim::fault::slow_abort, .abort_delay = 3s});
  cfg.faults.push_back({.kernel = "vadd", .what = sim::fault::hang});
  auto ctx = sim::open(cfg);
  xrtio::runtime_options ro;
  ro.shutdown_grace = 300ms;
  auto rt = std::make_unique<xrtio::runtime>(ro);
  ctx.bind(*rt);
  std::vector<rtest::vadd_set> sets;
  for (int i = 0; i < 5; ++i) sets.push_back(make_vadd(ctx));
  asio::io_context io;
  std::vector<std::error_code> got(5, xrtio::errc::busy);
  std::vector<int> calls(5, 0);
  for (int i = 0; i < 5; ++i)
    run_vadd(ctx, sets[i], {}, asio::bind_executor(io, [&, i](std::error_code ec, xrtio::run_result) {
               ++calls[i];
               got[i] = ec;
             }));
  // A sixth run waits for run 1's leases: it never reaches the device.
  std::error_code waiting_ec;
  int waiting_calls = 0;
  run_vadd(ctx, sets[0], {.on_conflict = xrtio::conflict_policy::wait},
           asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) {
             ++waiting_calls;
             waiting_ec = ec;
           }));
  REQUIRE(rtest::eventually([&] { return dev(ctx).stats().started == 5; }));
  std::this_thread::sleep_for(10ms);  // all five running (hung)
  auto retained_before = xrtio::retained_runs();
  auto t0 = rtest::clock::now();
  rt.reset();
  auto took = rtest::clock::now() - t0;
  MESSAGE("runtime destructor took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                     << " ms (shutdown_grace 300 ms)");
  CHECK(took < 300ms + 700ms);
  io.run();
  for (int i = 0; i < 5; ++i) CHECK(calls[i] == 1);
  CHECK(got[0] == xrtio::errc::shut_down);
  CHECK(got[1] == xrtio::errc::shut_down);
  CHECK(got[2] == xrtio::errc::abort_failed);  // refused: retained
  CHECK(got[3] == xrtio::errc::abort_failed);  // abort still running at the deadline: retained
  CHECK(got[4] == xrtio::errc::shut_down);
  CHECK(waiting_calls == 1);
  CHECK(waiting_ec == xrtio::errc::shut_down);
  CHECK(xrtio::retained_runs() == retained_before + 2);
  CHECK(rtest::host_write(sets[2].c) == xrtio::errc::range_retained);
  CHECK(rtest::host_write(sets[3].c) == xrtio::errc::range_retained);
  CHECK(!rtest::host_write(sets[1].c));
  CHECK(dev(ctx).stats().aborted == 3);

  // A run started after the runtime is gone completes with shut_down, not inline.
  std::error_code late{xrtio::errc::busy};
  run_vadd(ctx, sets[4], {}, asio::bind_executor(io, [&](std::error_code ec, xrtio::run_result) { late = ec; }));
  CHECK(late == xrtio::errc::busy);
  io.restart();
  io.run();
  CHECK(late == xrtio::errc::shut_down);
  CHECK(dev(ctx).stats().started == 5);
}

TEST_CASE("reactor: destroying an io_context while its runs complete: each handler is invoked or destroyed, "
          "exactly once, and every lease is released") {
  sim::device_config cfg;
  cfg.latency.jitter = 300us;
  fixture f(cfg);
  std::vector<rtest::vadd_set> sets;
  for (int i = 0; i < 16; ++i) sets.push_back(make_vadd(f.ctx));
  const int rounds = rtest::sanitized ? 20 : 60;
  constexpr int per_round = 64;
  std::atomic<int> invoked{0}, gone{0};
  std::vector<int> calls(rounds * per_round, 0);
  struct token {
    std::atomic<int>* gone;
    ~token() { gone->fetch_add(1); }
  };
  for (int round = 0; round < rounds; ++round) {
    asio::io_context io;
    for (int i = 0; i < per_round; ++i) {
      std::shared_ptr<token> t(new token{&gone});
      int id = round * per_round + i;
      run_vadd(f.ctx, sets[i % sets.size()], {.on_conflict = xrtio::conflict_policy::wait},
               asio::bind_executor(io, [&invoked, &calls, id, t](std::error_code, xrtio::run_result) {
                 invoked.fetch_add(1);
                 ++calls[id];
               }));
    }
    // At least one completes (waited for, so every round invokes some
    // handlers however loaded the host), then more for a while; then the
    // context is destroyed while others are finishing.
    io.run_one();
    io.run_for(std::chrono::microseconds(200 + 700 * (round % 8)));
  }
  REQUIRE(rtest::eventually([&] { return f.rt.stats().in_flight == 0; }));
  int total = rounds * per_round;
  CHECK(rtest::eventually([&] { return gone.load() == total; }));  // every handler went away once
  MESSAGE("invoked " << invoked.load() << " of " << total << " handlers; the rest were destroyed with their context");
  CHECK(invoked.load() >= rounds);  // each round's run_one ran a handler
  CHECK(std::count(calls.begin(), calls.end(), 1) == invoked.load());  // the invoked ones, once each
  CHECK(std::count_if(calls.begin(), calls.end(), [](int c) { return c > 1; }) == 0);
  for (auto& v : sets) {
    CHECK(xtest::tracker(v.a).active_count() == 0);
    CHECK(xtest::tracker(v.c).active_count() == 0);
    CHECK(xtest::tracker(v.c).waiting_count() == 0);
  }
}

// The reactor releases the leases of the runs a pass finished together, one
// lock per allocation (docs/DESIGN.md, "Batched lease release"), and before
// it posts any of their completions: a handler may at once write the range
// its run wrote, and no lease is left behind.
TEST_CASE("reactor: a completion handler can at once write the ranges its run held, and a batch of runs leaves no lease") {
  sim::device_config cfg;
  cfg.latency.fixed = 1ms;
  cfg.compute_units = 4;
  fixture f(cfg);
  constexpr int runs = 64;
  auto shared = rtest::make_vadd(f.ctx);  // inputs every run reads
  std::vector<xrtio::buffer> outs;
  for (int i = 0; i < runs; ++i) outs.push_back(f.ctx.alloc(shared.n * 4));
  asio::io_context io;
  int ok = 0, refused = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < runs; ++i) {
      auto c = outs[i];
      xrtio::async_run(f.ctx.kernel("vadd"), xrtio::in(shared.a), xrtio::in(shared.b), xrtio::out(c), shared.n,
                       asio::bind_executor(io, [&, c](std::error_code ec, xrtio::run_result) mutable {
                         CHECK(!ec);
                         std::vector<std::uint32_t> zeros(shared.n);
                         try {
                           c.write(std::span<const std::uint32_t>(zeros));  // a host lease on the run's range
                           ++ok;
                         } catch (const xrtio::error& e) {
                           ++refused;
                           MESSAGE("handler's write refused: " << std::string(e.what()));
                         }
                       }));
    }
    io.run();
    io.restart();
  }
  CHECK(ok == 3 * runs);
  CHECK(refused == 0);
  CHECK(xtest::tracker(shared.a).active_count() == 0);
  CHECK(xtest::tracker(shared.b).active_count() == 0);
  std::size_t held = 0;
  for (auto& c : outs) held += xtest::tracker(c).active_count();
  CHECK(held == 0);
}
