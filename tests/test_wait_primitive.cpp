// The reactor's wait primitive (src/reactor/wait_primitive.hpp; docs/DESIGN.md,
// "Wait primitive"): what the reactor relies on, on io_uring and on the
// ppoll fallback alike. Every completion ends a wait that lists its device;
// a wait with no new completion sleeps to its deadline (the device's fd is
// drained, so a level-triggered poll does not fire again at once); and a
// completion is acknowledged (consume_event), so the device writes for the
// next one. On io_uring only, two waiters (two runtimes' reactors) both see
// a completion that comes while both wait; the ppoll fallback does not
// promise that (the last test case says why).
#include <doctest/doctest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "../src/reactor/wait_primitive.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

using namespace std::chrono_literals;
using xrtio::detail::wait_primitive;
using clk = std::chrono::steady_clock;

namespace {

struct device {
  xrtio::context ctx;
  xrtio::backend::native_device* dev;
  explicit device(std::chrono::milliseconds latency = 20ms) {
    xrtio::sim::device_config cfg;
    cfg.latency.fixed = latency;
    ctx = xrtio::sim::open(cfg);
    dev = &xrtio::sim::device_of(ctx);
  }
  // Starts a run that completes `latency` from now; the handle waits for it.
  xrtio::run_handle start() { return xrtio::start(ctx.kernel("noop")); }
  bool fd_readable() const {
    pollfd p{dev->event_fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
};

// Waits listing `d` until `limit` from now; returns the time it took.
double wait_ms(wait_primitive& w, xrtio::backend::native_device* d, std::chrono::milliseconds limit) {
  auto t0 = clk::now();
  xrtio::backend::native_device* list[1] = {d};
  (void)w.wait(t0 + limit, std::span<xrtio::backend::native_device* const>(list, 1));
  return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
}

}  // namespace

// Three completions, each ending a wait; then a wait with none that must
// run to its deadline.
static void check_each_completion_ends_a_wait(wait_primitive& w) {
  device d;
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    auto h = d.start();
    // Ended by the completion (20 ms), not by the 10 s deadline.
    CHECK(wait_ms(w, d.dev, 10s) < 5000);
    CHECK(h.wait(10s).state == xrtio::run_state::completed);
    // No completion since: the wait runs to its deadline. An fd left
    // undrained would end it at once.
    CHECK(wait_ms(w, d.dev, 60ms) >= 60);
    CHECK(!d.fd_readable());
  }
}

TEST_CASE("wait primitive on ppoll: each completion ends a wait listing its device, and a wait with none sleeps to its deadline") {
  wait_primitive w(false);
  REQUIRE(!w.uses_io_uring());
  check_each_completion_ends_a_wait(w);
}

TEST_CASE("wait primitive on io_uring: each completion ends a wait listing its device, and a wait with none sleeps to its deadline") {
  wait_primitive w(true);
  if (!w.uses_io_uring()) {
    std::printf("XRTIO-SKIP: io_uring is refused here (the ppoll case covers the fallback)\n");
    return;
  }
  check_each_completion_ends_a_wait(w);
}

TEST_CASE("wait primitive: two waiters on io_uring watching one device both see its completion") {
  // Two runtimes' reactors, each on its own thread. On io_uring each poll's
  // completion carries the wake-up's mask, so both see the write even after
  // one of them drained the fd. Not so with the ppoll fallback: ppoll checks
  // the fd again after it is woken, finds it drained by the other waiter
  // and sleeps on; that waiter sees the completion only at its safety poll
  // (event_poll_interval). A known limit of the fallback (docs/DESIGN.md,
  // "Wait primitive"), not tested here as if it held.
  device d(500ms);
  wait_primitive w1(true);
  if (!w1.uses_io_uring()) {
    std::printf("XRTIO-SKIP: io_uring is refused here: the ppoll fallback has the limit above\n");
    return;
  }
  std::atomic<bool> waiting{false};
  bool other_uring = false;
  double other = 0;
  std::thread t([&] {
    wait_primitive w2(true);
    other_uring = w2.uses_io_uring();
    waiting = true;
    // Its poll is armed soon after this point; the run below is started
    // after `waiting` and ends 500 ms later, a margin for a loaded
    // sanitizer run.
    other = wait_ms(w2, d.dev, 10s);
  });
  while (!waiting) std::this_thread::sleep_for(1ms);
  auto h = d.start();
  double mine = wait_ms(w1, d.dev, 10s);
  t.join();
  CHECK(other_uring);  // both waiters on io_uring, not one on ppoll
  CHECK(mine < 5000);
  CHECK(other < 5000);
  CHECK(h.wait(10s).state == xrtio::run_state::completed);
}
