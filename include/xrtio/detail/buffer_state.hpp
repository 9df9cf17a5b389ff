// What every handle of one buffer shares: its context, budget charge, view
// parent, the root allocation's access tracker and the native buffer.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "xrtio/backend/backend.hpp"
#include "xrtio/detail/access_tracker.hpp"
#include "xrtio/memory_budget.hpp"

namespace xrtio::detail {

struct context_state;
class ring_registrations;

/// Everything a buffer handle shares. Member order is destruction order,
/// reversed: the native buffer goes first, then the view's parent, then the
/// budget charge (invariant 7: released only after native destruction), and
/// the context (device) last.
struct buffer_state {
  std::shared_ptr<context_state> context;
  memory_reservation charge;  // roots of owned allocations only
  std::shared_ptr<buffer_state> parent;  // views only
  std::shared_ptr<access_tracker> tracker;  // the root allocation's
  std::unique_ptr<backend::native_buffer> native;
  std::size_t offset = 0;  // absolute, within the root allocation
  std::size_t size = 0;
  bool imported = false;
  // Roots whose memory a ring may pin: the memory's fixed-buffer slots in
  // io_uring rings (file transfers), made with the buffer so that its first
  // transfer through a ring allocates nothing; null otherwise. ~buffer_state
  // empties them before the native buffer, and so the memory, goes.
  std::atomic<ring_registrations*> rings{nullptr};

  ~buffer_state();
};
}  // namespace xrtio::detail
