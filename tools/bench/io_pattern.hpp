// The --io test file's content and the per-request check of what was read.
// Every 8-byte word of the file is a function of its offset, so a few words
// of any request can be checked without reading the file again: a contender
// that reads nothing, the wrong offset or stale data fails the check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace bench::io {

// The word at file offset `off` (a multiple of 8): splitmix64 of the offset.
inline std::uint64_t pattern_word(std::uint64_t off) noexcept {
  std::uint64_t z = off + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The words checked in a request of n bytes (n >= 8, a multiple of 8) read
// from file offset off: the first, the last, and one in between that depends
// on the offset (so every part of a buffer gets checked over many requests).
inline std::size_t sample_position(std::size_t n, std::uint64_t off, int which) noexcept {
  std::size_t words = n / 8;
  if (which == 0) return 0;
  if (which == 1) return (words - 1) * 8;
  return std::size_t(pattern_word(off) % words) * 8;
}

// Before a request: the sampled words get values the file never has there,
// so a read that leaves the buffer untouched fails verify().
inline void poison(std::byte* p, std::size_t n, std::uint64_t off) noexcept {
  for (int w = 0; w < 3; ++w) {
    std::size_t at = sample_position(n, off, w);
    std::uint64_t v = ~pattern_word(off + at);
    std::memcpy(p + at, &v, 8);
  }
}

// After a request: true when the sampled words hold the file's content.
inline bool verify(const std::byte* p, std::size_t n, std::uint64_t off) noexcept {
  for (int w = 0; w < 3; ++w) {
    std::size_t at = sample_position(n, off, w);
    std::uint64_t v;
    std::memcpy(&v, p + at, 8);
    if (v != pattern_word(off + at)) return false;
  }
  return true;
}

}  // namespace bench::io
