// A process-wide pool of a few fixed-size blocks, each taken and given back
// with one atomic operation, and a stateless allocator over it. For handler
// memory that Asio would otherwise take from the heap every time: an
// operation started outside any handler (the in-loop driver's ring watch,
// armed between rounds of handlers) gets no recycled memory from Asio, and a
// function given to an executor's execute() (the flush of gathered reads,
// run_op.hpp) is allocated with the executor's allocator, std::allocator
// unless one is asked for. The
// allocator holds no pointer, so an operation that outlives whoever started
// it (its io_context may run or destroy it later) frees into a pool that is
// always there. Requests larger than a block, or made while every block is
// taken, go to operator new.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <new>

namespace xrtio::detail {

class static_block_pool {
 public:
  static constexpr std::size_t block_size = 256;
  static constexpr std::size_t block_count = 64;  // one bit each in used_

  static void* allocate(std::size_t n) {
    if (n <= block_size) {
      auto& p = instance();
      std::uint64_t used = p.used_.load(std::memory_order_relaxed);
      while (~used != 0) {
        unsigned i = static_cast<unsigned>(std::countr_one(used));
        if (p.used_.compare_exchange_weak(used, used | (std::uint64_t(1) << i), std::memory_order_acquire,
                                          std::memory_order_relaxed))
          return p.storage_ + i * block_size;
      }
    }
    return ::operator new(n);
  }

  static void deallocate(void* q) noexcept {
    auto& p = instance();
    auto* b = static_cast<std::byte*>(q);
    if (b >= p.storage_ && b < p.storage_ + sizeof p.storage_) {
      auto i = static_cast<std::size_t>(b - p.storage_) / block_size;
      p.used_.fetch_and(~(std::uint64_t(1) << i), std::memory_order_release);
      return;
    }
    ::operator delete(q);  // unsized: clang without -fsized-deallocation (the fuzz build) has no sized form
  }

  /// Blocks taken now (for tests).
  static unsigned in_use() noexcept {
    return static_cast<unsigned>(std::popcount(instance().used_.load(std::memory_order_relaxed)));
  }

 private:
  // Never destroyed (trivially destructible members): operations freed from
  // static destructors at exit still find it.
  static static_block_pool& instance() noexcept {
    static static_block_pool pool;
    return pool;
  }
  alignas(std::max_align_t) std::byte storage_[block_count * block_size];
  std::atomic<std::uint64_t> used_{0};
};

template <class T>
struct static_block_allocator {
  using value_type = T;
  static_block_allocator() noexcept = default;
  template <class U>
  static_block_allocator(const static_block_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(static_block_pool::allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { static_block_pool::deallocate(p); }
  template <class U>
  bool operator==(const static_block_allocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace xrtio::detail
