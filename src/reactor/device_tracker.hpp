// The devices that have runs on them, with how many each has, so that a
// reactor pass can ask the devices whether anything finished
// (take_completions, from each device's completion_count) instead of scanning every run, and so that a sleep can
// wait on their completion event fds.
#pragma once

#include <span>

#include "wait_primitive.hpp"
#include "xrtio/backend/backend.hpp"

namespace xrtio::detail {

class device_tracker {
 public:
  /// One slot per event source the wait primitive can watch; runs on
  /// devices beyond that are counted as untracked and force full scans.
  static constexpr unsigned max_tracked = wait_primitive::max_sources;

  void add(backend::native_device* dev) noexcept;
  void remove(backend::native_device* dev) noexcept;

  /// Some runs are on devices past max_tracked.
  bool has_untracked() const noexcept { return untracked_ > 0; }

  struct signals {
    bool completed = false;  // an evented device says runs finished
    bool polled = false;     // a device has no event: its runs must be polled
  };
  /// Asks every tracked device whether runs finished since this tracker last asked.
  signals take_completions() noexcept;

  /// The tracked devices' event sources, for one sleep. `complete` is true
  /// when every run in flight is on a device with an event fd (the sleep may
  /// then wait for events instead of polling).
  struct sources {
    std::span<backend::native_device* const> devices;
    bool complete = false;
  };
  sources event_sources() noexcept;

 private:
  struct tracked_device {
    backend::native_device* dev;
    unsigned runs;
    std::uint64_t seen = 0;  // the device's completion_count() at this reactor's last look
  };
  tracked_device tracked_[max_tracked]{};
  unsigned count_ = 0;
  unsigned untracked_ = 0;
  backend::native_device* sources_[max_tracked]{};
};

}  // namespace xrtio::detail
