// What a run is given and what it reports: argument access modes (in, out,
// inout), run options, and the result of a finished run.
#pragma once

#include <chrono>
#include <cstddef>

#include "xrtio/buffer.hpp"
#include "xrtio/run_state.hpp"

namespace xrtio {

class runtime;

/// The most arguments one run takes.
inline constexpr std::size_t max_arguments = 64;

/// How a run argument uses its buffer: read (shared with other readers) or
/// write (exclusive) (docs/DESIGN.md, invariant 6).
using access_mode = detail::access_mode;

/// A buffer argument with the access it declares.
struct buffer_arg {
  xrtio::buffer buffer;
  access_mode mode = access_mode::write;
};
/// The device only reads `b`: shared with other readers.
inline buffer_arg in(buffer b) { return {std::move(b), access_mode::read}; }
/// The device writes `b`: exclusive.
inline buffer_arg out(buffer b) { return {std::move(b), access_mode::write}; }
/// The device reads and writes `b`: exclusive.
inline buffer_arg inout(buffer b) { return {std::move(b), access_mode::write}; }

/// What a run does when an argument's range is held by someone else.
enum class conflict_policy {
  fail,  ///< complete with errc::range_in_use
  wait,  ///< queue until the ranges are free, FIFO per allocation (async_run only)
};

struct run_options {
  /// Abort the run if it has not reached a final state after this long; 0 = no
  /// deadline. For xrtio::start, counted from start() and enforced by wait().
  std::chrono::nanoseconds timeout{0};
  conflict_policy on_conflict = conflict_policy::fail;
  /// Allow buffers of other contexts on the same physical device. The caller
  /// vouches that each buffer's memory bank suits its argument: XRT 2.13 does
  /// not refuse a mismatch, it warns and runs on a local copy in the connected
  /// bank, so the output may never reach the caller's buffer. A buffer of
  /// another backend is still refused (errc::foreign_context), as is, on
  /// XRT, one of another device index; the simulator does not tell its
  /// devices apart (all of their memory is the host's).
  bool cross_context = false;
  /// The runtime whose reactor completes the run (async_run); null = the
  /// context's (context::bind), else default_runtime().
  xrtio::runtime* runtime = nullptr;
};

/// What a finished run reports. `state` is the device's real ERT state: the
/// final one, except for a retained run (errc::abort_failed), whose state is
/// the last one seen (the device never reported a final state in time), and
/// a run refused before the device saw it (NEW).
struct run_result {
  run_state state = run_state::new_;
  std::chrono::steady_clock::time_point submitted{};         ///< start() on the device
  std::chrono::steady_clock::time_point device_completed{};  ///< when the device finished, if known
  std::chrono::steady_clock::time_point observed{};          ///< when xrtio saw the final state
  bool ok() const noexcept { return state == run_state::completed; }
};

}  // namespace xrtio
