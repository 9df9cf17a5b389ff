// A test that hangs on purpose, run only by the CTest entry
// watchdog.hung_test_prints_stacks (tests/CMakeLists.txt): it checks that
// the runner's watchdog (tests/main.cpp) prints every thread's stack,
// naming the function each thread is stuck in, before it aborts.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

namespace {
[[gnu::noinline]] void xrtio_watchdog_hang_here() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
}  // namespace

TEST_CASE("watchdog: a test that never returns") {
  std::thread other([] { xrtio_watchdog_hang_here(); });
  other.detach();
  xrtio_watchdog_hang_here();
}
