// The unaligned forms of the global operator delete over std::free, for a
// test executable that replaces operator new with malloc (test_alloc,
// test_xrt_alloc): under ASan a runtime's own delete paired with a
// replaced new is reported as mismatched. Include from one file of the
// executable only: these are definitions.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
