// The whole xclbin: the axlf header, the section headers and the 8-byte
// aligned sections, built from a checked description.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "description.hpp"

namespace xrtio::mkxclbin {

// The xclbin's bytes: MEM_TOPOLOGY, IP_LAYOUT, CONNECTIVITY and
// EMBEDDED_METADATA, header magic "xclbin2", no signature, XCLBIN_FLAT,
// timestamp 0. The uuid is `uuid_override` (--uuid), else the description's,
// else derived from `text`, the description as read. Throws bad_input: first
// for compute units sharing a base address, then for a malformed uuid.
std::vector<char> build_xclbin(const description& d, std::string_view text,
                               const std::optional<std::string>& uuid_override);

}  // namespace xrtio::mkxclbin
