// The fuzz targets' input, read as a stream of small decisions: each call
// takes the next bytes, and an exhausted input reads as zeros, so every
// byte string is a valid (if short) program and a mutation of one byte
// changes one decision.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace xfuzz {

class fuzz_input {
 public:
  explicit fuzz_input(std::span<const std::uint8_t> bytes) noexcept : bytes_(bytes) {}

  bool empty() const noexcept { return pos_ >= bytes_.size(); }
  std::size_t remaining() const noexcept { return empty() ? 0 : bytes_.size() - pos_; }

  std::uint8_t byte() noexcept { return empty() ? 0 : bytes_[pos_++]; }
  bool flag() noexcept { return (byte() & 1) != 0; }

  /// A value in [lo, hi] (inclusive) from as many bytes as the span needs.
  std::uint64_t in_range(std::uint64_t lo, std::uint64_t hi) noexcept {
    const std::uint64_t span = hi - lo;
    std::uint64_t v = 0;
    // One byte per 8 bits of the span: at most 8, and `covered` ends at
    // UINT64_MAX at the latest.
    for (std::uint64_t covered = 0; covered < span; covered = (covered << 8) | 0xff) v = (v << 8) | byte();
    return span == UINT64_MAX ? v : lo + v % (span + 1);
  }

  /// A little-endian unsigned of `n` (1-8) bytes.
  std::uint64_t raw(unsigned n) noexcept {
    std::uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }

  /// Up to `max` of the remaining bytes, as text.
  std::string_view text(std::size_t max) noexcept {
    std::size_t n = remaining() < max ? remaining() : max;
    std::string_view s(reinterpret_cast<const char*>(bytes_.data()) + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
};

}  // namespace xfuzz
