// What one file or buffer remembers of its ring registrations (ring_registrations.hpp).
#include "ring_registrations.hpp"

namespace xrtio::detail {

namespace {
// 0 is "no table" in the cache and "free" in a table's slots: ids start at 1.
std::atomic<std::uint64_t> next_owner_id{1};
}  // namespace

ring_registrations::ring_registrations() noexcept : id_(next_owner_id.fetch_add(1, std::memory_order_relaxed)) {}

ring_registrations::~ring_registrations() { release(); }

void ring_registrations::release() noexcept {
  std::lock_guard lock(mutex_);
  auto drop = [this](entry& e) {
    if (e.slot < 0) return;
    // A dead table's ring has exited (or is exiting) and dropped everything.
    if (auto t = e.table.lock()) t->remove(e.slot, id_);
    e.slot = -1;
  };
  drop(first_);
  for (auto& e : entries_) drop(e);
}

}  // namespace xrtio::detail
