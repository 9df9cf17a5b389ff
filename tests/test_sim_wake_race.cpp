// The simulated device's submission race (src/backends/sim/sim_device.cpp,
// wake_for): between a submitter's push into the inbox and its look at the
// units, a watching unit (idle_poll) can take the run and enter its kernel.
// The submitter then sees that unit in a kernel and the other asleep, takes
// the mutex and used to wake the other one for a run already running: CI's
// "200 taken by the watcher, 1 wake-ups" under ASan and TSan (16 of 100 runs
// of that test under TSan on one host). The race itself cannot be forced
// through the public API, so this test puts the device in the state the
// late submitter finds (one unit in a kernel, the other asleep, nothing
// queued) and runs the submitter's locked tail through a seam.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "backends/sim/sim_types.hpp"
#include "reactor_support.hpp"
#include "xrtio/context.hpp"
#include "xrtio/run.hpp"
#include "xrtio/sim.hpp"

namespace xrtio::sim::detail {
struct sim_test_access {
  /// What submit() does once looked_after() said no unit would look at the
  /// queue: take the mutex, drain the inbox, wake a unit if one is needed.
  static void submitter_tail(sim_device_impl& d) {
    std::unique_lock lock(d.mutex_);
    d.drain();
    d.wake_for(lock);
  }
  static unsigned asleep(const sim_device_impl& d) {
    std::lock_guard lock(d.mutex_);
    unsigned n = 0;
    for (auto& cu : d.cus_) n += cu->sleep_until.load() != sim_device_impl::cu_slot::awake;
    return n;
  }
  static unsigned executing(const sim_device_impl& d) {
    std::lock_guard lock(d.mutex_);
    unsigned n = 0;
    for (auto& cu : d.cus_) n += cu->executing.load();
    return n;
  }
};
}  // namespace xrtio::sim::detail

using namespace std::chrono_literals;
namespace sim = xrtio::sim;
using seam = xrtio::sim::detail::sim_test_access;

using rtest::eventually;

TEST_CASE("sim wake race: a submitter whose run a watching unit already took wakes no other unit") {
  sim::device_config cfg;
  cfg.compute_units = 2;
  cfg.idle_poll = 10s;
  std::atomic<bool> open{false};
  cfg.kernels.push_back({"held", {}, [&](sim::kernel_call& c) {
                           while (!open.load() && !c.stop_requested()) std::this_thread::sleep_for(100us);
                         }});
  auto ctx = sim::open(cfg);
  auto& dev = static_cast<sim::detail::sim_device_impl&>(sim::device_of(ctx));
  // First one unit watches and the other sleeps. Submitted earlier, the run
  // could be taken before the second unit reached its loop, which would then
  // watch in its turn (10 s) instead of sleeping.
  REQUIRE(eventually([&] { return seam::asleep(dev) == 1; }, 10s));
  auto h = xrtio::start(ctx.kernel("held"));
  // The watcher took the run and is in its kernel; the other unit sleeps.
  REQUIRE(eventually([&] { return seam::executing(dev) == 1 && seam::asleep(dev) == 1; }, 10s));
  auto before = dev.stats().wakeups;
  seam::submitter_tail(dev);  // the submitter of "held", late: its run is already running
  std::this_thread::sleep_for(50ms);  // a unit woken would be back from its sleep by now
  MESSAGE("wake-ups counted after the late submitter's look: " << dev.stats().wakeups - before);
  CHECK(dev.stats().wakeups == before);
  // A run that is queued still gets the sleeping unit woken: the held unit
  // cannot take it, so without a wake-up it would wait for the held kernel.
  auto n = xrtio::start(ctx.kernel("noop"));
  CHECK(n.wait(10s).ok());
  CHECK_FALSE(xrtio::is_final(h.state()));
  open = true;
  CHECK(h.wait(10s).ok());
}
