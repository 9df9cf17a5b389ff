// The xclbin's uuid: taken from --uuid or the description's uuid line, or
// derived from the description text so that the output is reproducible.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "description.hpp"

namespace xrtio::mkxclbin {

using xclbin_uuid = std::array<unsigned char, 16>;

/// A reproducible uuid from `text` (two 64-bit FNV-1a hashes).
xclbin_uuid derive_uuid(std::string_view text);

/// 32 hex digits, dashes anywhere. Throws bad_input otherwise.
xclbin_uuid parse_uuid(const std::string& s);

/// `override` (--uuid) if given, else the description's uuid line, else
/// derive_uuid(text).
xclbin_uuid choose_uuid(const description& d, std::string_view text, const std::optional<std::string>& override);

}  // namespace xrtio::mkxclbin
