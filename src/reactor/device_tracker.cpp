// Tracking the devices that have runs in flight (see device_tracker.hpp).
#include "device_tracker.hpp"

namespace xrtio::detail {

void device_tracker::add(backend::native_device* dev) noexcept {
  for (unsigned i = 0; i < count_; ++i)
    if (tracked_[i].dev == dev) {
      ++tracked_[i].runs;
      return;
    }
  if (count_ < max_tracked) tracked_[count_++] = {dev, 1, 0};
  else ++untracked_;
}

void device_tracker::remove(backend::native_device* dev) noexcept {
  for (unsigned i = 0; i < count_; ++i)
    if (tracked_[i].dev == dev) {
      if (--tracked_[i].runs == 0) tracked_[i] = tracked_[--count_];
      return;
    }
  --untracked_;
}

device_tracker::signals device_tracker::take_completions() noexcept {
  signals s;
  for (unsigned i = 0; i < count_; ++i) {
    auto* d = tracked_[i].dev;
    if (d->event_fd() < 0) {
      s.polled = true;
      continue;
    }
    auto n = d->completion_count();
    if (n == 0 || n != tracked_[i].seen) s.completed = true;  // 0: unknown, scan
    tracked_[i].seen = n;
  }
  return s;
}

device_tracker::sources device_tracker::event_sources() noexcept {
  unsigned n = 0;
  bool all = count_ > 0 && untracked_ == 0;
  for (unsigned i = 0; i < count_; ++i) {
    auto* dev = tracked_[i].dev;
    if (dev->event_fd() < 0) all = false;
    else sources_[n++] = dev;
  }
  return {std::span<backend::native_device* const>(sources_, n), all};
}

}  // namespace xrtio::detail
