// The CPU's spin-wait hint, for busy-poll loops (the reactor's, the simulated device's idle watch).
#pragma once

namespace xrtio::detail {

// Why: a spin hint lets the core save power and yield to its SMT sibling while we busy-poll.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");  // GCC 12 has neither __yield() nor __builtin_arm_yield()
#else
  __asm__ __volatile__("" ::: "memory");  // no portable hint: a compiler barrier only
#endif
}

}  // namespace xrtio::detail
