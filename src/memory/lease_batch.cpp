#include "memory/lease_batch.hpp"

#include <algorithm>
#include <span>

namespace xrtio::detail {

void lease_batch::flush() noexcept {
  if (items_.empty()) return;
  // Group by tracker. Runs sharing buffers interleave them (a, b, c, a, b,
  // c, ...), so sort; a pass's batch is at most the runs it finished.
  std::sort(items_.begin(), items_.end(),
            [](const lease_ref& x, const lease_ref& y) { return std::less<access_tracker*>{}(x.tracker, y.tracker); });
  auto first = items_.begin();
  while (first != items_.end()) {
    auto last = std::find_if(first, items_.end(), [t = first->tracker](const lease_ref& l) { return l.tracker != t; });
    first->tracker->release(std::span<const lease_ref>(&*first, static_cast<std::size_t>(last - first)));
    first = last;
  }
  items_.clear();
}

}  // namespace xrtio::detail
