// The soak's hang detector: a run that never completes (a waiter never woken,
// a lost completion) shows as a round that stops making progress. The
// watchdog counts only seconds the process actually ran, so a host that
// stops the process for a while (SIGSTOP, a loaded machine) is not a hang.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace soak {

class watchdog {
 public:
  /// Calls `on_hang` (from its own thread) once `progress()` has not
  /// changed for `limit` seconds of running time.
  watchdog(std::function<std::uint64_t()> progress, std::chrono::seconds limit, std::function<void()> on_hang);
  ~watchdog();
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace soak
