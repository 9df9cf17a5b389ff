// The part of a run shared by the synchronous handle, the asynchronous
// operation and prepared runs: type-erased argument slots, validation, leases
// and the native run (docs/DESIGN.md, invariants 2, 5, 6, 8).
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
#include "xrtio/detail/access_tracker.hpp"
#include "xrtio/run_options.hpp"

namespace xrtio::detail {

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
    s.mode = access_mode::write;  // untagged buffers are written (docs/DESIGN.md, invariant 6)
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
class lease_batch;
struct prepared_state;

/// Throws xrtio::error(errc::invalid_option) for options out of range (a
/// negative timeout), naming the value.
void check_options(const run_options& options);

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
  /// argument_kind, foreign_context, invalid_size for an empty kernel or
  /// buffer, invalid_option as check_options).
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
  /// The same, but the leases go to `later`, released when it is flushed
  /// (the reactor's pass; not for prepared runs, whose requests the next
  /// execution reuses as soon as this one is marked free), and the native
  /// run, final, stays for drop_run() on the thread that frees the owner:
  /// recycled there, it goes back to its kernel's pool on the thread that
  /// takes it next (docs/PERFORMANCE.md, "The native run goes back where it
  /// is taken").
  void release(lease_batch& later) noexcept;
  /// Recycles a native run kept by release(later); before the owner's
  /// buffers go (invariant 2's order: leases, native run, buffers).
  void drop_run() noexcept { run_.reset(); }
  /// Keeps run, buffers and leases for good (invariant 5).
  void retain(std::shared_ptr<abort_ticket> ticket) noexcept;

  backend::native_run* native() const noexcept;
  /// The native run this core owns (null for a prepared run's): inline, for hints.
  backend::native_run* own_run() const noexcept { return run_.get(); }
  /// The lease requests' storage (in the op, past its first lines): for hints.
  const void* requests_data() const noexcept { return reqs_.data(); }
  const xrtio::kernel& kernel() const noexcept { return kernel_; }
  bool leased() const noexcept { return leased_; }
  std::chrono::steady_clock::time_point submitted() const noexcept { return submitted_; }
  /// The result in state `s`, observed now.
  run_result result(run_state s) const noexcept;
  /// The result in state `s` with `observed` as given: the reactor leaves it
  /// empty and stamps a whole pass's completions with one clock read when it
  /// posts them (a clock read costs ~0.1 us on a VM; see finish_stamp).
  run_result result(run_state s, std::chrono::steady_clock::time_point observed) const noexcept;

 private:
  void release_run() noexcept;  // the prepared run's mark and the native run

  xrtio::kernel kernel_;
  std::span<arg_slot> slots_;
  std::span<access_request> reqs_;
  backend::native_run_ptr run_;
  std::shared_ptr<prepared_state> prepared_;
  bool leased_ = false;
  std::chrono::steady_clock::time_point submitted_{};
};


template <class... Args>
constexpr std::size_t buffer_arg_count() {
  return (std::size_t{0} + ... + (is_buffer_arg_v<Args> ? 1 : 0));
}

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
}  // namespace xrtio::detail
