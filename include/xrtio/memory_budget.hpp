// A ceiling on the bytes a context may allocate (docs/DESIGN.md, invariant 7).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace xrtio {

class memory_reservation;

/// A shared ceiling. Copies refer to the same budget, and so does a budget
/// moved from: a move is a copy (it has no empty state, which its noexcept
/// readers used to dereference after a move). Reservations are taken with a
/// compare-and-swap loop, so concurrent reservations never together exceed
/// the ceiling.
class memory_budget {
 public:
  explicit memory_budget(std::size_t ceiling_bytes);
  memory_budget(const memory_budget&) noexcept = default;
  memory_budget& operator=(const memory_budget&) noexcept = default;
  memory_budget(memory_budget&& o) noexcept : state_(o.state_) {}
  memory_budget& operator=(memory_budget&& o) noexcept {
    state_ = o.state_;
    return *this;
  }

  /// Reserves `bytes` (0 is allowed and always succeeds).
  /// Throws xrtio::error(errc::budget_exceeded) naming the request, the bytes
  /// in use and the ceiling.
  memory_reservation reserve(std::size_t bytes);

  std::size_t ceiling() const noexcept;
  std::size_t used() const noexcept;

  friend bool operator==(const memory_budget& a, const memory_budget& b) noexcept { return a.state_ == b.state_; }

 private:
  friend class memory_reservation;
  struct state {
    std::size_t ceiling;
    std::atomic<std::size_t> used{0};
  };
  std::shared_ptr<state> state_;
};

/// Bytes charged to a budget; released when destroyed (after the native
/// allocation it pays for: see buffer's member order).
class memory_reservation {
 public:
  memory_reservation() noexcept = default;
  memory_reservation(memory_reservation&& o) noexcept : state_(std::move(o.state_)), bytes_(o.bytes_) { o.bytes_ = 0; }
  memory_reservation& operator=(memory_reservation&& o) noexcept;
  memory_reservation(const memory_reservation&) = delete;
  memory_reservation& operator=(const memory_reservation&) = delete;
  ~memory_reservation() { release(); }

  std::size_t size() const noexcept { return bytes_; }
  void release() noexcept;

 private:
  friend class memory_budget;
  memory_reservation(std::shared_ptr<memory_budget::state> s, std::size_t bytes) noexcept
      : state_(std::move(s)), bytes_(bytes) {}
  std::shared_ptr<memory_budget::state> state_;
  std::size_t bytes_ = 0;
};

}  // namespace xrtio
