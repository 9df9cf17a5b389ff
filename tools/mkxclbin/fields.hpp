// The description's field syntax: numbers and sizes, names, bank types and
// comma lists. Used by the parser (description.cpp) only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "description.hpp"

namespace xrtio::mkxclbin {

/// The error for a fault on `line`: "line N: why".
bad_input at_line(int line, const std::string& why);

/// A decimal or 0x-hex number; with `allow_suffix`, a size that may end in
/// K, M or G (binary units). Throws at_line(line, ...) otherwise.
std::uint64_t parse_number(const std::string& s, bool allow_suffix, int line);

/// A bank type name (DDR4, HBM, ...) as xclbin.h's mem_type.
std::uint8_t parse_mem_type(const std::string& s, int line);

/// `s` cut at every `sep`, empty pieces kept.
std::vector<std::string> split(const std::string& s, char sep);

/// Non-empty, and only letters, digits and _ - . [ ].
bool valid_name(const std::string& s);

/// Non-empty, and only printable ASCII ('!' to '~'): a platform name or an
/// argument type, which land in the header and the metadata XML as written
/// (a NUL or a control character there makes XRT refuse the xclbin).
bool printable(const std::string& s);

/// Non-empty, and only letters, digits and _: a kernel name. XRT 2.13 finds
/// a kernel's compute units with a regular expression made from its name,
/// so '.', '[' and ']' would match other kernels' units or be refused.
bool valid_identifier(const std::string& s);

}  // namespace xrtio::mkxclbin
