// The XRT backend's test seam: a hook called just before each XRT call that
// can fail, inside the backend's own try block, so that what it throws takes
// the path an exception from XRT takes. Private to src/backends/xrt and to
// tests/test_xrt_hook.cpp, which uses it to make XRT's no-op device fail
// where it never does by itself: start, abort, bo allocation, sync, sub-bo
// (docs/RELIABILITY.md, "XRT failure paths").
//
// Compiled in always, so the code tested is the code shipped. Its cost with
// no hook installed, per XRT call: loading the hook pointer (through the GOT
// in position-independent code: two loads) and a branch that is never
// taken; no lock, no system call, no allocation.
#pragma once

#include <atomic>
#include <cstddef>

namespace xrtio::xrt_backend::detail {

/// The XRT calls the hook sees.
enum class xrt_call {
  bo_alloc,             ///< xrt::bo(device, size, flags, group)
  bo_import,            ///< xrt::bo(device, user pointer, size, group)
  bo_sync_to_device,    ///< xrt::bo::sync(XCL_BO_SYNC_BO_TO_DEVICE, size, offset)
  bo_sync_from_device,  ///< xrt::bo::sync(XCL_BO_SYNC_BO_FROM_DEVICE, size, offset)
  bo_sub,               ///< xrt::bo(root, size, absolute offset)
  kernel_open,          ///< after xrt::kernel(device, ...) returned (XRT's later steps of opening)
  run_create,           ///< xrt::run(kernel)
  run_set_arg,          ///< xrt::run::set_arg (size: the argument's index)
  run_start,            ///< xrt::run::start
  run_state,            ///< xrt::run::state (the reactor's poll; a throw keeps the last state read)
  run_wait,             ///< xrt::run::wait / wait2 (a throw makes the backend read state())
  run_abort,            ///< xrt::run::abort (a throw is a refused abort)
};

class fault_hook {
 public:
  virtual ~fault_hook() = default;
  /// Called before XRT call `c`; may throw as XRT would. `size` and
  /// `offset`: the range of a bo call (0 otherwise). Called from any thread
  /// the backend runs on (callers, the reactor, abort workers).
  virtual void before(xrt_call c, std::size_t size, std::size_t offset) = 0;
};

/// The installed hook, or nullptr (always, outside tests).
inline std::atomic<fault_hook*> installed_fault_hook{nullptr};

/// Installs `h` (nullptr removes it). The caller keeps `h` alive for as long
/// as any thread may still be inside one of the backend's XRT calls.
inline void set_fault_hook(fault_hook* h) noexcept { installed_fault_hook.store(h, std::memory_order_release); }

/// Where the backend is about to make XRT call `c`.
inline void before_xrt_call(xrt_call c, std::size_t size = 0, std::size_t offset = 0) {
  if (auto* h = installed_fault_hook.load(std::memory_order_acquire)) [[unlikely]]
    h->before(c, size, offset);
}

}  // namespace xrtio::xrt_backend::detail
