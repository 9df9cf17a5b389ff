// A singly linked FIFO over nodes that carry their own link: the reactor's
// lists of runs (waiting for leases, on the device, finished), with no
// allocation and O(1) push at either end.
#pragma once

namespace xrtio::detail {

template <class T, T* T::*Next>
class intrusive_queue {
 public:
  intrusive_queue() = default;
  intrusive_queue(const intrusive_queue&) = delete;
  intrusive_queue& operator=(const intrusive_queue&) = delete;

  bool empty() const noexcept { return head_ == nullptr; }
  T* front() const noexcept { return head_; }

  void push_back(T* n) noexcept {
    n->*Next = nullptr;
    *tail_ = n;
    tail_ = &(n->*Next);
  }
  void push_front(T* n) noexcept {
    n->*Next = head_;
    if (!head_) tail_ = &(n->*Next);
    head_ = n;
  }
  T* pop_front() noexcept {
    T* n = head_;
    if (n) {
      head_ = n->*Next;
      if (!head_) tail_ = &head_;
      n->*Next = nullptr;
    }
    return n;
  }
  /// Empties the queue, returning its nodes as a null-terminated chain.
  T* take_all() noexcept {
    T* h = head_;
    head_ = nullptr;
    tail_ = &head_;
    return h;
  }
  /// Visits the first `limit` nodes in order; a node for which `take(n)`
  /// returns true is unlinked. `take` may relink n (push it on another
  /// list): its successor was read before the call.
  template <class F>
  void erase_if(F take, unsigned limit = ~0u) noexcept(noexcept(take(head_))) {
    for (T** p = &head_; *p && limit; --limit) {
      T* n = *p;
      T* succ = n->*Next;
      if (take(n)) {
        *p = succ;
        if (tail_ == &(n->*Next)) tail_ = p;
      } else {
        p = &(n->*Next);
      }
    }
  }

 private:
  T* head_ = nullptr;
  T** tail_ = &head_;
};

}  // namespace xrtio::detail
