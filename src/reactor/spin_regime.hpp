// Whether the reactor-thread mode's waits spin at all, decided by trying
// both on the host as it is now (docs/DESIGN.md, "Spin or sleep: a trial
// now and then"). spin_policy adapts how long a spin lasts to whether it
// catches the next event; it cannot see what the spin costs the threads it
// keeps off a core. Which way is faster depends on the host, not on the
// runs: on this project's 2-core VM, idle, two sleeping hops cost 32-37 us
// (the bench's relay) and spinning triples one-at-a-time throughput;
// during a parallel compile, not spinning was 1.1-5.4x faster, beside two
// busy loops mostly slower, 0.13-0.65x (docs/PERFORMANCE.md, "Spin or
// sleep, tried in place"). So now and then the reactor runs one epoch the
// other way and keeps whichever finished more runs per second. While the
// loop does not spin, the device's threads may fall asleep between runs:
// device times seen then are not learned (reactor_scan.cpp), or the loop
// would go on not spinning after a trial without spins, and a trial with
// them would start without the spin for the next submission or the io
// thread's linger.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace xrtio::detail {

class spin_regime {
 public:
  using clock = std::chrono::steady_clock;

  /// Runs per second are compared over epochs of this length.
  static constexpr std::chrono::nanoseconds epoch = std::chrono::milliseconds(20);
  /// An epoch with fewer runs finished, or longer than 4 epochs (the loop
  /// slept through it), says nothing about spinning: it is not judged.
  static constexpr std::uint64_t min_runs = 32;
  /// Judged epochs the usual way between two trials: from first_gap,
  /// doubled by each trial that loses, up to max_gap (then one epoch in 66
  /// runs the other way: about 1.5 % of the time).
  static constexpr unsigned first_gap = 4, max_gap = 64;
  /// A trial wins when its rate beats both epochs around it by this much,
  /// so a phase change of the load during the trial is not taken for it.
  static constexpr double margin = 1.15;

  /// `enabled` false: always spin (spin_policy alone decides how long).
  explicit spin_regime(bool enabled) noexcept : enabled_(enabled) {}

  /// Whether the loop may spin now.
  bool spinning() const noexcept { return spin_ != (phase_ == phase::trial); }
  /// The usual way (what a trial is measured against).
  bool usual_spins() const noexcept { return spin_; }
  bool in_trial() const noexcept { return phase_ == phase::trial; }
  unsigned gap() const noexcept { return gap_; }
  std::uint64_t trials() const noexcept { return trials_; }
  std::uint64_t switches() const noexcept { return switches_; }

  /// Once per pass: `finished` counts the runs finished so far. Returns
  /// true when spinning() changed.
  bool tick(clock::time_point now, std::uint64_t finished) noexcept {
    if (!enabled_) return false;
    if (start_ == clock::time_point{}) {
      start_ = now;
      base_ = finished;
      return false;
    }
    if (now - start_ < epoch) return false;
    bool before = spinning();
    end_epoch(now, finished);
    return spinning() != before;
  }

 private:
  enum class phase : std::uint8_t { usual, trial, after };

  void end_epoch(clock::time_point now, std::uint64_t finished) noexcept {
    auto length = now - start_;
    // A regime copied into another loop (a test's seam) may count from
    // further than this loop has got: no runs, not a wrapped count.
    auto runs = finished >= base_ ? finished - base_ : 0;
    start_ = now;
    base_ = finished;
    bool judged = runs >= min_runs && length < 4 * epoch;
    double rate = judged ? double(runs) / std::chrono::duration<double>(length).count() : 0.0;
    switch (phase_) {
      case phase::usual:
        if (!judged || ++counted_ < gap_) return;
        before_ = rate;
        phase_ = phase::trial;
        ++trials_;
        return;
      case phase::trial:
        if (!judged) return give_up();
        trial_ = rate;
        phase_ = phase::after;
        return;
      case phase::after:
        if (!judged) return give_up();
        if (trial_ > margin * std::max(before_, rate)) {
          spin_ = !spin_;
          ++switches_;
          gap_ = first_gap;
        } else {
          gap_ = std::min(gap_ * 2, max_gap);
        }
        phase_ = phase::usual;
        counted_ = 0;
        return;
    }
  }

  // A trial or the epoch after it was not judged (the load stopped or
  // paused): no verdict; the next judged epoch the usual way is the
  // "before" of a new trial.
  void give_up() noexcept {
    phase_ = phase::usual;
    counted_ = gap_ - 1;
  }

  bool enabled_;
  bool spin_ = true;
  phase phase_ = phase::usual;
  unsigned gap_ = first_gap;
  unsigned counted_ = 0;  // judged usual epochs since the last trial
  clock::time_point start_{};
  std::uint64_t base_ = 0;
  double before_ = 0, trial_ = 0;
  std::uint64_t trials_ = 0, switches_ = 0;
};

}  // namespace xrtio::detail
