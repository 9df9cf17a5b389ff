// The completion registry and service (see detail/completion_service.hpp).
#include "xrtio/detail/completion_service.hpp"

#include "xrtio/detail/run_op.hpp"

#include <algorithm>

namespace xrtio::detail {

namespace {
// Under the registry's lock.
void count_in(completion_registry& r, run_op_base* op) noexcept {
  if (!op->inline_candidate) return;
  op->reg_counted = true;
  r.inline_candidates.store(r.inline_candidates.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Under the registry's lock. Grows the table first (may throw), so that a
// failure leaves neither the op nor the count changed.
void link(completion_registry& r, run_op_base* op) {
  if (r.free_slots.empty()) {
    if (r.table.size() == r.table.capacity()) r.table.reserve(std::max<std::size_t>(64, 2 * r.table.capacity()));
    r.free_slots.reserve(r.table.capacity());
    r.free_slots.push_back(std::uint32_t(r.table.size()));
    r.table.push_back(nullptr);
  }
  auto i = r.free_slots.back();
  r.free_slots.pop_back();
  r.table[i] = op;
  op->reg_slot = i;
  count_in(r, op);
}
}  // namespace

void completion_registry::add(run_op_base* op) {
  std::lock_guard lock(mutex);
  link(*this, op);
}

bool completion_registry::try_add(run_op_base* op) {
  std::lock_guard lock(mutex);
  if (shut_down.load(std::memory_order_relaxed)) return false;  // set under this lock
  link(*this, op);
  return true;
}

namespace {
// The context the calling thread last registered with, and its registry.
// A context destroyed and another made at the same address: the cached
// registry is the old one, marked shut_down by the old context's service
// before it went, so try_add refuses it and the cache is renewed.
thread_local struct {
  asio::execution_context* ctx = nullptr;
  std::shared_ptr<completion_registry> registry;
} last;
}  // namespace

completion_registry* registry_known_here(asio::execution_context& ctx) noexcept {
  if (last.ctx != &ctx || last.registry->shut_down.load(std::memory_order_relaxed)) return nullptr;
  return last.registry.get();
}

void register_completion(asio::execution_context& ctx, run_op_base* op) {
  if (last.ctx == &ctx && last.registry->try_add(op)) {
    op->registry = last.registry;
    return;
  }
  // May throw (allocating the service), as asio::use_service did here before.
  const auto& registry = asio::use_service<completion_service>(ctx).registry();
  last.ctx = &ctx;
  last.registry = registry;
  op->registry = registry;
  registry->add(op);  // even if shut down: as before the cache (the context is being destroyed)
}

void completion_registry::remove(run_op_base* op) noexcept {
  std::lock_guard lock(mutex);
  if (op->reg_counted) {
    op->reg_counted = false;
    inline_candidates.store(inline_candidates.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  // Not in the table any more once the context shut down (the shutdown
  // emptied it), or if its slot holds another op since.
  auto i = op->reg_slot;
  if (i < table.size() && table[i] == op) {
    table[i] = nullptr;
    free_slots.push_back(i);  // within the capacity reserved when the slot was made
  }
}

void completion_service::shutdown() {
  run_op_base* orphans = nullptr;
  {
    std::unique_lock lock(registry_->mutex);
    registry_->shut_down.store(true, std::memory_order_seq_cst);
    // Before posting is read below, even with no op to mark in between
    // (qemu-user 7.2 reorders a seq_cst store and load: reactor::announce_sleep).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (auto*& op : registry_->table) {
      if (!op) continue;
      int expected = run_op_base::pending;
      op->reg_counted = false;
      if (op->life.compare_exchange_strong(expected, run_op_base::orphaned)) {
        // Linked through reg_next, not batch_next: the reactor may be
        // grouping this op into a batch right now.
        op->reg_next = orphans;
        orphans = op;
      }
      op = nullptr;
    }
    registry_->table.clear();
    registry_->free_slots.clear();
    registry_->inline_candidates.store(0, std::memory_order_relaxed);
    // A post to this context that is under way must land before it goes.
    registry_->idle.wait(lock, [&] { return registry_->posting.load(std::memory_order_seq_cst) == 0; });
  }
  // Outside the lock: destroying a handler may destroy a coroutine frame.
  while (orphans) {
    auto* op = orphans;
    orphans = op->reg_next;
    op->reg_next = nullptr;
    op->vt().destroy_handler(op);
    if (op->life.exchange(run_op_base::handler_gone) == run_op_base::reactor_done) op->vt().free(op);
  }
}

}  // namespace xrtio::detail
