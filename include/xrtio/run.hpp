// Run arguments, options and results, and the synchronous run API.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "xrtio/buffer.hpp"
#include "xrtio/context.hpp"
#include "xrtio/run_state.hpp"
#include "xrtio/runtime.hpp"

namespace xrtio {

/// The most arguments one run takes.
inline constexpr std::size_t max_arguments = 64;

/// A buffer argument with the access it declares (invariant 6).
struct buffer_arg {
  xrtio::buffer buffer;
  detail::access_mode mode = detail::access_mode::write;
};
/// The device only reads `b`: shared with other readers.
inline buffer_arg in(buffer b) { return {std::move(b), detail::access_mode::read}; }
/// The device writes `b`: exclusive.
inline buffer_arg out(buffer b) { return {std::move(b), detail::access_mode::write}; }
/// The device reads and writes `b`: exclusive.
inline buffer_arg inout(buffer b) { return {std::move(b), detail::access_mode::write}; }

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
  /// bank, so the output may never reach the caller's buffer.
  bool cross_context = false;
  /// The runtime whose reactor completes the run (async_run); null = the
  /// context's (context::bind), else default_runtime().
  xrtio::runtime* runtime = nullptr;
};

/// What a finished run reports. `state` is always the real final ERT state.
struct run_result {
  run_state state = run_state::new_;
  std::chrono::steady_clock::time_point submitted{};         ///< start() on the device
  std::chrono::steady_clock::time_point device_completed{};  ///< when the device finished, if known
  std::chrono::steady_clock::time_point observed{};          ///< when xrtio saw the final state
  bool ok() const noexcept { return state == run_state::completed; }
};

/// Retained runs in this process (invariant 5): kept with their buffers and
/// leases because the device may still write their memory.
std::size_t retained_runs() noexcept;
/// Releases retained runs whose device has since reported a final state;
/// returns how many were released.
std::size_t reap_retained() noexcept;

namespace detail {

/// One argument, type-erased: a buffer (with its access request) or the
/// bytes of a scalar.
struct arg_slot {
  xrtio::buffer buffer;  // empty for scalars
  access_mode mode = access_mode::write;
  std::uint8_t scalar_size = 0;
  std::array<std::byte, 16> scalar{};
};

template <class T>
inline constexpr bool is_buffer_arg_v =
    std::is_same_v<std::remove_cvref_t<T>, buffer> || std::is_same_v<std::remove_cvref_t<T>, buffer_arg>;

template <class T>
void to_slot(arg_slot& s, T&& a) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, buffer>) {
    s.buffer = std::forward<T>(a);
    s.mode = access_mode::write;  // untagged buffers are written (DESIGN.md)
  } else if constexpr (std::is_same_v<U, buffer_arg>) {
    s.buffer = std::forward<T>(a).buffer;
    s.mode = a.mode;
  } else {
    static_assert(std::is_trivially_copyable_v<U> && sizeof(U) <= 16,
                  "run arguments are buffers, in()/out()/inout() buffers, or trivially copyable scalars of <= 16 bytes");
    s.scalar_size = sizeof(U);
    std::memcpy(s.scalar.data(), &a, sizeof(U));
  }
}

class abort_ticket;
struct prepared_state;

/// The part of a run shared by the synchronous handle and the asynchronous
/// operation: its kernel, arguments, leases and native run. Storage for the
/// slots and requests is provided by the owner (inline in async operations).
class run_core {
 public:
  run_core(xrtio::kernel k, std::span<arg_slot> slots, std::span<access_request> reqs) noexcept
      : kernel_(std::move(k)), slots_(slots), reqs_(reqs) {}
  run_core(const run_core&) = delete;
  run_core& operator=(const run_core&) = delete;
  ~run_core();

  /// Checks count, kinds, scalar sizes and contexts; fills the access
  /// requests. Throws xrtio::error (argument_count, too_many_arguments,
  /// argument_kind, foreign_context, invalid_size).
  void validate(std::size_t given_args, const run_options& options);
  /// All-or-nothing leases. `waiter` null: conflicts fail.
  acquire_status acquire(std::string* why, const access_waiter* waiter = nullptr) noexcept;
  void withdraw(const void* owner) noexcept { access_tracker::withdraw(reqs_, owner); }
  /// Makes (or reuses) the native run, binds the arguments, submits. Throws.
  /// For a prepared run: submits the run bound once by prepare().
  void start();
  /// Binds every argument into `r` (set_arg). Throws.
  void bind(backend::native_run& r);
  /// Executes the prepared run `p` instead: its arguments, requests and
  /// native run (bound once); release() marks it free for the next execution.
  void use_prepared(std::shared_ptr<prepared_state> p) noexcept;
  /// Leases, then the native run. Only once the device let go (invariant 2).
  void release() noexcept;
  /// Keeps run, buffers and leases for good (invariant 5).
  void retain(std::shared_ptr<abort_ticket> ticket) noexcept;

  backend::native_run* native() const noexcept;
  const xrtio::kernel& kernel() const noexcept { return kernel_; }
  bool leased() const noexcept { return leased_; }
  std::chrono::steady_clock::time_point submitted() const noexcept { return submitted_; }
  run_result result(run_state s) const noexcept;

 private:
  xrtio::kernel kernel_;
  std::span<arg_slot> slots_;
  std::span<access_request> reqs_;
  backend::native_run_ptr run_;
  std::shared_ptr<prepared_state> prepared_;
  bool leased_ = false;
  std::chrono::steady_clock::time_point submitted_{};
};

/// Throws xrtio::error for an acquire failure, naming both ranges.
[[noreturn]] void throw_acquire(acquire_status st, const std::string& why);

template <class... Args>
constexpr std::size_t buffer_arg_count() {
  return (std::size_t{0} + ... + (is_buffer_arg_v<Args> ? 1 : 0));
}

}  // namespace detail

class run_handle;
namespace detail {
/// xrtio::start's body: validates, leases, submits. Returns the handle itself
/// (not a unique_ptr<run_handle::impl>, whose destructor would need the
/// incomplete impl in every caller of start).
run_handle make_sync_run(const kernel& k, std::vector<arg_slot> slots, std::size_t given, const run_options& options);
}  // namespace detail

/// A run started with xrtio::start: holds every lease and buffer until the
/// run is final. Destroying a handle that was never waited aborts the run; a
/// refused abort retains it (invariant 5).
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
  /// run is then retained). The result stays available through result().
  run_result wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());
  /// Non-throwing form: `ec` is set as wait() would throw.
  run_result wait(std::chrono::nanoseconds timeout, std::error_code& ec) noexcept;
  /// The last result wait() saw.
  const run_result& result() const noexcept;
  /// Current device state without blocking.
  run_state state() const noexcept;
  bool valid() const noexcept { return impl_ != nullptr; }

  struct impl;

 private:
  friend run_handle detail::make_sync_run(const kernel& k, std::vector<detail::arg_slot> slots, std::size_t given,
                                          const run_options& options);
  explicit run_handle(std::unique_ptr<impl> p) noexcept;
  std::unique_ptr<impl> impl_;
};

namespace detail {
struct sync_run_storage {
  std::vector<arg_slot> slots;
  std::vector<access_request> reqs;
};
}  // namespace detail

namespace detail {
/// Turns run arguments (optionally with one run_options among them) into
/// slots; returns how many arguments were given.
template <class... Args>
std::size_t collect_args(std::vector<arg_slot>& slots, run_options& options, Args&&... args) {
  slots.reserve(sizeof...(Args));
  std::size_t given = 0;
  [[maybe_unused]] auto one = [&](auto&& a) {  // unused for a kernel without arguments
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(a)>, run_options>) {
      options = a;
    } else {
      ++given;
      to_slot(slots.emplace_back(), std::forward<decltype(a)>(a));
    }
  };
  (one(std::forward<Args>(args)), ...);
  return given;
}
}  // namespace detail

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
