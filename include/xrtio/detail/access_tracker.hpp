// Per-allocation access tracking (docs/DESIGN.md, invariant 6): any number of
// readers or one writer per overlapping byte range, with an optional FIFO
// wait queue so a writer is not starved by a stream of readers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace xrtio::detail {

enum class access_mode : std::uint8_t { read, write };
enum class holder_kind : std::uint8_t { host, run, retained };

class access_tracker;

/// Told (under the tracker's lock, so it must only flag and wake) that a
/// range it waits for may have become free.
struct access_listener {
  virtual void access_released() noexcept = 0;

 protected:
  ~access_listener() = default;
};

/// One range of one allocation that a host operation or run needs.
struct access_request {
  access_tracker* tracker = nullptr;
  std::size_t begin = 0, end = 0;  // absolute, within the root allocation
  access_mode mode = access_mode::write;
  std::uint64_t id = 0;  // set on success: the lease to release
};

/// What a queued request waits with: its place in line and who to tell.
struct access_waiter {
  const void* owner = nullptr;
  std::uint64_t seq = 0;  // global FIFO order, from next_wait_seq()
  access_listener* listener = nullptr;
};

enum class acquire_status { acquired, conflict, retained, queued };

/// A held lease, named for a deferred release (lease_batch).
struct lease_ref {
  access_tracker* tracker = nullptr;
  std::uint64_t id = 0;
};

/// The error code of an acquire that did not succeed: errc::range_retained
/// when the blocking range belongs to a retained run, else range_in_use
/// (empty for acquired).
std::error_code acquire_error(acquire_status st) noexcept;

class access_tracker {
 public:
  /// `extent`: the root allocation's size. Runs reading all of it while no
  /// write is held or queued take their lease without the lock (0: never).
  explicit access_tracker(std::size_t extent = 0);
  access_tracker(const access_tracker&) = delete;
  access_tracker& operator=(const access_tracker&) = delete;

  /// All-or-nothing acquisition of `reqs` (any trackers, any order; trackers
  /// are locked in address order). On success every request's id is set.
  /// Without a waiter a conflict returns `conflict` (or `retained` when the
  /// blocking range belongs to a retained run) and describes both ranges in
  /// *why. With a waiter the request is queued in every tracker it touches
  /// and `queued` returned; call again with the same waiter to retry (it then
  /// only yields to waiters queued before it).
  static acquire_status acquire(std::span<access_request> reqs, holder_kind holder, std::string* why,
                                const access_waiter* waiter = nullptr);

  /// Removes a queued request from every tracker it waits in.
  static void withdraw(std::span<access_request> reqs, const void* owner) noexcept;

  static std::uint64_t next_wait_seq() noexcept;

  /// Releases a held lease. A lease taken without the lock (shared_read_id)
  /// is a count, not an entry: releasing it twice is the caller's bug.
  void release(std::uint64_t id) noexcept;
  /// Releases every lease of `leases` (all of this tracker) under one lock,
  /// then tells the waiters once: the reactor's batched release (lease_batch).
  void release(std::span<const lease_ref> leases) noexcept;
  /// Keeps the lease for good and makes later conflicts report `retained`;
  /// requests queued on the tracker are told to retry (they now fail).
  /// Returns the lease's id from now on (a shared read becomes an entry).
  [[nodiscard]] std::uint64_t mark_retained(std::uint64_t id) noexcept;

  /// The id of every shared read (a whole-extent read by a run, taken
  /// without the lock while the gate is open); never an entry's id (slot
  /// index ~0u).
  static constexpr std::uint64_t shared_read_id = ~std::uint64_t{0};
  /// The slot index of a lone lease's id (see solo_held): never an entry's.
  /// A lone lease's id is (sequence << 32) | solo_slot, its own.
  static constexpr std::uint32_t solo_slot = ~std::uint32_t{0} - 1;

  /// Entries and waiters now held (tests, diagnostics).
  std::size_t active_count() const;
  std::size_t waiting_count() const;
  /// Whether shared reads are sent to the locked path now (tests).
  bool gate_is_closed() const noexcept { return shared_.load(std::memory_order_acquire) & gate_closed; }
  /// Whether a lone lease is held, taken without the lock (tests).
  bool solo_is_held() const noexcept { return shared_.load(std::memory_order_acquire) & solo_held; }

 private:
  struct entry {
    std::uint64_t id;  // (sequence << 32) | slot index; 0: the slot is free
    std::size_t begin, end;
    access_mode mode;
    holder_kind holder;
  };
  struct waiter {
    std::uint64_t seq;
    const void* owner;
    access_listener* listener;
    std::size_t begin, end;
    access_mode mode;
  };

  // Whole-extent reads by runs while no write is held or queued: counted
  // here with one atomic operation each way instead of an entry under the
  // mutex (docs/DESIGN.md, "Shared reads without the lock"). The top bit is
  // the gate, changed under the mutex, or by a lone write's claim (which
  // busy keeps from happening while a mutex holder looks): set whenever
  // writers_ > 0, a lone write is held or waiting_ is not empty, and left
  // set after they go (a write's claim given back leaves it set too), until
  // a shared read finds it so and opens it (acquire): a buffer only ever
  // written (a file read's destination, a run's output) then takes its
  // write leases with no atomic operation on the gate. A set gate sends
  // shared reads to the locked path.
  // solo_held: a lone lease, the only one of the tracker, taken and given
  // back with one atomic operation each instead of a lock pair (docs/
  // DESIGN.md, "A lone lease without the lock"); its range is in solo_*.
  // busy: the locked path has been used: set under the mutex before a
  // locked acquisition looks at anything, so no lone lease is claimed while
  // it looks (but for the moment a conversion gives its claims back, after
  // which it is set again) or while its entries and waiters exist. It is
  // not cleared when they go: an acquisition of several allocations that goes
  // through the locked path (a run's buffers, one of them held by someone
  // else) would otherwise pay an atomic operation per allocation to set it
  // and another to clear it (a 3-buffer run's acquire and release when every
  // run went there: 97 -> 132 ns in xrtio-lease-cost's terms). An
  // acquisition whose allocations (each named once) have no entries or
  // waiters clears it, under their mutexes, with the compare-and-swaps that
  // claim its lone leases.
  // Below them: takes in progress (pending_unit each, bits 32-60: an
  // acquisition of several allocations takes them all before any is held)
  // and held shared reads (bits 0-31).
  static constexpr std::uint64_t gate_closed = std::uint64_t{1} << 63;
  static constexpr std::uint64_t solo_held = std::uint64_t{1} << 62;
  static constexpr std::uint64_t busy = std::uint64_t{1} << 61;
  static constexpr std::uint64_t pending_unit = std::uint64_t{1} << 32;
  static constexpr std::uint64_t pending_mask = busy - pending_unit;
  static constexpr std::uint64_t held_mask = pending_unit - 1;
  std::atomic<std::uint64_t> shared_{0};
  // The lone lease: written by its holder between its claim (solo_held set)
  // and its publication (solo_id_ stored, never 0), read by the locked path
  // once it has seen the id (busy then keeps a new one from being claimed).
  // solo_id_ also tells a stale id from the live one, as an entry's
  // sequence does; it is 0 while a claim is unpublished or being given back.
  std::size_t solo_begin_ = 0, solo_end_ = 0;
  access_mode solo_mode_ = access_mode::read;
  holder_kind solo_holder_ = holder_kind::host;
  std::atomic<std::uint64_t> solo_id_{0};
  std::uint32_t solo_seq_ = 0;
  const std::size_t extent_;

  mutable std::mutex mutex_;
  // Held leases in slots: a lease's id names its slot, so release is O(1)
  // however many runs share the allocation. Freed slots are reused; the
  // vectors keep their capacity (no allocation once warm).
  std::vector<entry> slots_;
  std::vector<std::uint32_t> free_;
  std::size_t live_ = 0;
  std::size_t writers_ = 0;      // live write leases: with none, a read cannot conflict with a held lease
  std::vector<waiter> waiting_;  // ascending seq
  std::uint64_t next_seq_ = 1;
  std::uint64_t add(std::size_t begin, std::size_t end, access_mode mode, holder_kind holder);
  entry* find(std::uint64_t id) noexcept;
  /// Under mutex_: frees the lease's slot, if it is held.
  void drop(std::uint64_t id) noexcept;
  /// Under mutex_: tells every queued request's listener to retry.
  void notify_waiters() noexcept;
  /// Under mutex_: closes the gate if writers_ or waiting_ need it (it is
  /// opened only by acquire, for a shared read).
  void close_gate() noexcept;
  /// All of `reqs` (shared-eligible) as shared reads without the lock, or none.
  static bool take_shared(std::span<access_request> reqs) noexcept;
  /// Whether `r` may take the shared path (a read of its tracker's whole extent).
  static bool shared_eligible(const access_request& r) noexcept;
  /// Adds `unit` (1: held, pending_unit: pending) without the lock, if the gate is open.
  bool try_shared(std::uint64_t unit) noexcept;
  /// Takes every request of `reqs` as its allocation's lone lease, or none:
  /// each allocation's word must hold nothing outside `allowed` (the gate;
  /// and busy, under the mutexes with the locked paths empty, which clears
  /// it, and leaves it clear where claims are given back: the caller sets it
  /// again); sets the ids.
  static bool take_solo(std::span<access_request> reqs, holder_kind holder, std::uint64_t allowed) noexcept;
  /// The claim (solo_held set, not published), its publication (range,
  /// then the id), and a claim given back unpublished.
  bool claim_solo(access_mode mode, std::uint64_t allowed) noexcept;
  void publish_solo(access_request& r, holder_kind holder) noexcept;
  void unclaim_solo() noexcept;
  /// Gives the lone lease back; tells the waiters if the locked path is busy.
  void release_solo(std::uint64_t id) noexcept;
  /// Whether `id` is the lone lease now; if so takes it (solo_id_ to 0),
  /// leaving its bit to the caller.
  bool drop_solo(std::uint64_t id) noexcept;
  /// Under mutex_, busy set: whether the lone lease is held now (then its
  /// solo_* fields are readable). Waits for a claim not yet published until
  /// it is published or given back.
  bool solo_now() const noexcept;
  /// Under mutex_: sets busy, so no lone lease is claimed while the locked path looks.
  void hold_off_solo() noexcept;
  static bool is_solo_id(std::uint64_t id) noexcept {
    return static_cast<std::uint32_t>(id) == solo_slot && id != shared_read_id;
  }
  /// Gives back `n` shared reads; the last one out while the gate is closed
  /// tells the waiters (a queued writer may now proceed).
  void release_shared(std::uint64_t n) noexcept;
  std::uint64_t shared_count() const noexcept { return shared_.load(std::memory_order_acquire) & held_mask; }

  static bool overlaps(std::size_t b1, std::size_t e1, std::size_t b2, std::size_t e2) noexcept {
    return b1 < e2 && b2 < e1;
  }
  static bool conflicts(access_mode a, access_mode b) noexcept {
    return a == access_mode::write || b == access_mode::write;
  }
};

}  // namespace xrtio::detail
