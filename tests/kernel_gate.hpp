// Test helper: a gate the kernels of a test wait on before they compute, so
// that a run stays on the device, holding its leases, until the test has
// looked. A device latency as that window could end before the test looked
// (a test thread preempted for 20 ms on a loaded CI host), and the state it
// meant to check was gone (docs/RELIABILITY.md, "Timing windows on a loaded
// host").
#pragma once

#include <condition_variable>
#include <mutex>

namespace rtest {

struct kernel_gate {
  std::mutex m;
  std::condition_variable cv;
  bool open_ = false;
  void open() {
    std::lock_guard l(m);
    open_ = true;
    cv.notify_all();
  }
  /// Closes it again; only while no kernel waits on it.
  void close() {
    std::lock_guard l(m);
    open_ = false;
  }
  void wait() {
    std::unique_lock l(m);
    cv.wait(l, [&] { return open_; });
  }
};

/// Opens a gate when the test leaves its scope, a failed REQUIRE included.
/// Made after the fixture, so destroyed before it: a kernel still waiting
/// on the gate would otherwise keep its compute unit, and the device's and
/// runtime's destructors would wait for it for good.
struct open_at_exit {
  kernel_gate& g;
  ~open_at_exit() { g.open(); }
};

}  // namespace rtest
