// How long the reactor spins after activity before it sleeps, adapted to
// whether spinning has been finding anything (docs/DESIGN.md, "Adaptive
// spinning"). A spin only pays when the next event comes before the spin
// ends: then it saves a sleep and a wake-up. When runs take longer than the
// spin window (a 50 us kernel at one run in flight), every spin is CPU spent
// for nothing, on a 2-core host taken from the device and the io thread.
#pragma once

#include <chrono>

namespace xrtio::detail {

class spin_policy {
 public:
  explicit spin_policy(std::chrono::nanoseconds window) noexcept : window_(window), budget_(window) {}

  /// How long to spin after the last activity while runs are in flight.
  std::chrono::nanoseconds budget() const noexcept { return budget_; }

  /// A spin of budget() found nothing and the reactor goes to sleep: halve
  /// the next spin (down to none).
  void missed() noexcept {
    budget_ /= 2;
    if (budget_ < min_budget) budget_ = std::chrono::nanoseconds(0);
  }

  /// Activity came `idle` after the previous activity, while runs were in
  /// flight. Had a full-window spin been waiting, it would have caught this
  /// one: spin the full window again. A longer gap leaves the budget as it is.
  void activity_after(std::chrono::nanoseconds idle) noexcept {
    if (idle < window_) budget_ = window_;
  }

 private:
  // Below this a spin is not worth starting: one pass takes about as long.
  static constexpr std::chrono::nanoseconds min_budget = std::chrono::microseconds(1);
  std::chrono::nanoseconds window_;
  std::chrono::nanoseconds budget_;
};

}  // namespace xrtio::detail
