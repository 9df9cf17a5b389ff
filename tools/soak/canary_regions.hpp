// The lease canary's memory (docs/RELIABILITY.md, "Soak"): small disjoint
// views of one allocation, each used by one late_marker run at a time, each
// holding a pattern the host wrote last. A device write that lands after its
// run's final state (a lease ended early) shows as a region that no longer
// holds the host's pattern, or as a late_marker run that finds foreign data.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "xrtio/context.hpp"

namespace soak {

struct tally;

class canary_regions {
 public:
  static constexpr unsigned count = 32;
  static constexpr std::size_t bytes = 64;

  /// Allocates the regions on `ctx` and writes each one's first pattern.
  canary_regions(xrtio::context& ctx, std::uint64_t salt);

  /// A free region (its index), taken for one run; -1 when all are in use.
  int take(std::uint64_t hint) noexcept;
  xrtio::buffer view(int i) const { return views_[i]; }
  std::uint64_t expected(int i) const noexcept { return slots_[i].pattern; }

  /// Before a run: the region still holds what the host wrote last.
  bool check(tally& t, int i);
  enum class retention { no, yes, unknown };
  /// After its run's final state was reported (retention::yes: with
  /// abort_failed; unknown: a dropped synchronous handle): writes a new
  /// pattern, which must succeed (or fail with range_retained exactly when
  /// retained), and frees the region.
  void settle(tally& t, int i, retention r, std::uint64_t salt);
  /// Its run's handler was destroyed uncalled: settled at the round's end.
  void orphan(int i) noexcept;
  /// At the round's end, every device run final: settles the orphans and
  /// checks every live region. Returns how many regions were checked.
  unsigned final_check(tally& t, std::uint64_t salt);

 private:
  enum state : int { free_, busy, orphaned, dead };
  struct slot {
    std::atomic<int> st{free_};
    std::uint64_t pattern = 0;  // written by the one thread that holds the slot
  };
  bool write_pattern(tally& t, int i, std::uint64_t pattern, retention r);
  xrtio::buffer root_;
  std::vector<xrtio::buffer> views_;
  std::unique_ptr<slot[]> slots_;
};

}  // namespace soak
