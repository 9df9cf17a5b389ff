// Small encoders the section writers share: a struct's raw bytes appended to
// a section, and a number as 0x-hex text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

namespace xrtio::mkxclbin {

/// Appends `v`'s bytes, as laid out in memory (xclbin.h's structs are
/// little-endian on the hosts XRT supports).
template <class T>
void put(std::vector<char>& out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  const char* p = reinterpret_cast<const char*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

/// "0x" and lower-case hex digits.
inline std::string hex(std::uint64_t v) {
  char b[24];  // "0x" + 16 digits + NUL, with room to spare
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace xrtio::mkxclbin
