// Synchronous runs (xrtio::start and run_handle) and the process's retained
// runs. Arguments, options and results: run_options.hpp.
#pragma once

#include <chrono>
#include <memory>
#include <system_error>
#include <vector>

#include "xrtio/detail/run_core.hpp"
#include "xrtio/run_options.hpp"

namespace xrtio {

/// Retained runs in this process (invariant 5): kept with their buffers and
/// leases because the device may still write their memory.
std::size_t retained_runs() noexcept;
/// Releases retained runs whose device has since reported a final state;
/// returns how many were released.
std::size_t reap_retained() noexcept;

class run_handle;
namespace detail {
/// xrtio::start's body: validates, leases, submits. Returns the handle itself
/// (not a unique_ptr<run_handle::impl>, whose destructor would need the
/// incomplete impl in every caller of start).
run_handle make_sync_run(const kernel& k, std::vector<arg_slot> slots, std::size_t given, const run_options& options);
}  // namespace detail

/// A run started with xrtio::start: holds every lease and buffer until wait()
/// has seen the run final, or until the handle is destroyed. Nothing else
/// watches a synchronous run, so one that ended on the device but was not
/// waited for still holds its leases: a host write to its buffers is refused
/// with range_in_use, and an asynchronous run queued behind it
/// (conflict_policy::wait) waits until this handle's wait() or destruction.
/// Destroying a handle that was never waited aborts the run if it is not
/// final; a refused abort retains it (invariant 5).
class run_handle {
 public:
  run_handle() noexcept;  // out of line: unique_ptr<impl> needs the complete impl
  run_handle(run_handle&&) noexcept;
  run_handle& operator=(run_handle&&) noexcept;
  ~run_handle();

  /// Waits up to `timeout` for a final state. Returns the result when it is
  /// COMPLETED. Throws xrtio::error: the final state's own code (run_error,
  /// run_aborted, device_lost, ...), errc::timed_out after aborting a run that
  /// outlived `timeout`, errc::abort_failed when that abort was refused (the
  /// run is then retained), errc::invalid_option for a negative `timeout`
  /// (the run goes on), errc::invalid_size on an empty handle. A `timeout`
  /// of a year or more waits without limit. The result stays available
  /// through result().
  run_result wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
  /// Non-throwing form: `ec` is set as wait() would throw.
  run_result wait(std::chrono::nanoseconds timeout, std::error_code& ec) noexcept;
  /// The last result wait() saw.
  const run_result& result() const noexcept;
  /// Current device state without blocking.
  run_state state() const noexcept;
  bool valid() const noexcept { return impl_ != nullptr; }

 private:
  struct impl;
  friend run_handle detail::make_sync_run(const kernel& k, std::vector<detail::arg_slot> slots, std::size_t given,
                                          const run_options& options);
  explicit run_handle(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

/// Starts `k` with `args` (buffers, in/out/inout buffers, scalars), optionally
/// followed by run_options. Leases are taken before submission; a conflict
/// throws errc::range_in_use (conflict_policy::wait is for async_run).
/// Throws the errors of run_core::validate and the backend's start.
template <class... Args>
run_handle start(const kernel& k, Args&&... args) {
  std::vector<detail::arg_slot> slots;
  run_options options;
  std::size_t given = detail::collect_args(slots, options, std::forward<Args>(args)...);
  return detail::make_sync_run(k, std::move(slots), given, options);
}

}  // namespace xrtio
