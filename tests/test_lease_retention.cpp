// A run waiting for its leases behind a run that gets retained (docs/DESIGN.md,
// invariants 5 and 6): retention must wake it, so it fails with
// range_retained at once instead of waiting for a range it can never have.
// Found by the access-tracker fuzz target (tests/fuzz, docs/RELIABILITY.md):
// mark_retained did not tell the waiters, and such a run waited for good.
#include <doctest/doctest.h>

#include <asio.hpp>

#include "reactor_support.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;
namespace sim = xrtio::sim;

TEST_CASE("reactor: a run waiting behind a run whose abort is refused fails with range_retained, never starting") {
  sim::device_config cfg;
  cfg.faults.push_back({.kernel = "vadd", .run_number = 1, .what = sim::fault::refuse_abort});
  auto ctx = sim::open(cfg);
  rtest::mode_runtime rt;
  ctx.bind(rt);
  auto v = rtest::make_vadd(ctx);
  auto run = [&](xrtio::run_options o, std::error_code& ec, int& calls, asio::io_context& io) {
    xrtio::async_run(ctx.kernel("vadd"), xrtio::in(v.a), xrtio::in(v.b), xrtio::out(v.c), v.n, o,
                     asio::bind_executor(io, [&](std::error_code e, xrtio::run_result) {
                       ec = e;
                       ++calls;
                     }));
  };
  asio::io_context io;
  std::error_code first, second;
  int first_calls = 0, second_calls = 0;
  // The first run hangs on the device; its deadline aborts it, the device
  // refuses, and it is retained with its leases.
  run({.timeout = 50ms}, first, first_calls, io);
  REQUIRE(rtest::eventually([&] { return rtest::dev(ctx).stats().started == 1; }));
  // The second wants the same ranges and waits for them, with no deadline.
  run({.on_conflict = xrtio::conflict_policy::wait}, second, second_calls, io);
  const auto limit = rtest::clock::now() + 10s;  // far beyond the 50 ms it needs
  while ((first_calls == 0 || second_calls == 0) && rtest::clock::now() < limit) {
    io.run_for(10ms);
    io.restart();
  }
  CHECK(first_calls == 1);
  CHECK(first == xrtio::errc::abort_failed);
  CHECK(second_calls == 1);
  CHECK(second == xrtio::errc::range_retained);
  CHECK(rtest::dev(ctx).stats().started == 1);  // the waiting run never reached the device
  CHECK(rtest::host_write(v.c) == xrtio::errc::range_retained);
}
