// How the reactor thread blocks: on an io_uring ring (one io_uring_enter
// submits the polls and waits with a timeout), or, where io_uring is refused
// (seccomp, old kernels, qemu-user), on eventfd + ppoll. Either way it wakes
// for a notify(), a device's completion event fd, or the time limit.
//
// On the ring, each device's event fd (through a duplicate the primitive
// owns) is watched by a multishot poll that stays armed across waits and
// posts a completion after each write. Nothing reads those fds: a device's
// wake-up costs no read(2) and a wait no poll re-arming, and a watch
// outlives the device's last run, so a reactor that sleeps between a run's
// completion and the next submission still watches it (docs/DESIGN.md,
// "Watching event fds"). Kernels that refuse multishot polls (before 5.13)
// get the one-shot poll and read(2) per wake-up of before.
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
  /// (acknowledged through event_seen(), or consume_event() without a
  /// watch), or `until` (max(): no timer). Returns whether a notify() ended
  /// it. A watched device that fired while it was not among the sources
  /// ends the next wait that lists it at once.
  bool wait(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;

  /// Devices watched by a multishot poll now (tests).
  unsigned watches() const noexcept;
  /// Whether waits use multishot polls (false after the kernel refused one).
  bool multishot() const noexcept { return multishot_; }
  /// Tests, before the first wait: use the one-shot polls and reads of
  /// kernels without multishot.
  void disable_multishot() noexcept { multishot_ = false; }

 private:
  bool wait_uring(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;
  bool wait_ppoll(clock::time_point until, std::span<backend::native_device* const> sources) noexcept;

  // A device event fd watched across waits: a duplicate of the device's fd
  // (so the watch never refers to a closed or reused fd number) under a
  // multishot poll. `dev` is only used while the device is one of the
  // current wait's sources (seen == wait_seq_): the device can be gone
  // otherwise.
  struct watch {
    std::uint64_t serial = 0;  // the device's event_serial(); 0: a free slot
    std::uint64_t tag = 0;     // user_data of its poll, new for every arming
    std::uint64_t seen = 0;    // the last wait that listed the device
    backend::native_device* dev = nullptr;
    int fd = -1;
    bool armed = false;        // its poll may still post
    unsigned fired = 0;        // writes seen while not among a wait's sources
  };
  static constexpr unsigned max_watches = 2 * max_sources;

  // Returns whether `d` is watched; sets `pending` if its device fired
  // while not listed (then acknowledged here).
  bool watch_source(backend::native_device* d, bool& pending) noexcept;
  watch* new_watch(backend::native_device* d) noexcept;
  void arm(watch& w) noexcept;
  // Removes a watch; false (nothing changed) when no SQE is free for the removal.
  bool drop(watch& w) noexcept;
  // One completion of a watch's poll; returns whether it is a listed device's event.
  bool watch_fired(const io_uring_cqe& cqe) noexcept;
  void refuse_multishot() noexcept;

  // Enough for the wake poll, this wait's device polls and the removals of
  // the previous wait's (1 + 2 * max_sources), and the arming and removal of
  // every watch, rounded up to a power of two.
  static constexpr unsigned ring_entries = 128;
  // user_data tags: 0 removals, 1 the wake fd, (wait number << 8) | (2 + i)
  // device i's one-shot poll, so a completion left over from an earlier
  // wait is told apart; watch_bit | (arming number << 8) | slot a watch's.
  static constexpr std::uint64_t removal_tag = 0, wake_tag = 1, first_source_tag = 2;
  static constexpr std::uint64_t watch_bit = std::uint64_t(1) << 63;

  int wake_fd_ = -1;
  io_uring ring_{};
  bool uring_ = false;
  bool multishot_ = true;
  bool wake_armed_ = false;
  std::uint64_t wait_seq_ = 0;
  std::uint64_t armings_ = 0;
  std::uint64_t armed_tags_[max_sources]{};  // one-shot device polls still armed from the last wait
  unsigned armed_count_ = 0;
  watch watches_[max_watches]{};
};

}  // namespace xrtio::detail
