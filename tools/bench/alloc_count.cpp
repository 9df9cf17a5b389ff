// The replaced global operator new/delete (malloc-based) that count every
// allocation, and the optional stack tracer for allocations in a window.
#include "alloc_count.hpp"

#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
std::atomic<std::uint64_t> g_allocs{0};
// XRTIO_BENCH_ALLOC_TRACE=N: print the stacks of the first N allocations made
// inside a measurement window (to find per-run allocations).
std::atomic<int> g_trace_left{0};
std::uint64_t g_trace_every = 1;  // XRTIO_BENCH_ALLOC_TRACE_EVERY=K: every K-th allocation only
std::atomic<std::uint64_t> g_trace_seen{0};
std::atomic<bool> g_trace_on{false};
thread_local bool t_in_trace = false;
void trace_alloc(std::size_t n) noexcept {
  if (!g_trace_on.load(std::memory_order_relaxed) || t_in_trace) return;
  if (g_trace_seen.fetch_add(1) % g_trace_every) return;
  if (g_trace_left.fetch_sub(1) <= 0) return;
  t_in_trace = true;
  void* frames[24];
  int k = backtrace(frames, 24);
  char head[64];
  int len = std::snprintf(head, sizeof head, "--- alloc %zu bytes\n", n);
  [[maybe_unused]] auto w = ::write(2, head, std::size_t(len));
  backtrace_symbols_fd(frames, k, 2);
  t_in_trace = false;
}
}  // namespace

namespace bench {

std::uint64_t allocations() noexcept { return g_allocs.load(); }

void arm_alloc_trace_from_env() {
  if (const char* t = std::getenv("XRTIO_BENCH_ALLOC_TRACE")) {
    void* f[2];
    backtrace(f, 2);  // loads libgcc before any traced allocation
    g_trace_left.store(std::atoi(t));
    if (const char* e = std::getenv("XRTIO_BENCH_ALLOC_TRACE_EVERY")) g_trace_every = std::max(1, std::atoi(e));
  }
}

void trace_allocations(bool open) noexcept { g_trace_on.store(open && g_trace_left.load() > 0); }

}  // namespace bench

void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  trace_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  trace_alloc(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  trace_alloc(n);
  if (void* p = std::aligned_alloc(static_cast<std::size_t>(a), (n + static_cast<std::size_t>(a) - 1) &
                                                                     ~(static_cast<std::size_t>(a) - 1)))
    return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  trace_alloc(n);
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
