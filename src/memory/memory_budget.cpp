#include "xrtio/memory_budget.hpp"

#include <string>

#include "xrtio/error.hpp"

namespace xrtio {

memory_budget::memory_budget(std::size_t ceiling_bytes) : state_(std::make_shared<state>()) {
  state_->ceiling = ceiling_bytes;
}

memory_reservation memory_budget::reserve(std::size_t bytes) {
  // CAS loop: the check and the charge are one atomic step, so concurrent
  // reservations never oversubscribe (invariant 7).
  std::size_t used = state_->used.load(std::memory_order_relaxed);
  for (;;) {
    if (bytes > state_->ceiling || used > state_->ceiling - bytes) {
      throw error(errc::budget_exceeded, "memory budget: reserving " + std::to_string(bytes) + " bytes with " +
                                             std::to_string(used) + " of " + std::to_string(state_->ceiling) +
                                             " bytes in use exceeds the ceiling");
    }
    if (state_->used.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel,
                                           std::memory_order_relaxed))
      return memory_reservation(state_, bytes);
  }
}

std::size_t memory_budget::ceiling() const noexcept { return state_->ceiling; }
std::size_t memory_budget::used() const noexcept { return state_->used.load(std::memory_order_acquire); }

memory_reservation& memory_reservation::operator=(memory_reservation&& o) noexcept {
  if (this != &o) {
    release();
    state_ = std::move(o.state_);
    bytes_ = o.bytes_;
    o.bytes_ = 0;
  }
  return *this;
}

void memory_reservation::release() noexcept {
  if (state_) state_->used.fetch_sub(bytes_, std::memory_order_acq_rel);
  state_.reset();
  bytes_ = 0;
}

}  // namespace xrtio
