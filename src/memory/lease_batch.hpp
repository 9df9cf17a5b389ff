// Leases whose release the reactor defers to the end of its pass, so that
// each tracker's lock is taken once per pass instead of once per run
// (docs/DESIGN.md, "Batched lease release").
#pragma once

#include <cstddef>
#include <vector>

#include "xrtio/detail/access_tracker.hpp"

namespace xrtio::detail {

class lease_batch {
 public:
  /// Leases kept at most: a pass that finishes more releases them in
  /// batches of this many (flush() early is always allowed: the runs are
  /// final). Before, the list grew to the most leases one pass ever held
  /// (16,384 at 4096 runs of three buffers, a 256 KiB reallocation the
  /// bench counted as allocations per run); 1024 still takes each shared
  /// tracker's lock once per 1024 leases instead of once per run.
  static constexpr std::size_t capacity = 1024;

  lease_batch() { items_.reserve(capacity); }
  lease_batch(const lease_batch&) = delete;
  lease_batch& operator=(const lease_batch&) = delete;
  // Empty at destruction: the reactor flushes before every post.
  ~lease_batch() = default;

  /// Keeps the lease for flush(), first releasing those kept if the list
  /// is full, so it never grows past its reserve: no allocation once made.
  void add(access_tracker* t, std::uint64_t id) noexcept {
    if (items_.size() == items_.capacity()) flush();
    items_.push_back({t, id});  // within the capacity: cannot throw
  }
  /// Leases kept, not yet released.
  std::size_t size() const noexcept { return items_.size(); }
  /// Releases every lease kept, one lock and one waiter notification per
  /// tracker. Must run before the runs whose leases these are complete to
  /// their handlers (a handler may take the same range at once).
  void flush() noexcept;

 private:
  std::vector<lease_ref> items_;  // reserved at construction, never grown
};

}  // namespace xrtio::detail
