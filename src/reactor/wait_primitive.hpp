// How the reactor thread blocks: on an io_uring ring (one io_uring_enter
// submits the polls and waits with a timeout), or, where io_uring is refused
// (seccomp, old kernels, qemu-user), on eventfd + ppoll. Either way it wakes
// for a notify(), a device's completion event fd, or the time limit.
#pragma once

#include <liburing.h>

#include <chrono>
#include <cstdint>
#include <span>

#include "xrtio/backend/backend.hpp"

namespace xrtio::detail {

class wait_primitive {
 public:
  using clock = std::chrono::steady_clock;
  /// Most device event fds one wait watches (one per tracked device).
  static constexpr unsigned max_sources = 16;

  /// Probes io_uring when asked to; throws xrtio::error if no eventfd.
  explicit wait_primitive(bool try_io_uring);
  ~wait_primitive();
  wait_primitive(const wait_primitive&) = delete;
  wait_primitive& operator=(const wait_primitive&) = delete;

  bool uses_io_uring() const noexcept { return uring_; }
  /// The eventfd notify() writes: the file ring's completions write it too.
  int wake_fd() const noexcept { return wake_fd_; }

  /// Any thread: ends the current or next wait.
  void notify() noexcept;

  /// Reactor thread: blocks until notify(), an event on one of `sources`
  /// (consumed through consume_event()), or `until` (max(): no timer).
  /// Returns whether a notify() ended it (its count is read).
  bool wait(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;

 private:
  bool wait_uring(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;
  bool wait_ppoll(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;

  // Enough for the wake poll, this wait's device polls and the removals of
  // the previous wait's: 1 + 2 * max_sources, rounded up to a power of two.
  static constexpr unsigned ring_entries = 64;
  // user_data tags: 0 removals, 1 the wake fd, (wait number << 8) | (2 + i)
  // device i's poll, so a completion left over from an earlier wait is told apart.
  static constexpr std::uint64_t removal_tag = 0, wake_tag = 1, first_source_tag = 2;

  int wake_fd_ = -1;
  io_uring ring_{};
  bool uring_ = false;
  bool wake_armed_ = false;
  std::uint64_t wait_seq_ = 0;
  std::uint64_t armed_tags_[max_sources]{};  // device polls still armed from the last wait
  unsigned armed_count_ = 0;
};

}  // namespace xrtio::detail
