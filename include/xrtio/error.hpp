// xrtio error codes: one enum, one category, one exception type.
#pragma once

#include <string>
#include <system_error>

namespace xrtio {

/// Every failure xrtio reports. Asynchronous operations complete with a
/// std::error_code built from these (or asio::error::operation_aborted for
/// cancellation); synchronous calls throw xrtio::error.
enum class errc {
  invalid_size = 1,        ///< zero or overflowing size / offset, or an empty (default-constructed or moved-from) handle
  out_of_range,            ///< a view or transfer outside its buffer
  range_in_use,            ///< overlapping access held by a run or host op (invariant 6)
  range_retained,          ///< the range belongs to a run retained after a refused abort (invariant 5)
  budget_exceeded,         ///< a reservation over the memory budget's ceiling (invariant 7)
  too_many_arguments,      ///< more than max_arguments run arguments
  argument_count,          ///< argument count does not match the kernel
  argument_kind,           ///< a scalar where a buffer belongs, or the reverse, or a wrong scalar size
  unknown_kernel,          ///< no kernel of that name in the loaded program
  foreign_context,         ///< a buffer of another context on a same-context run
  invalid_xclbin,          ///< missing, truncated or corrupt xclbin
  backend_failure,         ///< the native layer (XRT) threw or refused
  device_lost,             ///< the device stopped answering; nothing more runs on it
  run_error,               ///< final ERT state ERROR
  run_aborted,             ///< final ERT state ABORT (not requested by xrtio)
  run_timeout_state,       ///< final ERT state TIMEOUT reported by the device
  run_no_response,         ///< final ERT state NORESPONSE
  soft_kernel_error,       ///< final ERT state SKERROR
  soft_kernel_crashed,     ///< final ERT state SKCRASHED
  timed_out,               ///< run_options::timeout, io_options::timeout or run_handle::wait's timeout passed: a run on the device was aborted; a run or transfer still waiting for its leases was withdrawn; a transfer's pieces were cancelled
  abort_failed,            ///< abort refused or past its grace period: the run is retained (invariant 5)
  busy,                    ///< a prepared run executed while its previous execution is in flight
  shut_down,               ///< the runtime is shutting down or gone
  not_supported,           ///< the backend or platform cannot do this
  misaligned,              ///< memory not aligned as required (imported user memory; O_DIRECT under misaligned_policy::fail)
  invalid_option,          ///< a run, runtime, file or transfer option out of its range (a negative duration)
};

const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

/// Thrown by synchronous calls. what() names the offending values.
class error : public std::system_error {
 public:
  error(errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
  error(std::error_code code, const std::string& what) : std::system_error(code, what) {}
};

/// Throws xrtio::error(code, what). Out of line so call sites stay small.
[[noreturn]] void throw_error(errc code, const std::string& what);

}  // namespace xrtio

template <>
struct std::is_error_code_enum<xrtio::errc> : std::true_type {};
