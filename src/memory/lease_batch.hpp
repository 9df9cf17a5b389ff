// Leases whose release the reactor defers to the end of its pass, so that
// each tracker's lock is taken once per pass instead of once per run
// (docs/DESIGN.md, "Batched lease release").
#pragma once

#include <vector>

#include "xrtio/detail/access_tracker.hpp"

namespace xrtio::detail {

class lease_batch {
 public:
  lease_batch() { items_.reserve(256); }
  lease_batch(const lease_batch&) = delete;
  lease_batch& operator=(const lease_batch&) = delete;
  // Empty at destruction: the reactor flushes before every post.
  ~lease_batch() = default;

  /// Keeps the lease for flush(). Where the list cannot grow, releases it
  /// now instead (never lost, only not batched).
  void add(access_tracker* t, std::uint64_t id) noexcept {
    try {
      items_.push_back({t, id});
    } catch (...) {
      t->release(id);
    }
  }
  /// Releases every lease kept, one lock and one waiter notification per
  /// tracker. Must run before the runs whose leases these are complete to
  /// their handlers (a handler may take the same range at once).
  void flush() noexcept;

 private:
  std::vector<lease_ref> items_;  // keeps its capacity: no allocation once warm
};

}  // namespace xrtio::detail
