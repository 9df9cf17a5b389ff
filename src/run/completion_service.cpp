// The completion registry and service (see detail/completion_service.hpp).
#include "xrtio/detail/completion_service.hpp"

#include "xrtio/detail/run_op.hpp"

namespace xrtio::detail {

namespace {
// Under the registry's lock.
void count_in(completion_registry& r, run_op_base* op) noexcept {
  if (!op->inline_candidate) return;
  op->reg_counted = true;
  r.inline_candidates.store(r.inline_candidates.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
}  // namespace

void completion_registry::add(run_op_base* op) noexcept {
  std::lock_guard lock(mutex);
  count_in(*this, op);
  op->reg_prev = nullptr;
  op->reg_next = head;
  if (head) head->reg_prev = op;
  head = op;
}

bool completion_registry::try_add(run_op_base* op) noexcept {
  std::lock_guard lock(mutex);
  if (shut_down.load(std::memory_order_relaxed)) return false;  // set under this lock
  count_in(*this, op);
  op->reg_prev = nullptr;
  op->reg_next = head;
  if (head) head->reg_prev = op;
  head = op;
  return true;
}

void register_completion(asio::execution_context& ctx, run_op_base* op) {
  // A context destroyed and another made at the same address: the cached
  // registry is the old one, marked shut_down by the old context's
  // service before it went, so try_add refuses it and the cache is renewed.
  thread_local struct {
    asio::execution_context* ctx = nullptr;
    std::shared_ptr<completion_registry> registry;
  } last;
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
  if (op->reg_prev) op->reg_prev->reg_next = op->reg_next;
  else if (head == op) head = op->reg_next;
  if (op->reg_next) op->reg_next->reg_prev = op->reg_prev;
  op->reg_prev = op->reg_next = nullptr;
}

void completion_service::shutdown() {
  run_op_base* orphans = nullptr;
  {
    std::unique_lock lock(registry_->mutex);
    registry_->shut_down.store(true, std::memory_order_seq_cst);
    // Before posting is read below, even with no op to mark in between
    // (qemu-user 7.2 reorders a seq_cst store and load: reactor::announce_sleep).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (auto* op = registry_->head; op;) {
      auto* n = op->reg_next;
      int expected = run_op_base::pending;
      op->reg_prev = op->reg_next = nullptr;
      op->reg_counted = false;
      if (op->life.compare_exchange_strong(expected, run_op_base::orphaned)) {
        // Linked through reg_next, not batch_next: the reactor may be
        // grouping this op into a batch right now.
        op->reg_next = orphans;
        orphans = op;
      }
      op = n;
    }
    registry_->head = nullptr;
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
