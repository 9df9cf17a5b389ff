// The outcome of an abort running on another thread. Shared by whoever waits
// for it (the reactor, a retained record), so it outlives all of them.
#pragma once

#include <atomic>

namespace xrtio::detail {

class abort_ticket {
 public:
  enum status : int { pending = 0, done = 1, refused = 2 };
  status get() const noexcept { return static_cast<status>(status_.load(std::memory_order_acquire)); }
  void set(status s) noexcept { status_.store(s, std::memory_order_release); }

 private:
  std::atomic<int> status_{pending};
};

}  // namespace xrtio::detail
