// The bounded wait that refreshes an XRT run's state: the reactor's fallback
// when state() alone does not advance (docs/DESIGN.md, "Pitfalls"). Internal to
// the XRT backend; a header only so the logic can be tested with stand-in run
// types (tests/test_xrt_wait.cpp).
//
// Which XRT call is used is decided by what xrt::run offers, not by version:
//  - xrt::run::wait2(ms) (XRT 2.15+): returns std::cv_status and throws
//    xrt::run::command_error (on the NPU a subclass) for every final state
//    other than COMPLETED. Unlike wait(), it tells "the wait timed out" apart
//    from "the run ended in ERT TIMEOUT".
//  - xrt::run::wait(ms) otherwise (XRT 2.13): returns the state, or
//    ERT_CMD_STATE_TIMEOUT when the wait timed out (ambiguous, so re-read).
// Either way the final state is returned, never thrown (docs/DESIGN.md,
// invariant 3): the caller maps it to its own error code.
#pragma once

#include <ert.h>

#include <chrono>
#include <concepts>
#include <condition_variable>

#include "xrtio/run_state.hpp"

namespace xrtio::xrt_backend::detail {

/// XRT's state as xrtio's; an unknown value is never taken for a final state.
inline run_state to_run_state(ert_cmd_state s, run_state fallback) noexcept {
  auto v = static_cast<int>(s);
  if (v >= static_cast<int>(run_state::new_) && v <= static_cast<int>(run_state::skcrashed))
    return static_cast<run_state>(v);
  return fallback;
}

/// `Run` has XRT's wait2 (and the command_error it throws).
template <class Run>
concept has_wait2 = requires(const Run& r, const std::chrono::milliseconds& ms) {
  { r.wait2(ms) } -> std::same_as<std::cv_status>;
  typename Run::command_error;
  requires requires(const typename Run::command_error& e) {
    { e.get_command_state() } -> std::convertible_to<ert_cmd_state>;
  };
};

/// Waits up to `timeout` (at least 1 ms: XRT waits forever on 0) for `run`
/// and returns its state: final if the wait saw it end, else what state()
/// reads then (`last` if that throws too). Never throws.
template <class Run>
run_state wait_and_read(Run& run, std::chrono::milliseconds timeout, run_state last) noexcept {
  if (timeout < std::chrono::milliseconds(1)) timeout = std::chrono::milliseconds(1);
  try {
    if constexpr (has_wait2<Run>) {
      try {
        // no_timeout is wait2's promise of COMPLETED.
        if (run.wait2(timeout) == std::cv_status::no_timeout) return run_state::completed;
      } catch (const typename Run::command_error& e) {
        auto s = to_run_state(static_cast<ert_cmd_state>(e.get_command_state()), last);
        if (is_final(s)) return s;  // ERROR, ABORT, the device's TIMEOUT, ...: reported, not thrown
      }
    } else {
      auto s = run.wait(timeout);
      if (s != ERT_CMD_STATE_TIMEOUT) {  // TIMEOUT here may be the wait's, not the run's: re-read
        auto r = to_run_state(s, last);
        if (is_final(r)) return r;
      }
    }
  } catch (...) {
    // Anything else XRT throws says nothing about the run: read its state.
  }
  try {
    return to_run_state(run.state(), last);
  } catch (...) {
    return last;
  }
}

}  // namespace xrtio::xrt_backend::detail
