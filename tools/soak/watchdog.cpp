#include "watchdog.hpp"

namespace soak {
namespace {
constexpr auto tick = std::chrono::milliseconds(250);
/// A tick that took longer than this: the process was stopped or starved;
/// it does not count as time without progress.
constexpr auto stalled_tick = std::chrono::seconds(2);
}  // namespace

watchdog::watchdog(std::function<std::uint64_t()> progress, std::chrono::seconds limit,
                   std::function<void()> on_hang) {
  thread_ = std::thread([this, progress = std::move(progress), limit, on_hang = std::move(on_hang)] {
    auto last = progress();
    std::chrono::steady_clock::duration idle{0};
    auto before = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(tick);
      auto now = std::chrono::steady_clock::now();
      auto step = now - before;
      before = now;
      auto p = progress();
      if (p != last) {
        last = p;
        idle = {};
        continue;
      }
      if (step < stalled_tick) idle += step;
      if (idle >= limit) {
        on_hang();
        return;
      }
    }
  });
}

watchdog::~watchdog() {
  stop_.store(true);
  thread_.join();
}

}  // namespace soak
