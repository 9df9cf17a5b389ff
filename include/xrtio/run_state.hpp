// ERT command states as XRT reports them, and what each final state means.
#pragma once

#include <cstdint>
#include <string_view>
#include <system_error>

#include "xrtio/error.hpp"

namespace xrtio {

/// ERT command states, with XRT's numeric values. They are NOT ordered:
/// submitted (7) > completed (4). Only `completed` is success (invariant 3).
enum class run_state : std::int32_t {
  new_ = 1,
  queued = 2,
  running = 3,
  completed = 4,
  error = 5,
  abort = 6,
  submitted = 7,
  timeout = 8,
  no_response = 9,
  skerror = 10,
  skcrashed = 11,
};

/// True for states after which the device no longer touches the run's memory.
constexpr bool is_final(run_state s) noexcept {
  switch (s) {
    case run_state::completed:
    case run_state::error:
    case run_state::abort:
    case run_state::timeout:
    case run_state::no_response:
    case run_state::skerror:
    case run_state::skcrashed:
      return true;
    default:
      return false;
  }
}

/// The error a final state stands for; empty for `completed` (invariant 3).
inline std::error_code state_error(run_state s) noexcept {
  switch (s) {
    case run_state::completed: return {};
    case run_state::error: return errc::run_error;
    case run_state::abort: return errc::run_aborted;
    case run_state::timeout: return errc::run_timeout_state;
    case run_state::no_response: return errc::run_no_response;
    case run_state::skerror: return errc::soft_kernel_error;
    case run_state::skcrashed: return errc::soft_kernel_crashed;
    default: return errc::backend_failure;  // not final: a caller bug
  }
}

std::string_view to_string(run_state s) noexcept;

}  // namespace xrtio
