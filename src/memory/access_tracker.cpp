#include "xrtio/detail/access_tracker.hpp"

#include "xrtio/error.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <thread>

namespace xrtio::detail {
namespace {
const char* mode_name(access_mode m) { return m == access_mode::read ? "read" : "write"; }
const char* holder_name(holder_kind h) {
  switch (h) {
    case holder_kind::host: return "a host operation";
    case holder_kind::run: return "an in-flight run";
    case holder_kind::retained: return "a run retained after a refused abort";
  }
  return "?";
}
// `asker` is who asks for [b, e): a host operation (buffer::read, write,
// sync) takes its range exclusively whatever it does (a read syncs from the
// device, writing the host's copy), so it is named as such, not as a write.
std::string describe(holder_kind asker, const void* alloc, std::size_t b, std::size_t e, access_mode m,
                     std::size_t ob, std::size_t oe, access_mode om, const char* who) {
  char text[360];
  std::snprintf(text, sizeof text,
                "range [%zu, %zu) (%s) of allocation %p conflicts with range [%zu, %zu) (%s) held by %s", b, e,
                asker == holder_kind::host ? "host read/write/sync: exclusive" : mode_name(m), alloc, ob, oe,
                mode_name(om), who);
  return text;
}

// The distinct trackers of a request set, in address order (the lock order).
struct tracker_set {
  std::array<access_tracker*, 130> items;
  std::size_t count = 0;
  explicit tracker_set(std::span<access_request> reqs) {
    for (auto& r : reqs) {
      if (std::find(items.begin(), items.begin() + count, r.tracker) == items.begin() + count)
        items[count++] = r.tracker;
    }
    std::sort(items.begin(), items.begin() + count, std::less<access_tracker*>{});
  }
};
std::atomic<std::uint64_t> wait_seq{1};
}  // namespace

access_tracker::access_tracker(std::size_t extent) : extent_(extent) {
  slots_.reserve(8);
  free_.reserve(8);
}

bool access_tracker::shared_eligible(const access_request& r) noexcept {
  auto* t = r.tracker;
  return r.mode == access_mode::read && r.begin == 0 && t->extent_ != 0 && r.end == t->extent_;
}

bool access_tracker::try_shared(std::uint64_t unit) noexcept {
  auto v = shared_.load(std::memory_order_relaxed);
  // A writer closes the gate (fetch_or) and then looks at the count in the
  // value it replaced: this increment either precedes that, and is seen, or
  // fails, and the reader takes the locked path.
  while (!(v & gate_closed))
    if (shared_.compare_exchange_weak(v, v + unit, std::memory_order_acquire, std::memory_order_relaxed)) return true;
  return false;
}

void access_tracker::release_shared(std::uint64_t n) noexcept {
  auto v = shared_.fetch_sub(n, std::memory_order_release);
  if ((v & gate_closed) && (v & held_mask) == n) {
    // The last shared read went while a writer is held or queued: a queued
    // one may now proceed. (No pending take can be under way here: a writer
    // that closed the gate waited them out, and none starts while it is closed.)
    std::lock_guard lock(mutex_);
    notify_waiters();
  }
}

// A lone lease (docs/DESIGN.md, "A lone lease without the lock"): a file
// read into its buffer, a host write, each buffer of a run, with nothing
// else on the allocation. Claimed with one compare-and-swap from a word
// holding at most the gate: no shared read held or pending, no lone lease,
// and the locked path not busy (not used since an acquisition last found it
// empty and cleared busy, under the lock: allowed then). Its range is
// written after the claim and published with its id (solo_id_); a locked
// acquisition that meets a claim not yet published waits until it is, or
// is given back (a run's other buffers refused it), as it waits out a
// pending shared take: nobody sees a conflict with a lease never granted.
bool access_tracker::claim_solo(access_mode mode, std::uint64_t allowed) noexcept {
  auto v = shared_.load(std::memory_order_relaxed);
  if (v & ~allowed) return false;
  // A write closes the gate as it claims (a shared read covers its range,
  // and may not be taken beside it); a read leaves the gate as it is.
  auto want = (v & ~busy) | solo_held | (mode == access_mode::write ? gate_closed : 0);
  return shared_.compare_exchange_strong(v, want, std::memory_order_acquire, std::memory_order_relaxed);
}

void access_tracker::unclaim_solo() noexcept {
  // Never published: nobody took it for a lease (a locked acquisition waits
  // for it, then finds it gone). The gate a write's claim closed stays
  // closed, as after any writer.
  shared_.fetch_and(~solo_held, std::memory_order_release);
}

bool access_tracker::take_solo(std::span<access_request> reqs, holder_kind holder, std::uint64_t allowed) noexcept {
  // All or nothing: every request claimed (an allocation met twice fails
  // its second claim), then all published; else the claims are given back.
  std::size_t claimed = 0;
  while (claimed < reqs.size() && reqs[claimed].tracker->claim_solo(reqs[claimed].mode, allowed)) ++claimed;
  if (claimed < reqs.size()) {
    for (std::size_t i = 0; i < claimed; ++i) reqs[i].tracker->unclaim_solo();
    return false;
  }
  for (auto& r : reqs) r.tracker->publish_solo(r, holder);
  return true;
}

void access_tracker::publish_solo(access_request& r, holder_kind holder) noexcept {
  solo_begin_ = r.begin;
  solo_end_ = r.end;
  solo_mode_ = r.mode;
  solo_holder_ = holder;
  r.id = (std::uint64_t{++solo_seq_} << 32) | solo_slot;
  // Publishes the fields above: an id is never 0, and 0 is "not yet" (or
  // "no longer"), so one store does what a separate ready flag did.
  solo_id_.store(r.id, std::memory_order_release);
}

bool access_tracker::drop_solo(std::uint64_t id) noexcept {
  // The id is the lease: taken back by one read-modify-write, so a stale id
  // (this lease released before) releases nothing, as for an entry, even
  // while the next lone lease is being claimed (its claim stores its own id
  // after this one was cleared), and of two releases of one id one wins.
  auto expected = id;
  return solo_id_.compare_exchange_strong(expected, 0, std::memory_order_acquire, std::memory_order_relaxed);
}

void access_tracker::release_solo(std::uint64_t id) noexcept {
  if (!drop_solo(id)) return;
  auto v = shared_.fetch_and(~solo_held, std::memory_order_release);
  if (v & busy) {
    // A locked acquisition is looking, or requests are queued: one of them
    // may have been held back by this lease.
    std::lock_guard lock(mutex_);
    notify_waiters();
  }
}

bool access_tracker::solo_now() const noexcept {
  for (unsigned spins = 0;; ) {
    if (!(shared_.load(std::memory_order_acquire) & solo_held)) return false;
    if (solo_id_.load(std::memory_order_acquire) != 0) return true;
    // Its claimer was preempted between claim and publication, or its
    // holder between giving back the id and the bit.
    if (++spins % 64 == 0) std::this_thread::yield();
  }
}

void access_tracker::hold_off_solo() noexcept {
  // busy changes only under mutex_, so a load tells whether it is set.
  if (!(shared_.load(std::memory_order_relaxed) & busy)) shared_.fetch_or(busy, std::memory_order_acq_rel);
}

void access_tracker::close_gate() noexcept {
  // The bit changes under mutex_, or by a lone write's claim, which busy
  // rules out where it is set; where it is not (after a conversion to lone
  // leases), writers_ is 0 and nothing waits, so this does nothing. Readers'
  // compare-and-swaps keep it: a plain load tells whether it is set.
  if ((writers_ > 0 || !waiting_.empty()) && !(shared_.load(std::memory_order_relaxed) & gate_closed))
    shared_.fetch_or(gate_closed, std::memory_order_acq_rel);
}

bool access_tracker::take_shared(std::span<access_request> reqs) noexcept {
  if (reqs.size() == 1) {
    if (!reqs[0].tracker->try_shared(1)) return false;
    reqs[0].id = shared_read_id;
    return true;
  }
  // Several: each taken as pending first, then all made held. A writer
  // that meets a pending take waits for it to be made held or given
  // back, so no one ever sees a conflict with reads that were not
  // granted (invariant 6: all or nothing).
  std::size_t taken = 0;
  while (taken < reqs.size() && reqs[taken].tracker->try_shared(pending_unit)) ++taken;
  if (taken == reqs.size()) {
    for (auto& r : reqs) {
      r.tracker->shared_.fetch_add(1 - pending_unit, std::memory_order_release);  // pending -> held
      r.id = shared_read_id;
    }
    return true;
  }
  for (std::size_t i = 0; i < taken; ++i) reqs[i].tracker->shared_.fetch_sub(pending_unit, std::memory_order_release);
  return false;
}

std::uint64_t access_tracker::add(std::size_t begin, std::size_t end, access_mode mode, holder_kind holder) {
  hold_off_solo();  // set already on every path that adds (a load): no lone lease is claimed while an entry exists
  std::uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    index = static_cast<std::uint32_t>(slots_.size());
    slots_.push_back({});
    // release() (noexcept) pushes freed indices: room for all of them now.
    if (free_.capacity() < slots_.capacity()) free_.reserve(slots_.capacity());
  }
  std::uint64_t id = (next_seq_++ << 32) | index;
  slots_[index] = entry{id, begin, end, mode, holder};
  ++live_;
  if (mode == access_mode::write) ++writers_;
  return id;
}

access_tracker::entry* access_tracker::find(std::uint64_t id) noexcept {
  auto index = static_cast<std::size_t>(id & 0xffffffffu);
  if (id == 0 || index >= slots_.size() || slots_[index].id != id) return nullptr;
  return &slots_[index];
}

std::uint64_t access_tracker::next_wait_seq() noexcept { return wait_seq.fetch_add(1, std::memory_order_relaxed); }

acquire_status access_tracker::acquire(std::span<access_request> reqs, holder_kind holder, std::string* why,
                                       const access_waiter* w) {
  // Runs reading whole allocations no one writes (shared inputs, weights):
  // all or nothing, without a lock. A waiter is queued in a tracker it
  // touches, whose gate is closed then: it takes the locked path, which
  // removes it from the queues.
  const bool eligible = holder == holder_kind::run && std::all_of(reqs.begin(), reqs.end(), shared_eligible);
  if (eligible && take_shared(reqs)) return acquire_status::acquired;
  // Every range on an allocation nothing else holds: without the lock either.
  // Looked at first with loads (several requests): a claim that would be
  // given back sends other threads to the locked path meanwhile, and a
  // write's closes a gate for nothing.
  const bool lone = !eligible && holder != holder_kind::retained;
  if (lone &&
      (reqs.size() == 1 || std::all_of(reqs.begin(), reqs.end(), [](const access_request& r) {
         return !(r.tracker->shared_.load(std::memory_order_relaxed) & ~gate_closed);
       })) &&
      take_solo(reqs, holder, gate_closed))
    return acquire_status::acquired;
  tracker_set set(reqs);
  for (std::size_t i = 0; i < set.count; ++i) {
    set.items[i]->mutex_.lock();
    // From here no lone lease is claimed (but in the moment a conversion
    // below gives its claims back: it sets busy again); one held only goes.
    set.items[i]->hold_off_solo();
  }
  // However this ends (allocation failure in a message, a queue or a slot
  // throws), every gate that must be closed is closed and every lock is
  // given back: run_core::acquire turns the exception into a conflict, and
  // a tracker left locked would deadlock its next acquisition.
  struct unlock_all {
    tracker_set& set;
    ~unlock_all() {
      for (std::size_t i = 0; i < set.count; ++i) set.items[i]->close_gate();
      for (std::size_t i = set.count; i-- > 0;) set.items[i]->mutex_.unlock();
    }
  } unlock{set};

  // busy outlives the locked path's leases (see access_tracker.hpp): an
  // acquisition that finds nothing held or queued there on any of its
  // allocations (each met once) takes its lone leases after all, clearing
  // busy in the same compare-and-swaps. Refused (a shared read or a lone
  // lease held, or another lone claim came first), the claims are given
  // back and busy is set again before any held lease is looked at: a lone
  // lease another thread claims in the moment between is met by the checks
  // below like any lease held before the lock (claims and the busy bit are
  // read-modify-writes of one word, so the checks see it).
  if (lone && set.count == reqs.size() &&
      std::all_of(reqs.begin(), reqs.end(), [](const access_request& r) {
        return r.tracker->live_ == 0 && r.tracker->waiting_.empty();
      })) {
    if (take_solo(reqs, holder, gate_closed | busy)) return acquire_status::acquired;
    for (std::size_t i = 0; i < set.count; ++i) set.items[i]->hold_off_solo();
  }

  if (eligible) {
    // Gates are opened here, not when the last writer or waiter goes: a
    // gate found closed with nothing behind it is opened, and if every gate
    // is open now (opened here, or by another reader since this one found
    // it closed) the shared path is tried again.
    bool all_open = true;
    for (std::size_t i = 0; i < set.count; ++i) {
      auto* t = set.items[i];
      if (!(t->shared_.load(std::memory_order_relaxed) & gate_closed)) continue;
      if (t->writers_ == 0 && t->waiting_.empty() && !(t->solo_now() && t->solo_mode_ == access_mode::write))
        t->shared_.fetch_and(~gate_closed, std::memory_order_release);
      else all_open = false;
    }
    if (all_open && take_shared(reqs)) return acquire_status::acquired;
  }

  // Check every request against what is held and what queued before it.
  acquire_status result = acquire_status::acquired;
  for (auto& r : reqs) {
    auto* t = r.tracker;
    // Readers only (the common case of shared inputs): nothing held can
    // conflict, and scanning every reader would cost O(readers) per run.
    if (r.mode == access_mode::write || t->writers_ > 0)
    for (auto& e : t->slots_) {
      if (e.id != 0 && overlaps(r.begin, r.end, e.begin, e.end) && conflicts(r.mode, e.mode)) {
        result = e.holder == holder_kind::retained ? acquire_status::retained : acquire_status::conflict;
        if (why) *why = describe(holder, t, r.begin, r.end, r.mode, e.begin, e.end, e.mode, holder_name(e.holder));
        break;
      }
    }
    // The lone lease, if one is held (it has no slot).
    if (result == acquire_status::acquired && t->solo_now() &&
        overlaps(r.begin, r.end, t->solo_begin_, t->solo_end_) && conflicts(r.mode, t->solo_mode_)) {
      result = acquire_status::conflict;
      if (why)
        *why = describe(holder, t, r.begin, r.end, r.mode, t->solo_begin_, t->solo_end_, t->solo_mode_,
                        holder_name(t->solo_holder_));
    }
    if (result != acquire_status::acquired) break;
    // Shared reads cover the whole extent: any write overlaps them. The gate
    // is closed first, so that none is taken after the count is read; it
    // stays closed after this acquisition, even if it ends with no writer
    // held or queued, until a shared read finds it so (above).
    if (r.mode == access_mode::write && r.begin < r.end) {
      // Left closed by an earlier writer, it needs no atomic operation
      // here: no shared read has been taken since it closed.
      auto v = t->shared_.load(std::memory_order_acquire);
      if (!(v & gate_closed)) v = t->shared_.fetch_or(gate_closed, std::memory_order_acq_rel);
      // Takes under way (pending) end in a few instructions, made held or
      // given back; the closed gate lets no new one start.
      for (unsigned spins = 0; v & pending_mask; v = t->shared_.load(std::memory_order_acquire))
        if (++spins % 64 == 0) std::this_thread::yield();  // its thread was preempted
      if (v & held_mask) {
        result = acquire_status::conflict;
        if (why) *why = describe(holder, t, r.begin, r.end, r.mode, 0, t->extent_, access_mode::read, holder_name(holder_kind::run));
        break;
      }
    }
    // FIFO: yield to overlapping requests queued earlier (all of them for a
    // newcomer), so a writer is not starved by a stream of readers.
    for (auto& q : t->waiting_) {
      if (w && (q.owner == w->owner || q.seq >= w->seq)) continue;
      if (overlaps(r.begin, r.end, q.begin, q.end) && conflicts(r.mode, q.mode)) {
        result = acquire_status::conflict;
        if (why) *why = describe(holder, t, r.begin, r.end, r.mode, q.begin, q.end, q.mode, "a run queued before it");
        break;
      }
    }
    if (result != acquire_status::acquired) break;
  }

  if (result == acquire_status::acquired) {
    std::size_t added = 0;
    try {
      for (; added < reqs.size(); ++added) reqs[added].id = reqs[added].tracker->add(reqs[added].begin, reqs[added].end, reqs[added].mode, holder);
    } catch (...) {
      for (std::size_t i = 0; i < added; ++i) reqs[i].tracker->drop(reqs[i].id);  // all or nothing
      throw;
    }
    if (w) {
      for (std::size_t i = 0; i < set.count; ++i) {
        auto& q = set.items[i]->waiting_;
        q.erase(std::remove_if(q.begin(), q.end(), [&](const waiter& x) { return x.owner == w->owner; }), q.end());
      }
    }
  } else if (w && result == acquire_status::conflict) {
    // Queue (once) in every tracker touched, keeping ascending seq order.
    // All or nothing: room in every queue first (the only step that can
    // throw), then the inserts, which cannot. A waiter left in one queue by
    // an insert that failed in another outlived its run, whose rejection
    // freed it, and held its ranges for good (found by a helper's probe).
    for (std::size_t i = 0; i < set.count; ++i) {
      auto& q = set.items[i]->waiting_;
      // Geometric, as insert's own growth: reserve() alone grows to the
      // size asked, which would copy a growing queue at every new waiter.
      std::size_t need = q.size() + reqs.size();
      if (q.capacity() < need) q.reserve(std::max(need, 2 * q.capacity()));
    }
    for (auto& r : reqs) {
      auto& q = r.tracker->waiting_;
      bool present = std::any_of(q.begin(), q.end(), [&](const waiter& x) {
        return x.owner == w->owner && x.begin == r.begin && x.end == r.end && x.mode == r.mode;
      });
      if (present) continue;
      waiter nw{w->seq, w->owner, w->listener, r.begin, r.end, r.mode};
      q.insert(std::upper_bound(q.begin(), q.end(), nw.seq, [](std::uint64_t s, const waiter& x) { return s < x.seq; }),
               nw);
    }
    result = acquire_status::queued;
  }
  return result;
}

void access_tracker::withdraw(std::span<access_request> reqs, const void* owner) noexcept {
  tracker_set set(reqs);
  for (std::size_t i = 0; i < set.count; ++i) {
    auto* t = set.items[i];
    std::lock_guard lock(t->mutex_);
    auto& q = t->waiting_;
    q.erase(std::remove_if(q.begin(), q.end(), [&](const waiter& x) { return x.owner == owner; }), q.end());
    t->notify_waiters();  // a withdrawn waiter may have been holding back those behind it
  }
}

void access_tracker::drop(std::uint64_t id) noexcept {
  if (auto* e = find(id)) {
    if (e->mode == access_mode::write) --writers_;
    e->id = 0;
    if (--live_ == 0) {  // all free: start over, so write checks scan nothing stale
      slots_.clear();
      free_.clear();
    } else {
      free_.push_back(static_cast<std::uint32_t>(e - slots_.data()));  // capacity: at most the slots
    }
  }
}

void access_tracker::release(std::uint64_t id) noexcept {
  if (id == shared_read_id) return release_shared(1);
  if (is_solo_id(id)) return release_solo(id);
  std::lock_guard lock(mutex_);
  drop(id);
  notify_waiters();
}

void access_tracker::release(std::span<const lease_ref> leases) noexcept {
  std::uint64_t shared = 0;
  std::uint64_t solo = 0;  // at most one lone lease per tracker
  bool entries = false;
  for (auto& l : leases) {
    if (l.id == shared_read_id) ++shared;
    else if (is_solo_id(l.id)) solo = l.id;
    else entries = true;
  }
  if (!entries) {
    if (solo) release_solo(solo);        // takes the lock itself, if it must
    if (shared) release_shared(shared);  // no lock: the batch of runs sharing inputs
    return;
  }
  std::lock_guard lock(mutex_);
  for (auto& l : leases)
    if (l.id != shared_read_id && !is_solo_id(l.id)) drop(l.id);
  // Under the lock, so the waiters are told once, after every kind went.
  if (solo && drop_solo(solo)) shared_.fetch_and(~solo_held, std::memory_order_release);
  if (shared) shared_.fetch_sub(shared, std::memory_order_release);
  notify_waiters();
}

std::uint64_t access_tracker::mark_retained(std::uint64_t id) noexcept {
  std::lock_guard lock(mutex_);
  if (is_solo_id(id)) {
    // Kept for good: it becomes an entry, as a shared read does, busy set
    // first so that no lone lease is claimed in the moment between.
    hold_off_solo();
    if (!solo_now() || solo_id_.load(std::memory_order_acquire) != id) return id;  // stale
    std::uint64_t entry;
    try {
      entry = add(solo_begin_, solo_end_, solo_mode_, holder_kind::retained);
    } catch (...) {
      // Out of memory: the lone lease is kept instead, never released (its
      // bit keeps any other from being claimed), and reported as
      // range_in_use.
      return id;
    }
    if (drop_solo(id)) shared_.fetch_and(~solo_held, std::memory_order_release);
    close_gate();
    notify_waiters();
    return entry;
  }
  if (id == shared_read_id) {
    // Kept for good, so it becomes an entry that conflicts report as
    // retained. If the entry cannot be made (out of memory), the count is
    // kept instead: still never released, only reported as range_in_use.
    hold_off_solo();  // an entry from now on: no lone lease beside it without the locked path's check
    try {
      id = add(0, extent_, access_mode::read, holder_kind::retained);
    } catch (...) {
      return shared_read_id;
    }
    shared_.fetch_sub(1, std::memory_order_release);
    notify_waiters();
    return id;
  }
  auto* e = find(id);
  if (!e) return id;
  e->holder = holder_kind::retained;
  // A run queued on this range must retry now: its answer changed from
  // "wait" to range_retained, and no release will ever come to tell it.
  notify_waiters();
  return id;
}

void access_tracker::notify_waiters() noexcept {
  // Under the lock: a listener withdraws its waiters (taking this lock)
  // before it goes away, so it is alive here.
  access_listener* last = nullptr;
  for (auto& x : waiting_)
    if (x.listener != last) (last = x.listener)->access_released();
}

std::size_t access_tracker::active_count() const {
  std::lock_guard lock(mutex_);
  return live_ + shared_count() + ((shared_.load(std::memory_order_acquire) & solo_held) ? 1 : 0);
}
std::size_t access_tracker::waiting_count() const {
  std::lock_guard lock(mutex_);
  return waiting_.size();
}

std::error_code acquire_error(acquire_status st) noexcept {
  switch (st) {
    case acquire_status::acquired:
      return {};
    case acquire_status::retained:
      return errc::range_retained;
    case acquire_status::conflict:
    case acquire_status::queued:
      break;
  }
  return errc::range_in_use;
}

}  // namespace xrtio::detail
