// What one open file, or one buffer's backing memory, remembers of its
// registrations with io_uring rings (docs/DESIGN.md, "File I/O", "Registered
// files and fixed buffers"): per ring, the slot it got (or that it got none).
// Its id is never reused, so a descriptor number or address that comes back
// for another file or other memory never finds these slots. The owner calls
// release() from its destructor, before the descriptor is closed or the
// memory freed, so no slot outlives what it names.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ring_table.hpp"

namespace xrtio::detail {

class ring_registrations {
 public:
  /// What slot_in did besides answering.
  enum class event : std::uint8_t { none, registered, refused };

  ring_registrations() noexcept;
  ~ring_registrations();
  ring_registrations(const ring_registrations&) = delete;
  ring_registrations& operator=(const ring_registrations&) = delete;

  std::uint64_t id() const noexcept { return id_; }

  /// The ring's loop, with the owner alive: the owner's slot in `t`, or -1.
  /// The first call for a table registers (`add(id())`: the table's lock and
  /// one system call) and remembers the outcome, refusal included. The first
  /// table an owner meets is cached: later calls for it compare one id, no
  /// lock (the usual case: one runtime).
  template <class Add>
  int slot_in(const std::shared_ptr<ring_table>& t, Add&& add, event& ev) {
    ev = event::none;
    if (cached_table_.load(std::memory_order_acquire) == t->id()) return cached_slot_;
    return slot_slow(t, [&] { return add(id_); }, ev);
  }

  /// Empties every slot this owner holds, in every live ring. The owner's
  /// destructor, any thread, once nothing can use the slots any more.
  void release() noexcept;

 private:
  template <class F>
  int slot_slow(const std::shared_ptr<ring_table>& t, F&& add, event& ev) {
    std::lock_guard lock(mutex_);
    if (first_.table_id == t->id()) return first_.slot;
    for (const auto& e : entries_)
      if (e.table_id == t->id()) return e.slot;
    int slot = add();
    ev = slot >= 0 ? event::registered : event::refused;
    if (first_.table_id == 0) {
      // The first table met (one runtime: the only one) is remembered in
      // place: a file's or a buffer's first transfer through the ring
      // allocates nothing here.
      first_ = entry{t, t->id(), slot};
      cached_slot_ = slot;
      cached_table_.store(t->id(), std::memory_order_release);
      return slot;
    }
    try {
      entries_.push_back(entry{t, t->id(), slot});
    } catch (...) {
      if (slot >= 0) t->remove(slot, id_);
      return -1;  // not remembered: asked again next time
    }
    return slot;
  }
  struct entry {
    std::weak_ptr<ring_table> table;
    std::uint64_t table_id = 0;  // 0: no table (first_ unused)
    int slot = -1;               // -1: refused there
  };

  const std::uint64_t id_;
  // The first table's outcome, written once (under mutex_) before
  // cached_table_ publishes it.
  std::atomic<std::uint64_t> cached_table_{0};
  int cached_slot_ = -1;
  std::mutex mutex_;
  entry first_;                 // the first table met, in place
  std::vector<entry> entries_;  // the others (several runtimes)
};

}  // namespace xrtio::detail
