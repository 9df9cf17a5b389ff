// A lock-free multi-producer, single-consumer stack over nodes that carry
// their own link: submitters push from any thread, the reactor takes the
// whole stack at once (in push order) with one exchange.
#pragma once

#include <atomic>

namespace xrtio::detail {

template <class T, T* T::*Next>
class atomic_intrusive_stack {
 public:
  /// Any thread. seq_cst, so that a pusher that then reads the consumer's
  /// "sleeping" flag and the consumer that set it before re-reading
  /// empty() cannot both miss each other.
  void push(T* n) noexcept {
    T* head = head_.load(std::memory_order_relaxed);
    do n->*Next = head;
    while (!head_.compare_exchange_weak(head, n, std::memory_order_seq_cst, std::memory_order_relaxed));
  }
  bool empty() const noexcept { return head_.load(std::memory_order_seq_cst) == nullptr; }
  /// A hint for any thread, without ordering: a pusher sees its own pushes
  /// that were not taken since; a taker may see an empty stack late.
  bool empty_relaxed() const noexcept { return head_.load(std::memory_order_relaxed) == nullptr; }
  /// Everything pushed so far, oldest first, null-terminated. Any thread may
  /// take (the exchange hands each node to exactly one taker); in the
  /// reactor only its thread does, except after it ended.
  T* take_all_fifo() noexcept {
    T* lifo = head_.exchange(nullptr, std::memory_order_acquire);
    T* fifo = nullptr;
    while (lifo) {
      T* n = lifo->*Next;
      lifo->*Next = fifo;
      fifo = lifo;
      lifo = n;
    }
    return fifo;
  }

 private:
  std::atomic<T*> head_{nullptr};
};

}  // namespace xrtio::detail
