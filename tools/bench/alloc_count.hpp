// Allocation counting: the replaced global operator new (alloc_count.cpp)
// counts every call; XRTIO_BENCH_ALLOC_TRACE prints the stacks of some.
#pragma once

#include <cstdint>

namespace bench {

// Calls of the global operator new so far, whole process.
std::uint64_t allocations() noexcept;

// XRTIO_BENCH_ALLOC_TRACE=N: print the stacks of the first N allocations made
// inside measurement windows; XRTIO_BENCH_ALLOC_TRACE_EVERY=K: every K-th only.
void arm_alloc_trace_from_env();

// Opens (true) or closes (false) the window in which allocations are traced.
void trace_allocations(bool open) noexcept;

}  // namespace bench
