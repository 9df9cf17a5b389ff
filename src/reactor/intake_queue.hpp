// The reactor's intake: runs pushed from any thread, taken by the loop
// (docs/DESIGN.md, "Intake and wake-ups"). A bounded ring of pointers
// first, a linked stack when the ring is full.
//
// Why a ring: with the linked stack alone the loop had to chase one link per
// run, each run's address known only once the previous run's cache line
// (last written by the submitting thread) had arrived, so the misses came
// one after the other: at 4096 runs in flight the chase was a third of the
// reactor thread's samples. The ring gives eight addresses per cache line,
// and the loop fetches a batch of runs ahead before it handles them
// (docs/PERFORMANCE.md, "The reactor's intake ring").
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "util/atomic_intrusive_stack.hpp"

namespace xrtio::detail {

template <class T, T* T::*Next, std::uint64_t T::*Pos, std::size_t N = 4096>
class intake_queue {
  static_assert(N >= 64 && (N & (N - 1)) == 0, "a power of two");

 public:
  /// Any thread. Publishes with a sequentially consistent read-modify-write
  /// (the ring's slot exchanged, or the stack's CAS), so that a pusher that
  /// then reads the consumer's "sleeping" flag and the consumer that set it
  /// before calling empty() cannot both miss each other. An exchange, not a
  /// store: qemu-user 7.2 lets a seq_cst store pass a later seq_cst load
  /// (reactor::announce_sleep), but not an RMW.
  void push(T* n) noexcept {
    if (auto i = claim(n); i != no_place) publish(i, n);
  }

  /// push() in its two steps, apart for tests that need a slot claimed and
  /// not yet published (a submitter preempted between them). claim()
  /// returns the ring index claimed for n, or no_place after it pushed n
  /// onto the stack.
  std::uint64_t claim(T* n) noexcept {
    std::uint64_t t = tail_.load(std::memory_order_relaxed);
    // Behind this thread's own runs in the stack while any are there: the
    // consumer may be reading the ring past their places before it takes
    // them, so a run of this thread put in the ring now could be taken
    // first.
    if (!overflow_.empty_relaxed()) return to_stack(n, t);
    do {
      // Full: the slot t would reuse may not be taken yet. head_ is
      // published after the slots it passed were cleared (release), so a
      // slot below head_ + N is free for good once head_ is read here.
      // Signed: a t read before the consumer passed it is behind head_,
      // and then the CAS fails and reloads it.
      if (static_cast<std::int64_t>(t - head_.load(std::memory_order_acquire)) >= static_cast<std::int64_t>(N))
        return to_stack(n, t);
    } while (!tail_.compare_exchange_weak(t, t + 1, std::memory_order_relaxed, std::memory_order_relaxed));
    return t;
  }
  void publish(std::uint64_t index, T* n) noexcept { slots_[index & (N - 1)].exchange(n, std::memory_order_seq_cst); }

  static constexpr std::uint64_t no_place = ~std::uint64_t(0);

  /// The consumer. Nothing to take: the next slot is not published and the
  /// stack is empty. A slot claimed and not yet published reads as empty;
  /// its pusher publishes, then reads the consumer's flag, as any other.
  /// (Runs from the stack that wait for that slot are not counted: they
  /// come with it.)
  bool empty() const noexcept {
    return slots_[next_ & (N - 1)].load(std::memory_order_seq_cst) == nullptr && overflow_.empty();
  }

  /// The consumer. Everything claimed has been taken: unlike empty(), a
  /// slot claimed and not yet published (and the runs behind it) counts.
  /// For the loop's exit, which must not leave a run pushed before it began
  /// shutting down to the late submitter who will publish it.
  bool settled() const noexcept {
    return tail_.load(std::memory_order_seq_cst) == next_ && pending_ == nullptr && overflow_.empty();
  }

  /// The consumer: calls take(p) for every run pushed so far, in push order
  /// for each pushing thread. Up to `batch` runs at a time are read from the
  /// ring and given to prefetch(p) first, then handed to take(). take() may
  /// reuse the link (Next). Stops at a slot claimed and not yet published:
  /// its run, the ones after it and the runs from the stack whose place is
  /// after it come with a later call.
  template <class Prefetch, class Take>
  void take_all(Prefetch&& prefetch, Take&& take) noexcept {
    // The stack first: a run there goes before the ring's slot at its
    // place. A load before the exchange: the stack is rarely used, and an
    // exchange on every call would take its line from the pushers, who
    // read it on every push.
    for (T* fifo = overflow_.empty_relaxed() ? nullptr : overflow_.take_all_fifo(); fifo;) {
      T* p = fifo;
      fifo = fifo->*Next;
      p->*Next = nullptr;
      *pending_last_ = p;
      pending_last_ = &(p->*Next);
      if (p->*Pos < pending_min_) pending_min_ = p->*Pos;
    }
    constexpr std::size_t batch = 32;
    std::array<T*, batch> got;
    for (;;) {
      const std::uint64_t base = next_;
      std::size_t n = 0;
      for (; n < batch; ++n) {
        auto& slot = slots_[(base + n) & (N - 1)];
        T* p = slot.load(std::memory_order_acquire);
        if (!p) break;
        slot.store(nullptr, std::memory_order_relaxed);
        prefetch(p);
        got[n] = p;
      }
      if (n > 0) {
        next_ = base + n;
        head_.store(next_, std::memory_order_release);
      }
      for (std::size_t i = 0; i < n; ++i) {
        if (base + i >= pending_min_) [[unlikely]]
          take_pending(base + i, take);
        take(got[i]);
      }
      if (n < batch) break;
    }
    if (next_ >= pending_min_) take_pending(next_, take);
  }

  /// The consumer: everything take_all would give, linked through Next in
  /// the same order, null-terminated. For taking under a lock and handling
  /// outside it.
  T* take_all_fifo() noexcept {
    T* first = nullptr;
    T** last = &first;
    take_all([](T*) noexcept {},
             [&](T* p) noexcept {
               *last = p;
               last = &(p->*Next);
             });
    *last = nullptr;
    return first;
  }

 private:
  // t: a tail this thread read after its last claim. Its place in the
  // ring's order: after every slot this thread claimed, before any it
  // claims later (tail_ only grows).
  std::uint64_t to_stack(T* n, std::uint64_t t) noexcept {
    n->*Pos = t;
    overflow_.push(n);
    return no_place;
  }

  // Runs from the stack whose place is at or before ring position `at`, in
  // the stack's order (each thread's in its push order, with places that
  // never decrease), so a thread's runs keep their order.
  // Called only once `at` reaches the smallest place among them, so the
  // list is walked once per place reached, not once per run taken.
  template <class Take>
  void take_pending(std::uint64_t at, Take& take) noexcept {
    T** link = &pending_;
    pending_last_ = &pending_;
    pending_min_ = no_place;
    while (T* p = *link) {
      if (p->*Pos <= at) {
        *link = p->*Next;
        take(p);
      } else {
        if (p->*Pos < pending_min_) pending_min_ = p->*Pos;
        link = &(p->*Next);
        pending_last_ = link;
      }
    }
  }

  // Producers: tail_ on a line of its own (one pushing thread keeps it),
  // head_ on another (written once per batch taken, read by each push).
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  alignas(64) std::atomic<std::uint64_t> head_{0};
  // The consumer's own: its position (head_ is its published copy) and the
  // runs taken from the stack that wait for their place. One consumer at a
  // time; whoever takes over synchronizes with the last (a lock, or the
  // release and acquire of a flag).
  alignas(64) std::uint64_t next_ = 0;
  T* pending_ = nullptr;
  T** pending_last_ = &pending_;
  std::uint64_t pending_min_ = no_place;  // the smallest place in pending_
  alignas(64) atomic_intrusive_stack<T, Next> overflow_;
  alignas(64) std::array<std::atomic<T*>, N> slots_{};
};

}  // namespace xrtio::detail
