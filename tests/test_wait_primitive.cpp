// The reactor's wait primitive (src/reactor/wait_primitive.hpp; docs/DESIGN.md,
// "Watching event fds"): on io_uring, a device's event fd stays watched by a
// multishot poll across waits, and nothing reads it. What the reactor relies
// on: every completion ends a wait that lists its device, a wait with no new
// completion sleeps to its deadline (the poll is edge-triggered: the fd's
// count stays non-zero), a completion seen while the device was not listed
// is not lost, and a watch never outlives its device's identity.
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

// Waits listing `d` (or nothing) until `limit` from now; returns the time it took.
double wait_ms(wait_primitive& w, xrtio::backend::native_device* d, std::chrono::milliseconds limit) {
  auto t0 = clk::now();
  xrtio::backend::native_device* list[1] = {d};
  (void)w.wait(t0 + limit, d ? std::span<xrtio::backend::native_device* const>(list, 1)
                             : std::span<xrtio::backend::native_device* const>());
  return std::chrono::duration<double, std::milli>(clk::now() - t0).count();
}

// The primitive on io_uring in the mode asked for, after a first 1 ms wait
// listing `d` (which makes its watch); nullptr (the case says why, loudly)
// where io_uring is refused, or where multishot was asked for and the
// kernel refuses it (then the primitive runs the one-shot mode, which the
// first case also tests).
std::unique_ptr<wait_primitive> ring_waiter(bool multishot, device& d) {
  auto w = std::make_unique<wait_primitive>(true);
  if (!w->uses_io_uring()) {
    std::printf("XRTIO-SKIP: io_uring is refused here: the primitive uses ppoll\n");
    return nullptr;
  }
  if (!multishot) w->disable_multishot();
  (void)wait_ms(*w, d.dev, 1ms);
  if (multishot && !w->multishot()) {
    std::printf("XRTIO-SKIP: this kernel refuses multishot polls: the primitive uses one-shot polls\n");
    return nullptr;
  }
  return w;
}

}  // namespace

TEST_CASE("wait primitive: each completion ends a wait listing its device, and a wait with none sleeps to its deadline") {
  for (bool multishot : {true, false}) {
    CAPTURE(multishot);
    device d;
    auto w = ring_waiter(multishot, d);
    if (!w && multishot) continue;
    if (!w) return;
    for (int i = 0; i < 3; ++i) {
      CAPTURE(i);
      auto h = d.start();
      // Ended by the completion (20 ms), not by the 10 s deadline.
      CHECK(wait_ms(*w, d.dev, 10s) < 5000);
      CHECK(h.wait(10s).state == xrtio::run_state::completed);
      // No completion since: the wait runs to its deadline. A level-triggered
      // poll on the undrained fd would end it at once.
      CHECK(wait_ms(*w, d.dev, 60ms) >= 60);
    }
    if (multishot) {
      CHECK(w->multishot());
      CHECK(w->watches() == 1);
      CHECK(d.fd_readable());  // nothing read the count
    } else {
      CHECK(w->watches() == 0);
      CHECK(!d.fd_readable());  // one-shot polls: consume_event() read it
    }
  }
}

TEST_CASE("wait primitive: a completion while no wait listed the device ends the next wait that lists it, at once") {
  device d;
  auto w = ring_waiter(true, d);  // the watch is made
  if (!w) return;
  auto h = d.start();
  CHECK(h.wait(10s).state == xrtio::run_state::completed);
  // Its write arrives while this wait lists nothing (the reactor's idle
  // sleep, or a doze): it must not end that wait...
  CHECK(wait_ms(*w, nullptr, 60ms) >= 60);
  // ...and it is not lost: the next wait listing the device ends at once.
  CHECK(wait_ms(*w, d.dev, 10s) < 5000);
  // It was acknowledged (event_seen): the device writes for the next
  // completion, which ends a wait.
  auto h2 = d.start();
  CHECK(wait_ms(*w, d.dev, 10s) < 5000);
  CHECK(h2.wait(10s).state == xrtio::run_state::completed);
}

TEST_CASE("wait primitive: a watch whose device fires twice while not listed is dropped, and made again when listed") {
  device d;
  auto w = ring_waiter(true, d);
  if (!w) return;
  REQUIRE(w->watches() == 1);
  for (int i = 0; i < 2; ++i) {
    // Another runtime's runs, say: this waiter does not acknowledge them,
    // so the device is told here, as that runtime's reactor would.
    auto h = d.start();
    CHECK(h.wait(10s).state == xrtio::run_state::completed);
    CHECK(wait_ms(*w, nullptr, 40ms) >= 40);
    d.dev->event_seen();
  }
  CHECK(w->watches() == 0);
  // Listed again: a new watch, whose arming fires at once (the device's
  // count was never read, so it is readable), and that is acknowledged...
  CHECK(wait_ms(*w, d.dev, 10s) < 5000);
  CHECK(w->watches() == 1);
  // ...so the next completion ends a wait too.
  auto h = d.start();
  CHECK(wait_ms(*w, d.dev, 10s) < 5000);
  CHECK(h.wait(10s).state == xrtio::run_state::completed);
}

TEST_CASE("wait primitive: after a watched device is destroyed, a new device's completions end waits") {
  device first;
  auto w = ring_waiter(true, first);
  if (!w) return;
  for (int i = 0; i < 20; ++i) {
    CAPTURE(i);
    // Each device may get the address and the event fd number of the one
    // before it; the watch is told apart by event_serial().
    device d(1ms);
    auto h = d.start();
    CHECK(wait_ms(*w, d.dev, 10s) < 5000);
    CHECK(h.wait(10s).state == xrtio::run_state::completed);
  }
  CHECK(w->watches() <= 2 * wait_primitive::max_sources);
}

TEST_CASE("wait primitive: two waiters watching one device both see its completion") {
  // Two runtimes' reactors, each on its own thread (a ring's poll
  // completions run as task work of the thread that armed them).
  device d(50ms);
  auto w1 = ring_waiter(true, d);
  if (!w1) return;
  std::atomic<bool> armed{false};
  double other = 0;
  std::thread t([&] {
    wait_primitive w2(true);
    (void)wait_ms(w2, d.dev, 1ms);  // its watch is made before the run starts
    armed = true;
    other = wait_ms(w2, d.dev, 10s);
  });
  while (!armed) std::this_thread::sleep_for(1ms);
  auto h = d.start();
  double mine = wait_ms(*w1, d.dev, 10s);
  t.join();
  CHECK(mine < 5000);
  CHECK(other < 5000);
  CHECK(h.wait(10s).state == xrtio::run_state::completed);
}
