// A small inline arena for the executor's wrapper of a completion post, so
// posting from the reactor thread allocates nothing (docs/DESIGN.md, "Runs":
// no allocation per run in steady state).
#pragma once

#include <cstddef>
#include <new>

namespace xrtio::detail {

template <std::size_t N>
struct post_arena {
  alignas(std::max_align_t) unsigned char bytes[N];
  bool used = false;
};
template <class T, std::size_t N>
struct arena_allocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = arena_allocator<U, N>;
  };
  post_arena<N>* arena;
  explicit arena_allocator(post_arena<N>* a) noexcept : arena(a) {}
  template <class U>
  arena_allocator(const arena_allocator<U, N>& o) noexcept : arena(o.arena) {}
  T* allocate(std::size_t n) {
    if (!arena->used && n * sizeof(T) <= N && alignof(T) <= alignof(std::max_align_t)) {
      arena->used = true;
      return reinterpret_cast<T*>(arena->bytes);
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    if (reinterpret_cast<unsigned char*>(p) == arena->bytes) arena->used = false;
    else ::operator delete(p);
  }
  template <class U>
  bool operator==(const arena_allocator<U, N>& o) const noexcept { return arena == o.arena; }
  template <class U>
  bool operator!=(const arena_allocator<U, N>& o) const noexcept { return arena != o.arena; }
};

}  // namespace xrtio::detail
