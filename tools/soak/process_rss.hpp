// Resident set size of this process, for the soak's memory-growth check.
#pragma once

#include <cstdint>

namespace soak {

/// Bytes resident now (/proc/self/statm), 0 if unreadable.
std::uint64_t resident_bytes() noexcept;

}  // namespace soak
