// Measuring the reactor's idle wake-ups per second on the simulated device.
#include "idle_wakeups.hpp"

#include <algorithm>
#include <asio.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "measurement.hpp"
#include "process_usage.hpp"
#include "xrtio/xrtio.hpp"

using namespace std::chrono_literals;

namespace bench {

double idle_wakeups_per_s(double secs) {
  auto rt = named("l:rx", [] { return std::make_unique<xrtio::runtime>(); });
  auto ctx = named("l:dev", [] { return xrtio::sim::open(); });
  ctx.bind(*rt);
  asio::io_context io;
  for (int i = 0; i < 100; ++i)
    asio::co_spawn(io, xrtio::async_run(ctx.kernel("noop"), asio::use_awaitable), asio::detached);
  io.run();
  std::this_thread::sleep_for(50ms);  // past the spin window
  auto s0 = rt->stats();
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  auto s1 = rt->stats();
  return double((s1.wakeups - s0.wakeups) + (s1.sleeps - s0.sleeps)) / secs;
}

double median_idle_wakeups_per_s(int repeat, bool quick) {
  std::vector<double> idle;
  for (int i = 0; i < std::min(repeat, 3); ++i) idle.push_back(idle_wakeups_per_s(quick ? 0.5 : 1.0));
  return median(idle);
}

}  // namespace bench
