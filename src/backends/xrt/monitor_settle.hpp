// monitor_settle: waiting, after XRT starts a device's command monitor,
// until that thread is asleep, so that an exit soon after cannot lose the
// monitor's stop signal (docs/DESIGN.md, Pitfalls: XRT 2.13's exit hang).
// Private to src/backends/xrt.
//
// XRT before 2.15 stops each monitor at exit by setting a flag and
// notifying its condition variable without the mutex the monitor checks it
// under; a monitor between that check and its wait misses the notification
// and the exit's join blocks for ever. The monitor starts with the first
// kernel opened on a device and, for a program that submits no managed
// commands (xrtio submits none: its starts, waits and aborts are XRT's
// unmanaged ones), never wakes again: once it has been seen asleep it stays
// in its wait, where the notification reaches it. Code of the program's own
// that submits managed commands through XRT directly (xrt::run callbacks,
// events, OpenCL) wakes it again and reopens the window; that is XRT's bug
// and outside what this wait covers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <vector>

namespace xrtio::xrt_backend::detail {

/// The process's threads (their ids), read from /proc/self/task; empty
/// where that cannot be read. Throws std::bad_alloc when the list cannot
/// grow, with the directory closed again.
std::vector<pid_t> process_threads();

/// Waits until every thread of the process that is not in `before` (and is
/// not the caller) has been asleep (state S in /proc) in `readings`
/// consecutive readings `gap` apart, or until `limit` has passed; returns at
/// once when the first reading finds no such thread. Returns whether they
/// were seen asleep (false: the limit passed first, or a reading could not
/// be made for want of memory). Never throws: it is called with a freshly
/// opened xrt::kernel in hand (xrt_device_impl::kernel), which an exception
/// would destroy in place, outside the no-op driver's guard (noop_guard.hpp).
bool settle_new_threads(const std::vector<pid_t>& before, std::chrono::milliseconds limit,
                        int readings = 3, std::chrono::microseconds gap = std::chrono::microseconds(500)) noexcept;

}  // namespace xrtio::xrt_backend::detail
