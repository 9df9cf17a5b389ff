// The CPU's spin-wait hint, for the reactor's polling loops: it lets a
// sibling hyper-thread run and saves power while spinning, on every
// architecture XRT hosts run on (x86-64 servers, aarch64 edge boards).
#pragma once

namespace xrtio::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
  asm volatile("yield" ::: "memory");
#else
  asm volatile("" ::: "memory");  // no hint: at least do not let the loop be folded away
#endif
}

}  // namespace xrtio::detail
